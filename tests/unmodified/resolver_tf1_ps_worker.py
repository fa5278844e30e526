"""TF1 ps/worker training with TensorFlow's SlurmClusterResolver, written the way a TF1 course for an
HPC centre writes it (ported to tf.compat.v1 only): the roles in `jobs=`, two tasks per node and
two GPUs per node stated in the script, a ps that join()s forever, MonitoredTrainingSession.
Nothing here knows about tf_for_slurm.

    python resolver_tf1_ps_worker.py [--steps N] [--workers W]
"""

import argparse
import time

import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=200)
parser.add_argument("--workers", type=int, default=3)
args = parser.parse_args()

cluster_resolver = tf.distribute.cluster_resolver.SlurmClusterResolver(
    {"ps": 1, "worker": args.workers}, tasks_per_node=2, gpus_per_node=2)
cluster = cluster_resolver.cluster_spec()
job_name, task_index = cluster_resolver.get_task_info()
print(f"cluster {cluster.as_dict()} task {job_name} {task_index} "
      f"gpus {cluster_resolver.num_accelerators()['GPU']}", flush=True)

server = tf.distribute.Server(cluster, job_name=job_name, task_index=task_index)
if job_name == "ps":
    server.join()

v1 = tf.compat.v1
v1.disable_eager_execution()
with v1.device(v1.train.replica_device_setter(worker_device=f"/job:worker/task:{task_index}", cluster=cluster)):
    w = v1.get_variable("w", initializer=0.0)
    b = v1.get_variable("b", initializer=0.0)
    x = v1.random_uniform([64])
    loss = v1.reduce_mean(tf.square(w * x + b - (3.0 * x + 1.0)))
    global_step = v1.train.get_or_create_global_step()
    train_op = v1.train.GradientDescentOptimizer(0.3).minimize(loss, global_step=global_step)

with v1.train.MonitoredTrainingSession(master=server.target, is_chief=(task_index == 0),
                                       hooks=[v1.train.StopAtStepHook(last_step=args.steps)]) as sess:
    print(f"{job_name} {task_index} training", flush=True)
    value = None
    while not sess.should_stop():
        _, value = sess.run([train_op, loss])
print(f"{job_name} {task_index} done at {time.time():.3f} (loss {value})", flush=True)
