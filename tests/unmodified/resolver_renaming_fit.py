"""A site's own SlurmClusterResolver subclass, as centres wrote them for TensorFlow < 2.12: it
overrides `_resolve_hostlist` to expand the node list itself and rename each node (here to its
IP address: the name the high-speed network answers to), then trains with
MultiWorkerMirroredStrategy and Keras `fit`.  Nothing here knows about tf_for_slurm.

    python resolver_renaming_fit.py [--epochs E] [--steps-per-epoch S]
"""

import argparse
import os
import socket
import time

import hostlist
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--steps-per-epoch", type=int, default=20)
args = parser.parse_args()


class SiteClusterResolver(tf.distribute.cluster_resolver.SlurmClusterResolver):
    """Node names through python-hostlist, each renamed to its address on the training network."""

    def _resolve_hostlist(self):
        return [socket.gethostbyname(node) for node in hostlist.expand_hostlist(os.environ["SLURM_STEP_NODELIST"])]


resolver = SiteClusterResolver(port_base=12345)
strategy = tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver)
print(f"cluster {resolver.cluster_spec().as_dict()} task {resolver.task_type} {resolver.task_id} "
      f"gpus {resolver.num_accelerators()['GPU']}", flush=True)

x = tf.random.uniform([2048, 8], seed=1)
y = tf.reduce_sum(x, axis=1, keepdims=True)
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(64).repeat()

with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input(shape=(8,)), tf.keras.layers.Dense(16, activation="relu"),
                                 tf.keras.layers.Dense(1)])
    model.compile(optimizer=tf.keras.optimizers.SGD(0.05), loss="mse")

print(f"{resolver.task_type} {resolver.task_id} training", flush=True)
history = model.fit(dataset, epochs=args.epochs, steps_per_epoch=args.steps_per_epoch, verbose=0)
print(f"{resolver.task_type} {resolver.task_id} done at {time.time():.3f} (loss {history.history['loss'][-1]:.4f})",
      flush=True)
