"""An unmodified TF_CONFIG script in the style of the seeds: the ps ends in server.join() and knows
nothing about tf_for_slurm.  Workers fit y = 3x + 1 for a few steps with variables on the ps."""

import json
import os

import tensorflow as tf

v1 = tf.compat.v1
config = json.loads(os.environ["TF_CONFIG"])
cluster, job, index = config["cluster"], config["task"]["type"], config["task"]["index"]
server = tf.distribute.Server(tf.train.ClusterSpec(cluster), job_name=job, task_index=index)
if job == "ps":
    server.join()  # never returns

v1.disable_eager_execution()
with v1.device(v1.train.replica_device_setter(worker_device=f"/job:worker/task:{index}", cluster=cluster)):
    w = v1.get_variable("w", initializer=0.0)
    b = v1.get_variable("b", initializer=0.0)
    x = v1.random_uniform([32])
    loss = v1.reduce_mean(tf.square(w * x + b - (3.0 * x + 1.0)))
    step = v1.train.get_or_create_global_step()
    train = v1.train.GradientDescentOptimizer(0.5).minimize(loss, global_step=step)
session_config = v1.ConfigProto(device_filters=["/job:ps", f"/job:worker/task:{index}"])
with v1.train.MonitoredTrainingSession(master=server.target, is_chief=index == 0, config=session_config,
                                       hooks=[v1.train.StopAtStepHook(last_step=200)]) as sess:
    while not sess.should_stop():
        _, value = sess.run([train, loss])
print(f"worker {index} done, loss {value:.4f}", flush=True)
