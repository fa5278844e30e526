"""One task of a local ParameterServerStrategy job (test and bench entry script).

usage: pss_task.py --roles chief,ps,worker --ports P0,P1,P2 --rank R --out DIR [--mode normal|hang|fail]

The chief trains a tiny linear model with a ClusterCoordinator custom loop and writes
DIR/chief.json; in --mode hang it writes DIR/ready after its first steps and then blocks (the
test SIGKILLs it); in --mode fail its train_fn raises. ps/worker tasks serve until done. Every task
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
    ap.add_argument("--fast-exit", action="store_true", help="leave through tf2.exit_now (skip TF teardown)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    plan = localhost_plan(args.roles.split(","), [int(p) for p in args.ports.split(",")], args.rank)
    me = plan.me

    def train(strategy, plan):
        import numpy as np
        import tensorflow as tf

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

    status = 99
    try:
        status = tf2.run_parameter_server_strategy(
            train, plan, **({} if me.role == "chief" else
                            {"liveness_timeout": args.liveness_timeout, "poll": args.poll}))
    finally:
        with open(os.path.join(args.out, f"{me.role}{me.index}.exit"), "w") as f:
            json.dump({"status": status, "time": time.time()}, f)
    if args.fast_exit:
        tf2.exit_now(status)
    return status


if __name__ == "__main__":
    sys.exit(main())
