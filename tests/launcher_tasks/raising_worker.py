"""A TF1 ps/worker TF_CONFIG script whose worker 0 raises mid-training (a user's bug): the ps
join()s forever, worker 1 trains on.  Prints `raising at <unix time>` just before the raise.
(Worker 0, the chief, because it trains at once: a non-chief waits TensorFlow's 30 s recovery
period when it starts before the chief has initialised the variables.)"""

import json
import os
import time

import tensorflow as tf

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
    loss = tf.square(w - 3.0)
    step = v1.train.get_or_create_global_step()
    train_op = v1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=step)
with v1.train.MonitoredTrainingSession(master=server.target, is_chief=index == 0) as sess:
    done = 0
    while True:
        sess.run(train_op)
        done += 1
        if index == 0 and done == 50:
            print(f"raising at {time.time():.3f}", flush=True)
            raise RuntimeError("a bug in worker 0's training")
