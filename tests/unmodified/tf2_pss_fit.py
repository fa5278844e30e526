"""TF2 ParameterServerStrategy, written the way TensorFlow's "Parameter server training" tutorial
writes it: ps and worker tasks start a server and join() forever; the chief is the coordinator and
runs Keras `fit`.  Plain `tf.keras`, no environment variables set here, nothing from tf_for_slurm.

    python tf2_pss_fit.py [--epochs E] [--steps-per-epoch S] [--pace SECONDS]

--pace: the coordinator sleeps that long after each epoch (a test's pacing; PSS takes no batch callbacks).
"""

import argparse
import time

import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--steps-per-epoch", type=int, default=20)
parser.add_argument("--pace", type=float, default=0.0)
args = parser.parse_args()

cluster_resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
if cluster_resolver.task_type in ("worker", "ps"):
    server = tf.distribute.Server(cluster_resolver.cluster_spec(), job_name=cluster_resolver.task_type,
                                  task_index=cluster_resolver.task_id, protocol=cluster_resolver.rpc_layer or "grpc",
                                  start=True)
    server.join()

strategy = tf.distribute.ParameterServerStrategy(cluster_resolver)


def dataset_fn(input_context):
    x = tf.random.uniform([1024, 8])
    y = tf.reduce_sum(x, axis=1, keepdims=True)
    return tf.data.Dataset.from_tensor_slices((x, y)).shuffle(1024).batch(32).repeat()


with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(16, activation="relu"), tf.keras.layers.Dense(1)])
    model.compile(optimizer=tf.keras.optimizers.SGD(0.05), loss="mse", steps_per_execution=5)

print("coordinator training", flush=True)
history = model.fit(tf.keras.utils.experimental.DatasetCreator(dataset_fn), epochs=args.epochs,
                    steps_per_epoch=args.steps_per_epoch, verbose=0,
                    callbacks=[tf.keras.callbacks.LambdaCallback(on_epoch_end=lambda e, logs: time.sleep(args.pace))])
print(f"coordinator done at {time.time():.3f} (loss {history.history['loss'][-1]:.4f})", flush=True)
