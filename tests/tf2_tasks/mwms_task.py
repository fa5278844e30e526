"""One worker of a local MultiWorkerMirroredStrategy job (test entry script).

usage: mwms_task.py --ports P0,P1 --rank R --out DIR [--steps N] [--roles worker,worker]

Trains a tiny Keras 3 model with a custom training loop (strategy.run + all-reduced gradients);
each worker feeds DIFFERENT data (seeded by its rank), so identical final weights on every
worker show that the gradients really were all-reduced. Writes DIR/<role><index>.json.
With --keras-fit it uses tf_keras (TF_USE_LEGACY_KERAS=1) and `model.fit` instead: Keras 3
`fit` fails under MWMS in TF 2.21.
"""

import argparse
import json
import logging
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from tf_for_slurm.plan import localhost_plan  # noqa: E402
from tf_for_slurm.runtime import tf2  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--roles", default="worker,worker")
    ap.add_argument("--ports", required=True)
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--keras-fit", action="store_true")
    args = ap.parse_args()
    if args.keras_fit:
        os.environ["TF_USE_LEGACY_KERAS"] = "1"  # before TensorFlow is imported
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    plan = localhost_plan(args.roles.split(","), [int(p) for p in args.ports.split(",")], args.rank)

    strategy = tf2.multi_worker_mirrored_strategy(plan)
    import numpy as np
    import tensorflow as tf

    if args.keras_fit:
        import tf_keras as keras
    else:
        import keras

    rng = np.random.default_rng(1000 + args.rank)  # different data on every worker
    x = rng.uniform(size=(64, 4)).astype("float32")
    y = (x @ np.array([[1.0], [-2.0], [3.0], [0.5]], "float32") + 0.25).astype("float32")
    with strategy.scope():
        keras.utils.set_random_seed(args.rank)  # different initial draws: the strategy must sync them
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        optimizer = keras.optimizers.SGD(0.1)
        if args.keras_fit:
            model.compile(optimizer=optimizer, loss="mse")
    initial = [np.asarray(v) for v in model.get_weights()]
    n = strategy.num_replicas_in_sync
    if args.keras_fit:
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
        data = tf.data.Dataset.from_tensor_slices((x, y)).batch(64).repeat().with_options(options)
        history = model.fit(data, epochs=args.steps, steps_per_epoch=1, verbose=0)  # a loss per step
        return _write(args, plan, tf2, n, initial, model, history.history["loss"])

    @tf.function
    def step(xb, yb):
        def replica_fn(xb, yb):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(xb, training=True) - yb)) / n
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss

        per_replica = strategy.run(replica_fn, args=(xb, yb))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    losses = [float(step(tf.constant(x), tf.constant(y))) for _ in range(args.steps)]
    return _write(args, plan, tf2, n, initial, model, losses)


def _write(args, plan, tf2, n, initial, model, losses) -> int:
    import numpy as np

    me = plan.me
    with open(os.path.join(args.out, f"{me.role}{me.index}.json"), "w") as f:
        json.dump({"losses": losses, "replicas": n, "is_chief": tf2.mwms_is_chief(plan),
                   "initial": [np.asarray(w).ravel().tolist() for w in initial],
                   "final": [np.asarray(w).ravel().tolist() for w in model.get_weights()]}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
