# A task written as a tf4slurm-era user wrote it (the seed's MNIST-03/04 launcher), ported only from
# `tf` to `tf.compat.v1`: original flags (-ps -workers -batch_size -Iterations, --NoIB store_false),
# GetServerDictionary(..., InfinyBand=FLAGS.NoIB), the ps's own dequeue loop, QueueManagementHook with
# the original keywords and DistributedTrain(FLAGS, task_index, TFCluster=, TFServer=, QueueHook=).
# Written for the tests of this project (not copied from tf4slurm). Tests must not edit it to pass.
from __future__ import print_function

import argparse
import importlib
import os
import sys

import tensorflow as tf

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.append(os.path.join(HERE, "..", ".."))                                 # the checkout, as the seed did
sys.path.append(os.path.join(HERE, "..", "..", "examples", "mnist_distributed"))  # Hooks, DeepMNIST_...
sys.path.append(HERE)                                                            # SmallModel_DistributedTRAIN
import tf_for_slurm.ServerDictionary as ServerDictionary
import tf_for_slurm.DistributedTFQueueHook as QueueHook

tf.compat.v1.disable_eager_execution()  # the one line a TF1 -> tf.compat.v1 port adds

FLAGS = None

if __name__ == '__main__':
    parser = argparse.ArgumentParser()
    parser.add_argument('--data_dir', type=str, default='./MNIST_DATA')
    parser.add_argument('--model_dir', type=str, default='./MONITORED_DISTRIBUTED')
    parser.add_argument('-batch_size', type=int, default=50)
    parser.add_argument('-Iterations', type=int, default=1005)
    parser.add_argument('-ps', type=int, default=1)
    parser.add_argument('-workers', type=int, default=3)
    parser.add_argument('--NoIB', default=True, action="store_false")
    parser.add_argument('--train_module', default='DeepMNIST_DistributedTRAIN')
    FLAGS, unparsed = parser.parse_known_args()
    TRAIN = importlib.import_module(FLAGS.train_module)

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
    print(server.target)
    sys.stdout.flush()
    if task_type == "ps":
        queue = QueueHook.create_done_queue(task_index, NumberOfWorkers)
        session_ps = tf.compat.v1.Session(server.target)
        for i in range(NumberOfWorkers):
            session_ps.run(queue.dequeue())
            print("ps %d received done %d" % (task_index, i))
            sys.stdout.flush()
        session_ps.close()
    elif task_type == "worker":
        QueueHook = QueueHook.QueueManagementHook(NumberOfPS=NumberOfPS, NumberOfWorkers=NumberOfWorkers)
        TRAIN.DistributedTrain(FLAGS, task_index, TFCluster=cluster, TFServer=server, QueueHook=QueueHook)
        print("worker %d finished training" % task_index)
