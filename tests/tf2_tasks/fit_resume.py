"""Keras `fit` that stops on SIGUSR1 with a checkpoint and resumes (tf_for_slurm's StopAndResume).

    python fit_resume.py MODEL_DIR TARGET [--slow SECONDS]   (MWMS from TF_CONFIG, else one worker)

Prints 'ready <time>' once training has begun (a test then sends its signal) and 'end <global step>
<time>' when fit returns.  --slow sleeps in each batch so a test can stop it before the target.
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
parser.add_argument("--slow", type=float, default=0.0)
args = parser.parse_args()

multi = "TF_CONFIG" in os.environ
strategy = tf.distribute.MultiWorkerMirroredStrategy() if multi else tf.distribute.get_strategy()
who = "worker %d" % json.loads(os.environ["TF_CONFIG"])["task"]["index"] if multi else "worker 0"
x = tf.random.uniform([1024, 4], seed=1)
dataset = tf.data.Dataset.from_tensor_slices((x, tf.reduce_sum(x, axis=1, keepdims=True))).batch(32).repeat()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input(shape=(4,)), tf.keras.layers.Dense(1)])
    model.compile(optimizer=tf.keras.optimizers.Adam(0.01), loss="mse")

STEPS = 10
resume = StopAndResume(args.model_dir, target=args.target)
first = resume.restore(model, steps_per_epoch=STEPS)
print("%s restored at global step %d, initial_epoch %d" % (who, int(model.optimizer.iterations.numpy()), first),
      flush=True)


class Pace(tf.keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if batch == 1 and not hasattr(self, "said"):
            self.said = True
            print("%s ready %.3f" % (who, time.time()), flush=True)
        time.sleep(args.slow)


epochs = -(-args.target // STEPS)
model.fit(dataset, epochs=epochs, steps_per_epoch=STEPS, initial_epoch=first, callbacks=[Pace(), resume], verbose=0)
print("%s end %d %.3f" % (who, int(model.optimizer.iterations.numpy()), time.time()), flush=True)
