# A synchronous task written as a tf4slurm-era user wrote the seed's MNIST-04 tutorial, ported only
# from `tf` to `tf.compat.v1`: original flags, GetServerDictionary(..., InfinyBand=FLAGS.NoIB), the
# ps's own dequeue loop on the original done queue, QueueManagementHook with the original keywords,
# SyncReplicasOptimizer(replicas_to_aggregate=workers), make_session_run_hook(is_chief, num_tokens=0),
# StopAtStepHook and a MonitoredTrainingSession with TensorFlow's DEFAULT stop_grace_period_secs
# (120 s). Small synthetic MNIST-shaped data (784 features, 10 classes), no download. The one
# difference from the tutorial: checkpoints at TensorFlow's default (start and end), so a test can
# read the final step from the chief's last checkpoint; --ps_sleep 0 drops the ps's sleep after its
# loop (a ps that leaves once every worker reported done). The chief prints the time of its last
# training step so that a test can tell training time from the wait after it.
# Written for the tests of this project (not copied from tf4slurm). Tests must not edit it to pass.
from __future__ import print_function

import argparse
import os
import sys
import time

import numpy as np
import tensorflow as tf

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.append(os.path.join(HERE, "..", ".."))  # the checkout, as the seed did
import tf_for_slurm.ServerDictionary as ServerDictionary
import tf_for_slurm.DistributedTFQueueHook as QueueHook

tf.compat.v1.disable_eager_execution()  # the one line a TF1 -> tf.compat.v1 port adds


def synthetic_mnist(seed, n=2000):
    rng = np.random.RandomState(seed)
    teacher = np.random.RandomState(1234).normal(size=(784, 10)).astype(np.float32)
    images = rng.uniform(0, 1, size=(n, 784)).astype(np.float32)
    labels = np.eye(10, dtype=np.float32)[np.argmax(images.dot(teacher), axis=1)]
    return images, labels


def DistributedTrain(FLAGS, task_index, TFCluster, TFServer, QueueHook):
    is_chief = (task_index == 0)
    master = TFServer.target
    with tf.compat.v1.device(tf.compat.v1.train.replica_device_setter(
            worker_device="/job:worker/task:%d" % task_index, cluster=TFCluster)):
        images, labels = synthetic_mnist(task_index)
        x = tf.compat.v1.placeholder(tf.float32, [None, 784])
        y_ = tf.compat.v1.placeholder(tf.float32, [None, 10])
        W = tf.compat.v1.get_variable("W", [784, 10], initializer=tf.compat.v1.zeros_initializer())
        b = tf.compat.v1.get_variable("b", [10], initializer=tf.compat.v1.zeros_initializer())
        y = tf.matmul(x, W) + b
        global_step = tf.compat.v1.train.get_or_create_global_step()
        cross_entropy = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(labels=y_, logits=y))
        Optimizer = tf.compat.v1.train.AdamOptimizer(1e-3)
        SyncOptimizer = tf.compat.v1.train.SyncReplicasOptimizer(Optimizer,
                                                                 replicas_to_aggregate=FLAGS.workers,
                                                                 total_num_replicas=FLAGS.workers,
                                                                 use_locking=True, name="sync_replicas")
        train_step = SyncOptimizer.minimize(cross_entropy, global_step=global_step,
                                            aggregation_method=tf.AggregationMethod.ADD_N)
    BatchSize = int(FLAGS.batch_size / FLAGS.workers)
    hooks = [QueueHook]
    hooks.append(SyncOptimizer.make_session_run_hook(is_chief, num_tokens=0))
    hooks.append(tf.compat.v1.train.StopAtStepHook(FLAGS.Iterations))
    tick = time.time()
    with tf.compat.v1.train.MonitoredTrainingSession(master=master, is_chief=is_chief, hooks=hooks,
                                                     checkpoint_dir=FLAGS.model_dir, save_summaries_steps=None,
                                                     save_summaries_secs=None, config=None) as sess:
        step = sess.run(global_step)
        i = 0
        while not sess.should_stop():
            start = (i * BatchSize) % (len(images) - BatchSize)
            i += 1
            _, step = sess.run([train_step, global_step],
                               feed_dict={x: images[start:start + BatchSize], y_: labels[start:start + BatchSize]})
        tack = time.time()
        print("worker %d last training step %d at %.3f" % (task_index, step, tack))
        sys.stdout.flush()
    print("Training Time: " + str(tack - tick))
    print("worker %d closed its session at %.3f" % (task_index, time.time()))


FLAGS = None

if __name__ == '__main__':
    parser = argparse.ArgumentParser()
    parser.add_argument('--model_dir', type=str, default='./MONITORED_DISTRIBUTED_SYNC')
    parser.add_argument('-batch_size', type=int, default=50)
    parser.add_argument('-Iterations', type=int, default=150)
    parser.add_argument('-ps', type=int, default=1)
    parser.add_argument('-workers', type=int, default=2)
    parser.add_argument('--NoIB', default=True, action="store_false")
    parser.add_argument('--ps_sleep', type=float, default=180)  # the original's time.sleep(180) after the loop
    FLAGS, unparsed = parser.parse_known_args()

    NumberOfPS = FLAGS.ps
    NumberOfWorkers = FLAGS.workers
    ListOfTFTasks = ['worker' for i in range(NumberOfPS + NumberOfWorkers)]
    for i in range(NumberOfPS):
        ListOfTFTasks[i] = 'ps'
    ServerDictionary, task_type, task_index = ServerDictionary.GetServerDictionary(ListOfTFTasks, InfinyBand=FLAGS.NoIB)
    print("Cluster Dictionary: " + str(ServerDictionary))
    print(task_type, task_index)
    cluster = tf.compat.v1.train.ClusterSpec(ServerDictionary)
    server = tf.compat.v1.train.Server(cluster, job_name=task_type, task_index=task_index)
    sys.stdout.flush()
    if task_type == "ps":
        queue = QueueHook.create_done_queue(task_index, NumberOfWorkers)
        session_ps = tf.compat.v1.Session(server.target)
        for i in range(NumberOfWorkers):
            session_ps.run(queue.dequeue())
            print("ps %d received done %d" % (task_index, i))
            sys.stdout.flush()
        time.sleep(FLAGS.ps_sleep)
        session_ps.close()
    elif task_type == "worker":
        QueueHook = QueueHook.QueueManagementHook(NumberOfPS=NumberOfPS, NumberOfWorkers=NumberOfWorkers)
        DistributedTrain(FLAGS, task_index, TFCluster=cluster, TFServer=server, QueueHook=QueueHook)
        print("worker %d finished training" % task_index)
