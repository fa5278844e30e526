"""One task of a localhost TF1 cluster, for tests/test_runtime_tf1.py and bench/bench_shutdown.py.

    python train_task.py --roles ps,worker,worker --ports 1,2,3 --rank 1 --events ev.jsonl
        [--mode async|sync|raise|exit0] [--steps N] [--raise-rank R] [--liveness 5]

--mode exit0: the task --raise-rank exits 0 at once, before starting its server (never reports).
--first-steps-together: the chief, after its first step, waits until every worker has made its
first step (a "first_step" event each), so every worker trains at least one step however fast the
chief runs through --steps (without it, a worker that opens its session late may find none left).

Appends JSON lines {"rank", "role", "event", "t"} to --events (wall-clock seconds) so the test
can measure shutdown latencies across processes.  Exit status: launch's return, 2 for a
TfSlurmError's exit_code (one line on stderr, as the CLI does), 1 for a training exception.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))

from tf_for_slurm.errors import TfSlurmError  # noqa: E402
from tf_for_slurm.plan import localhost_plan  # noqa: E402
from tf_for_slurm.runtime import launch  # noqa: E402


def event(path: str, rank: int, role: str, name: str, **extra) -> None:
    line = json.dumps({"rank": rank, "role": role, "event": name, "t": time.time(), **extra})
    with open(path, "a") as f:
        f.write(line + "\n")


class _PsExitEvent(logging.Handler):
    def __init__(self, path: str, rank: int):
        super().__init__()
        self.path, self.rank = path, rank

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("ps exiting with status"):
            event(self.path, self.rank, "ps", "exit", rc=record.args[0])


def wait_for_first_steps(args, trainers: int, timeout: float = 120.0) -> None:
    """Until `trainers` tasks wrote a "first_step" event (this one included)."""
    end = time.monotonic() + timeout
    while True:
        with open(args.events) as f:
            firsts = {json.loads(line)["rank"] for line in f if '"first_step"' in line}
        if len(firsts) >= trainers:
            return
        if time.monotonic() > end:
            raise RuntimeError(f"only ranks {sorted(firsts)} made a first step within {timeout:.0f} s")
        time.sleep(0.02)


def make_train(args, rank: int):
    def train(ctx) -> None:
        import numpy as np
        import tensorflow as tf

        tf.compat.v1.disable_eager_execution()
        rng = np.random.default_rng(rank)
        with tf.Graph().as_default():
            with tf.compat.v1.device(ctx.device_setter()):
                gs = tf.compat.v1.train.get_or_create_global_step()
                x = tf.compat.v1.placeholder(tf.float32, [None, 4])
                y = tf.compat.v1.placeholder(tf.float32, [None, 1])
                w = tf.compat.v1.get_variable("w", [4, 1], initializer=tf.compat.v1.zeros_initializer())
                b = tf.compat.v1.get_variable("b", [1], initializer=tf.compat.v1.zeros_initializer())
                loss = tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y))
                opt = tf.compat.v1.train.GradientDescentOptimizer(0.05)
                hooks = [tf.compat.v1.train.StopAtStepHook(last_step=args.steps)]
                if args.mode == "sync":
                    opt = tf.compat.v1.train.SyncReplicasOptimizer(
                        opt, replicas_to_aggregate=ctx.num_workers, total_num_replicas=ctx.num_workers)
                    hooks.append(opt.make_session_run_hook(ctx.is_chief))
                train_op = opt.minimize(loss, global_step=gs)
            true_w = np.arange(1, 5, dtype=np.float32).reshape(4, 1)
            local = 0
            event(args.events, rank, ctx.job_type, "session_start")
            with ctx.monitored_session(hooks=hooks) as sess:
                while not sess.should_stop():
                    xb = rng.normal(size=(16, 4)).astype(np.float32)
                    _, step, lv = sess.run([train_op, gs, loss], {x: xb, y: xb @ true_w})
                    local += 1
                    if local == 1 and args.first_steps_together:
                        event(args.events, rank, ctx.job_type, "first_step", step=int(step))
                        if ctx.is_chief:
                            wait_for_first_steps(args, ctx.num_workers)
                    if local == 5:
                        event(args.events, rank, ctx.job_type, "training", step=int(step))
                    if args.mode == "raise" and rank == args.raise_rank and local == 5:
                        raise RuntimeError(f"deliberate failure on rank {rank}")
            event(args.events, rank, ctx.job_type, "train_end", local_steps=local, loss=float(lv))

    return train


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--roles", required=True)
    p.add_argument("--ports", required=True)
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--events", required=True)
    p.add_argument("--mode", default="async", choices=["async", "sync", "raise", "exit0"])
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--raise-rank", type=int, default=-1)
    p.add_argument("--barrier", action="store_true")
    p.add_argument("--first-steps-together", action="store_true")
    p.add_argument("--liveness", type=float, default=5.0)
    p.add_argument("--startup-grace", type=float, default=60.0)
    p.add_argument("--late-start-grace", type=float, default=30.0)
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    plan = localhost_plan(args.roles.split(","), [int(x) for x in args.ports.split(",")], args.rank)
    role = plan.me.role
    event(args.events, args.rank, role, "start")
    if args.mode == "exit0" and args.rank == args.raise_rank:
        event(args.events, args.rank, role, "exit", rc=0)
        return 0
    if role == "ps":  # launch() ends a ps with os._exit: catch its last log record instead
        logging.getLogger("tf_for_slurm.runtime.launch").addHandler(_PsExitEvent(args.events, args.rank))
    try:
        rc = launch(make_train(args, args.rank), plan=plan, liveness_timeout=args.liveness,
                    startup_grace=args.startup_grace, late_start_grace=args.late_start_grace, timeout=120, barrier=args.barrier,
                    barrier_timeout=120, print_every_n_steps=20)
    except TfSlurmError as exc:
        print(f"train_task: {exc}", file=sys.stderr)
        event(args.events, args.rank, role, "exit", rc=exc.exit_code)
        return exc.exit_code
    except Exception as exc:  # the training failure, after launch reported it
        event(args.events, args.rank, role, "exit", rc=1, error=str(exc))
        raise
    event(args.events, args.rank, role, "exit", rc=rc)
    return rc


if __name__ == "__main__":
    sys.exit(main())
