"""One task of a local ParameterServerStrategy job (test and bench entry script).

usage: pss_task.py --roles chief,ps,worker --ports P0,P1,P2 --rank R --out DIR [--mode normal|hang|fail]

The chief trains a tiny linear model with a ClusterCoordinator custom loop and writes
DIR/chief.json; in --mode hang it writes DIR/ready after its first steps and then blocks (the
test SIGKILLs it); in --mode fail its train_fn raises. With --keras-fit the chief trains with
tf_keras (TF_USE_LEGACY_KERAS=1) `model.fit(DatasetCreator(...))` instead (Keras 3 `fit` fails
under ParameterServerStrategy in TF 2.21). ps/worker tasks serve until done. Every task
writes DIR/<role><index>.exit with its status and a wall-clock timestamp just before it exits.
"""

import argparse
import json
import logging
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from tf_for_slurm.plan import localhost_plan  # noqa: E402
from tf_for_slurm.runtime import tf2  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--roles", required=True)
    ap.add_argument("--ports", required=True)
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--mode", default="normal", choices=["normal", "hang", "fail"])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--liveness-timeout", type=float, default=3.0)
    ap.add_argument("--poll", type=float, default=1.0)
    ap.add_argument("--startup-timeout", type=float, default=600.0)
    ap.add_argument("--fast-exit", action="store_true", help="leave through tf2.exit_now (skip TF teardown)")
    ap.add_argument("--keras-fit", action="store_true")
    args = ap.parse_args()
    if args.keras_fit:
        os.environ["TF_USE_LEGACY_KERAS"] = "1"  # before TensorFlow is imported
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    plan = localhost_plan(args.roles.split(","), [int(p) for p in args.ports.split(",")], args.rank)
    me = plan.me

    def train(strategy, plan):
        import numpy as np
        import tensorflow as tf

        if args.keras_fit:
            return keras_fit(strategy)
        coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
        true_w = tf.constant([[1.0], [-2.0], [3.0], [0.5]])
        with strategy.scope():
            w = tf.Variable(tf.zeros([4, 1]), name="w")
            b = tf.Variable(0.0, name="b")

        @tf.function
        def step():
            x = tf.random.uniform([32, 4])
            y = tf.matmul(x, true_w) + 0.25
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y))
            gw, gb = tape.gradient(loss, [w, b])
            w.assign_sub(0.2 * gw)
            b.assign_sub(0.2 * gb)
            return loss

        losses = [coordinator.schedule(step) for _ in range(args.steps)]
        coordinator.join()
        if args.mode == "hang":
            with open(os.path.join(args.out, "ready"), "w") as f:
                f.write(str(time.time()))
            threading.Event().wait()  # until SIGKILLed by the test
        if args.mode == "fail":
            raise RuntimeError("train_fn failed on purpose")
        values = [float(l.fetch()) for l in losses]
        with open(os.path.join(args.out, "chief.json"), "w") as f:
            json.dump({"first_loss": values[0], "last_loss": values[-1], "steps": len(values),
                       "w": np.asarray(w.numpy()).ravel().tolist(), "b": float(b.numpy()),
                       "w_device": w.device, "end_time": time.time()}, f)

    def keras_fit(strategy):
        import numpy as np
        import tensorflow as tf
        import tf_keras

        def dataset_fn(input_context):
            rng = np.random.default_rng(input_context.input_pipeline_id)
            x = rng.uniform(size=(256, 4)).astype("float32")
            y = (x @ np.array([[1.0], [-2.0], [3.0], [0.5]], "float32") + 0.25).astype("float32")
            return tf.data.Dataset.from_tensor_slices((x, y)).shuffle(256).batch(32).repeat()

        with strategy.scope():
            model = tf_keras.Sequential([tf_keras.Input((4,)), tf_keras.layers.Dense(1)])
            model.compile(tf_keras.optimizers.SGD(0.2), loss="mse", steps_per_execution=2)
        history = model.fit(tf_keras.utils.experimental.DatasetCreator(dataset_fn), epochs=3,
                            steps_per_epoch=max(2, args.steps // 3), verbose=0)
        with open(os.path.join(args.out, "chief.json"), "w") as f:
            json.dump({"first_loss": history.history["loss"][0], "last_loss": history.history["loss"][-1],
                       "steps": 3 * max(2, args.steps // 3), "w_device": model.weights[0].device,
                       "w": np.asarray(model.get_weights()[0]).ravel().tolist(), "end_time": time.time()}, f)

    status = 99
    try:
        status = tf2.run_parameter_server_strategy(
            train, plan, **({} if me.role == "chief" else
                            {"liveness_timeout": args.liveness_timeout, "poll": args.poll,
                             "startup_timeout": args.startup_timeout}))
    finally:
        with open(os.path.join(args.out, f"{me.role}{me.index}.exit"), "w") as f:
            json.dump({"status": status, "time": time.time()}, f)
    if args.fast_exit:
        tf2.exit_now(status)
    return status


if __name__ == "__main__":
    sys.exit(main())
