"""TF1 between-graph ps/worker training, written the way seed 000 and TensorFlow 1's tutorial write
it (ported to tf.compat.v1 only): TF_CONFIG in, a ps that join()s forever, no device filters, no
barrier.  Nothing here knows about tf_for_slurm.

    python tf1_ps_worker.py [--steps N] [--slow-task worker:1 --slow-seconds S] [--checkpoint-dir D]
                            [--pace SECONDS] [--hang-once FILE]

--slow-task stands for a slow node: that task loads its data S seconds later than the others.
--checkpoint-dir is MonitoredTrainingSession's (the chief saves there and restores from it).
--pace sleeps that long after each step (a test's pacing: training lasts at least steps * pace).
--hang-once stands for a hang inside TensorFlow: worker 1's session.run blocks forever at its 20th
step, the first time (it creates FILE).
"""

import argparse
import json
import os
import time

import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=300)
parser.add_argument("--slow-task", default="")
parser.add_argument("--slow-seconds", type=float, default=0.0)
parser.add_argument("--checkpoint-dir", default=None)
parser.add_argument("--pace", type=float, default=0.0)
parser.add_argument("--hang-once", default=None)
args = parser.parse_args()

config = json.loads(os.environ["TF_CONFIG"])
cluster = tf.train.ClusterSpec(config["cluster"])
job, index = config["task"]["type"], config["task"]["index"]
server = tf.distribute.Server(cluster, job_name=job, task_index=index)
if job == "ps":
    server.join()

v1 = tf.compat.v1
v1.disable_eager_execution()
with v1.device(v1.train.replica_device_setter(worker_device=f"/job:worker/task:{index}", cluster=cluster)):
    w = v1.get_variable("w", initializer=0.0)
    b = v1.get_variable("b", initializer=0.0)
    x = v1.random_uniform([64])
    loss = v1.reduce_mean(tf.square(w * x + b - (3.0 * x + 1.0)))
    global_step = v1.train.get_or_create_global_step()
    train_op = v1.train.GradientDescentOptimizer(0.3).minimize(loss, global_step=global_step)
if args.hang_once and (job, index) == ("worker", 1) and not os.path.exists(args.hang_once):
    runs = {"n": 0}

    def maybe_hang():
        runs["n"] += 1
        if runs["n"] == 20:
            open(args.hang_once, "w").close()
            print(f"{job} {index} hangs in session.run", flush=True)
            time.sleep(10 ** 6)  # inside session.run: the step never returns
        return 0

    with v1.device(f"/job:worker/task:{index}"):
        gate = v1.py_func(maybe_hang, [], tf.int64, stateful=True)
    with v1.control_dependencies([gate]):
        train_op = tf.group(train_op)

if args.slow_task == f"{job}:{index}":
    time.sleep(args.slow_seconds)  # a slow node: its data arrives late
print(f"{job} {index} opens its session at {time.time():.3f}", flush=True)
with v1.train.MonitoredTrainingSession(master=server.target, is_chief=(index == 0),
                                       checkpoint_dir=args.checkpoint_dir,
                                       hooks=[v1.train.StopAtStepHook(last_step=args.steps)]) as sess:
    print(f"{job} {index} training from step {sess.run(global_step)}", flush=True)
    value = None
    while not sess.should_stop():
        _, value = sess.run([train_op, loss])
        time.sleep(args.pace)
print(f"{job} {index} done at {time.time():.3f} (loss {value})", flush=True)
