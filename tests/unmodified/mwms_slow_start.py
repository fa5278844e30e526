"""MultiWorkerMirroredStrategy with Keras `fit`, each worker loading its data from a shared file system
that may be slow: load_data waits for its file.  Written as tutorials write it (TF_CONFIG read for the
task's index, the strategy built with no arguments); nothing here knows about tf_for_slurm.

    python mwms_slow_start.py --data 'DIR/data-{index}' [--load before|after] [--epochs E]

--load before: the data is loaded before TensorFlow is imported (the other workers wait in the
strategy's start barrier); after: once the strategy is built (they wait in the first step).
"""

import argparse
import json
import os
import time

parser = argparse.ArgumentParser()
parser.add_argument("--data", required=True)
parser.add_argument("--load", choices=("before", "after"), default="before")
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--steps-per-epoch", type=int, default=5)
args = parser.parse_args()
index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]


def load_data(path):
    while not os.path.exists(path):  # the shared file system is slow today
        time.sleep(0.2)
    with open(path) as fh:
        return fh.read()


if args.load == "before":
    load_data(args.data.format(index=index))

import tensorflow as tf  # noqa: E402

strategy = tf.distribute.MultiWorkerMirroredStrategy()
if args.load == "after":
    load_data(args.data.format(index=index))

x = tf.random.uniform([512, 8], seed=1)
y = tf.reduce_sum(x, axis=1, keepdims=True)
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).repeat()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input(shape=(8,)), tf.keras.layers.Dense(8, activation="relu"),
                                 tf.keras.layers.Dense(1)])
    model.compile(optimizer=tf.keras.optimizers.SGD(0.05), loss="mse")
history = model.fit(dataset, epochs=args.epochs, steps_per_epoch=args.steps_per_epoch, verbose=0)
print(f"worker {index} done (loss {history.history['loss'][-1]:.4f})", flush=True)
