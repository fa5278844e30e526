"""A chief + worker job trained with MultiWorkerMirroredStrategy and Keras `fit`, plus an evaluator
task that evaluates each new checkpoint, written the way TensorFlow's tutorials write it: the
evaluator runs `tf.keras.utils.SidecarEvaluator` forever; only the chief writes the real checkpoint.
Plain `tf.keras`, TF_CONFIG in, nothing from tf_for_slurm.

    python tf2_chief_evaluator.py --model-dir DIR [--epochs E] [--steps-per-epoch S]
"""

import argparse
import json
import os
import tempfile
import time

import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--model-dir", required=True)
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--steps-per-epoch", type=int, default=10)
args = parser.parse_args()

task = json.loads(os.environ["TF_CONFIG"])["task"]
if task["type"] != "evaluator":  # the strategy first: collective ops are configured at start-up
    strategy = tf.distribute.MultiWorkerMirroredStrategy()


def make_model():
    model = tf.keras.Sequential([tf.keras.Input(shape=(8,)), tf.keras.layers.Dense(16, activation="relu"),
                                 tf.keras.layers.Dense(1)])
    model.compile(optimizer=tf.keras.optimizers.SGD(0.05), loss="mse")
    return model


x = tf.random.uniform([1024, 8], seed=2)
y = tf.reduce_sum(x, axis=1, keepdims=True)
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(64)

if task["type"] == "evaluator":
    print("evaluator waiting for checkpoints", flush=True)
    tf.keras.utils.SidecarEvaluator(make_model(), data=dataset, checkpoint_dir=args.model_dir, steps=4).start()
    raise SystemExit(0)  # with max_evaluations=None it never gets here

with strategy.scope():
    model = make_model()


class SaveEachEpoch(tf.keras.callbacks.Callback):
    """The tutorial's rule: every worker saves (saving is collective); only the chief keeps it."""

    def __init__(self):
        super().__init__()
        chief = task["type"] == "chief"
        self.directory = args.model_dir if chief else tempfile.mkdtemp()
        self.manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model), self.directory, max_to_keep=2)

    def on_epoch_end(self, epoch, logs=None):
        self.manager.save(checkpoint_number=epoch + 1)


print(f"{task['type']} {task['index']} training", flush=True)
model.fit(dataset.repeat(), epochs=args.epochs, steps_per_epoch=args.steps_per_epoch, verbose=0,
          callbacks=[SaveEachEpoch()])
print(f"{task['type']} {task['index']} done at {time.time():.3f}", flush=True)
