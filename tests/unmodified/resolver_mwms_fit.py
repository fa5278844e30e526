"""MultiWorkerMirroredStrategy with Keras `fit`, written the way HPC centres' documentation writes
it: the cluster comes from TensorFlow's SlurmClusterResolver with a fixed port_base, launched by
`srun python train.py`, TF_CONFIG ignored.  Nothing here knows about tf_for_slurm.

    python resolver_mwms_fit.py [--epochs E] [--steps-per-epoch S] [--pace SECONDS]

--pace sleeps that long after each batch (a test's pacing: a job that trains until cancelled leaves
the cores to the others).
"""

import argparse
import time

import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--steps-per-epoch", type=int, default=20)
parser.add_argument("--pace", type=float, default=0.0)
args = parser.parse_args()

resolver = tf.distribute.cluster_resolver.SlurmClusterResolver(port_base=15000)
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
pace = [tf.keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: time.sleep(args.pace))] \
    if args.pace else []
history = model.fit(dataset, epochs=args.epochs, steps_per_epoch=args.steps_per_epoch, verbose=0, callbacks=pace)
print(f"{resolver.task_type} {resolver.task_id} done at {time.time():.3f} (loss {history.history['loss'][-1]:.4f})",
      flush=True)
