"""The chaos bench's Keras job: MultiWorkerMirroredStrategy `fit`, stopped on the time-limit warning
with a checkpoint and resumed exactly (tf_for_slurm's StopAndResume, the documented way for Keras
`fit` under a time limit: plain `BackupAndRestore` deletes its backup when `fit` stops, and writes
no `ckpt-<global step>` that batch-step can read).

    python _chaos_keras.py MODEL_DIR TARGET [--pace SECONDS] [--steps-per-epoch S]

Prints, per worker: 'worker I: resumed from step N' when a run begins, 'worker I: step N' every 10
global steps, 'worker I: end N' when fit returns.  --pace sleeps after each batch, so one 1-minute
allocation holds at most floor(65 / pace) + 1 steps on any machine.
"""

import argparse
import json
import logging
import os
import time

import tensorflow as tf

from tf_for_slurm.runtime.keras_resume import StopAndResume

logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
parser = argparse.ArgumentParser()
parser.add_argument("model_dir")
parser.add_argument("target", type=int)
parser.add_argument("--pace", type=float, default=0.1)
parser.add_argument("--steps-per-epoch", type=int, default=50)
args = parser.parse_args()

strategy = tf.distribute.MultiWorkerMirroredStrategy()
who = "worker %d" % json.loads(os.environ["TF_CONFIG"])["task"]["index"]
x = tf.random.uniform([2048, 8], seed=1)
dataset = tf.data.Dataset.from_tensor_slices((x, tf.reduce_sum(x, axis=1, keepdims=True))).batch(64).repeat()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input(shape=(8,)), tf.keras.layers.Dense(16, activation="relu"),
                                 tf.keras.layers.Dense(1)])
    model.compile(optimizer=tf.keras.optimizers.SGD(0.05), loss="mse")

resume = StopAndResume(args.model_dir, target=args.target)
first = resume.restore(model, steps_per_epoch=args.steps_per_epoch)
print("%s: resumed from step %d (initial_epoch %d) at %.3f" % (who, int(model.optimizer.iterations.numpy()), first,
                                                               time.time()), flush=True)


class Pace(tf.keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        step = int(self.model.optimizer.iterations.numpy())
        if step % 10 == 0:
            print("%s: step %d" % (who, step), flush=True)
        time.sleep(args.pace)


epochs = -(-args.target // args.steps_per_epoch)
model.fit(dataset, epochs=epochs, steps_per_epoch=args.steps_per_epoch, initial_epoch=first,
          callbacks=[Pace(), resume], verbose=0)
print("%s: end %d at %.3f" % (who, int(model.optimizer.iterations.numpy()), time.time()), flush=True)
