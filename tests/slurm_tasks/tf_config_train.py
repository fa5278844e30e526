"""A seeds-style TF_CONFIG script that knows nothing about tf_for_slurm: the ps ends in
server.join() (never returns); workers fit y = 3x + 1 with variables on the ps.

    tf_config_train.py STEPS [MARK_DIR]

Workers write MARK_DIR/worker<i>.up once training runs (non-chiefs wait for the chief's file
first) and print "worker <i> done at <unix time>"
when finished (the tests measure how soon the step ends after that).
"""

import json
import os
import sys
import time

import tensorflow as tf

steps = int(sys.argv[1])
mark_dir = sys.argv[2] if len(sys.argv) > 2 else None
v1 = tf.compat.v1
config = json.loads(os.environ["TF_CONFIG"])
cluster, job, index = config["cluster"], config["task"]["type"], config["task"]["index"]
server = tf.distribute.Server(tf.train.ClusterSpec(cluster), job_name=job, task_index=index)
if job == "ps":
    server.join()

v1.disable_eager_execution()
with v1.device(v1.train.replica_device_setter(worker_device=f"/job:worker/task:{index}", cluster=cluster)):
    w = v1.get_variable("w", initializer=0.0)
    b = v1.get_variable("b", initializer=0.0)
    x = v1.random_uniform([32])
    loss = v1.reduce_mean(tf.square(w * x + b - (3.0 * x + 1.0)))
    step = v1.train.get_or_create_global_step()
    train = v1.train.GradientDescentOptimizer(0.3).minimize(loss, global_step=step)
session_config = v1.ConfigProto(device_filters=["/job:ps", f"/job:worker/task:{index}"])
if mark_dir and index != 0:
    # A barrier on the chief (the seeds' BarrierOnChiefHook idea): a non-chief that opens its
    # session before the chief initialised the variables sleeps TensorFlow's recovery_wait_secs (30 s).
    chief_up = os.path.join(mark_dir, "worker0.up")
    deadline = time.monotonic() + 180
    while not os.path.exists(chief_up):
        if time.monotonic() > deadline:
            sys.exit(f"worker {index}: the chief did not start within 180 s")
        time.sleep(0.05)
with v1.train.MonitoredTrainingSession(master=server.target, is_chief=index == 0, config=session_config,
                                       hooks=[v1.train.StopAtStepHook(last_step=steps)]) as sess:
    if mark_dir:
        open(os.path.join(mark_dir, f"worker{index}.up"), "w").close()
    value = float("nan")
    while not sess.should_stop():
        _, value = sess.run([train, loss])
print(f"worker {index} done at {time.time():.3f} loss {value:.4f}", flush=True)
