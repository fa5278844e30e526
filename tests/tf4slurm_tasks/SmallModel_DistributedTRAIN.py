# DistributedTrain(FLAGS, task_index, TFCluster, TFServer, QueueHook) in the seed's form, for a model
# small enough for a 2-core test machine: a linear fit, with the seed's Hooks module (BarrierOnChiefHook
# with its original keywords, PrintStepHook(AvoidStep=...)). Written for this project's tests.
from __future__ import print_function

import logging
import time

import numpy as np
import tensorflow as tf

import Hooks as HOOKS


def DistributedTrain(FLAGS, task_index, TFCluster, TFServer, QueueHook):
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")  # to see PrintStepHook
    is_chief = (task_index == 0)
    master = TFServer.target
    with tf.compat.v1.device(tf.compat.v1.train.replica_device_setter(
            worker_device="/job:worker/task:%d" % task_index, cluster=TFCluster)):
        x = tf.compat.v1.placeholder(tf.float32, [None])
        y = tf.compat.v1.placeholder(tf.float32, [None])
        w = tf.compat.v1.get_variable("w", [], initializer=tf.compat.v1.zeros_initializer())
        b = tf.compat.v1.get_variable("b", [], initializer=tf.compat.v1.zeros_initializer())
        loss = tf.reduce_mean(tf.square(w * x + b - y))
        global_step = tf.compat.v1.train.get_or_create_global_step()
        train_step = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=global_step)
    hooks = [QueueHook]
    hooks.append(tf.compat.v1.train.StopAtStepHook(last_step=FLAGS.Iterations))
    hooks.append(HOOKS.BarrierOnChiefHook(is_chief=is_chief, chief_task_index=0, NumberOfWorkers=FLAGS.workers))
    hooks.append(HOOKS.PrintStepHook(AvoidStep=[3, FLAGS.Iterations - 3]))
    rng = np.random.RandomState(task_index)
    tick = time.time()
    with tf.compat.v1.train.MonitoredTrainingSession(master=master, is_chief=is_chief, hooks=hooks,
            checkpoint_dir=FLAGS.model_dir, save_checkpoint_secs=None, save_summaries_steps=None,
            save_summaries_secs=None, config=None) as sess:
        step = sess.run(global_step)
        w_ = b_ = float("nan")  # another worker may already have reached the last step
        while not sess.should_stop():
            bx = rng.uniform(-1, 1, FLAGS.batch_size).astype(np.float32)
            _, step, w_, b_ = sess.run([train_step, global_step, w, b], feed_dict={x: bx, y: 3 * bx + 2})
        tack = time.time()
    print("worker %d: w=%.3f b=%.3f after global step %d" % (task_index, w_, b_, step))
    print("Training Time: " + str(tack - tick))
