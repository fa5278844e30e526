"""TF2 MultiWorkerMirroredStrategy with Keras `fit`, written the way seed 002 and TensorFlow's
"Multi-worker training with Keras" tutorial write it: plain `tf.keras`, TF_CONFIG read by the
strategy, nothing else.  Nothing here knows about tf_for_slurm.

    python tf2_mwms_fit.py [--epochs E] [--steps-per-epoch S]
"""

import argparse
import json
import os
import time

import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--steps-per-epoch", type=int, default=20)
args = parser.parse_args()

strategy = tf.distribute.MultiWorkerMirroredStrategy()
task = json.loads(os.environ["TF_CONFIG"])["task"]

x = tf.random.uniform([2048, 8], seed=1)
y = tf.reduce_sum(x, axis=1, keepdims=True)
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(64).repeat()

with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input(shape=(8,)), tf.keras.layers.Dense(16, activation="relu"),
                                 tf.keras.layers.Dense(1)])
    model.compile(optimizer=tf.keras.optimizers.SGD(0.05), loss="mse")

print(f"{task['type']} {task['index']} training", flush=True)
history = model.fit(dataset, epochs=args.epochs, steps_per_epoch=args.steps_per_epoch, verbose=0)
print(f"{task['type']} {task['index']} done at {time.time():.3f} (loss {history.history['loss'][-1]:.4f})",
      flush=True)
