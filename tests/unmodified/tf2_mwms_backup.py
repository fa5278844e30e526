"""TF2 MultiWorkerMirroredStrategy with Keras `fit` and `BackupAndRestore`, written the way
TensorFlow's "Multi-worker training with Keras" tutorial writes fault tolerance: every worker runs
the same script; after a failure the whole group starts again with the same TF_CONFIG and `fit`
resumes at the epoch the backup holds.  Plain `tf.keras`, nothing from tf_for_slurm.

    python tf2_mwms_backup.py --backup-dir DIR [--epochs E] [--steps-per-epoch S] [--pace SECONDS]
                              [--hang-once FILE]

--pace sleeps that long after each batch (a test's pacing: training lasts at least
epochs * steps * pace seconds on any machine).  --hang-once stands for a hang (a collective that
never completes): worker 1 blocks forever at epoch 1, batch 3, the first time (it creates FILE).
"""

import argparse
import json
import os
import threading
import time

import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--backup-dir", required=True)
parser.add_argument("--epochs", type=int, default=6)
parser.add_argument("--steps-per-epoch", type=int, default=10)
parser.add_argument("--pace", type=float, default=0.0)
parser.add_argument("--hang-once", default=None)
args = parser.parse_args()

strategy = tf.distribute.MultiWorkerMirroredStrategy()
task = json.loads(os.environ["TF_CONFIG"])["task"]
me = f"{task['type']} {task['index']}"

x = tf.random.uniform([2048, 8], seed=1)
y = tf.reduce_sum(x, axis=1, keepdims=True)
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(64).repeat()

with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input(shape=(8,)), tf.keras.layers.Dense(16, activation="relu"),
                                 tf.keras.layers.Dense(1)])
    model.compile(optimizer=tf.keras.optimizers.SGD(0.05), loss="mse")

at = {"epoch": 0}


def epoch_begins(epoch, logs):
    at["epoch"] = epoch
    print(f"{me} epoch {epoch} at {time.time():.3f}", flush=True)


def batch_ends(batch, logs):
    time.sleep(args.pace)
    if args.hang_once and me == "worker 1" and (at["epoch"], batch) == (1, 3) and not os.path.exists(args.hang_once):
        open(args.hang_once, "w").close()
        print(f"{me} hangs at epoch 1 batch 3", flush=True)
        threading.Event().wait()  # forever


callbacks = [
    tf.keras.callbacks.BackupAndRestore(backup_dir=args.backup_dir),
    tf.keras.callbacks.LambdaCallback(on_epoch_begin=epoch_begins, on_train_batch_end=batch_ends),
]
print(f"{me} training", flush=True)
history = model.fit(dataset, epochs=args.epochs, steps_per_epoch=args.steps_per_epoch, verbose=0, callbacks=callbacks)
print(f"{me} done at {time.time():.3f}", flush=True)
