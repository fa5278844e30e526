"""Start this Slurm task's TensorFlow server (ps or worker) and train the MNIST CNN on the workers.

    srun -n 3 python LaunchTFServerWithHooks.py --data_dir DIR --model_dir runs/mnist --ps 1 --workers 2
    srun -n 3 python LaunchTFServerWithHooks.py --data_dir DIR --model_dir M -batch_size 50 -Iterations 1000
    tf-slurm local -n 3 --ps 1 -- python examples/mnist_distributed/LaunchTFServerWithHooks.py \\
        --data_dir ../shared/data/mnist --model_dir runs/mnist --ps 1 --workers 2

Every task runs this same script.  The ListOfTFTasks has one role per task of the step in rank
order (node by node): the first `--ps` are parameter servers, the rest workers.  The library turns
the step into the cluster (`ServerDictionary`), starts this task's server and:
  - on a ps: waits until every worker reported done, then exits 0 (non-zero if a worker died);
  - on a worker: calls `DistributedTrain` (worker 0 is the chief) and reports done afterwards.
Only this file knows about the cluster; replace `train` below to distribute another model.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Optional

_HERE = os.path.dirname(os.path.abspath(__file__))
try:  # run from a checkout without installing the package
    import tf_for_slurm  # noqa: F401
except ImportError:  # pragma: no cover - depends on how the example is run
    sys.path.insert(0, os.path.dirname(os.path.dirname(_HERE)))

import pacing  # noqa: E402  (--min_step_seconds: its clock starts on this import)
from tf_for_slurm.errors import TfSlurmError, UsageError, bad_value  # noqa: E402

log = logging.getLogger("LaunchTFServerWithHooks")


class _OneLineParser(argparse.ArgumentParser):
    """Flag errors as one line on stderr and exit status 2 (no usage block), like the library's."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"LaunchTFServerWithHooks.py: error: {message}\n")
        raise SystemExit(2)


def parse_args(argv=None) -> argparse.Namespace:
    from defaults import BATCH_SIZE, EVAL_EVERY, ITERATIONS, LEARNING_RATE  # no TensorFlow import

    p = _OneLineParser(description=__doc__.splitlines()[0])
    p.add_argument("--data_dir", required=True, help="folder with the MNIST IDX files (plain or .gz)")
    p.add_argument("--model_dir", required=True, help="checkpoints, TensorBoard summaries, metrics.json")
    # -batch_size, -Iterations, -ps, -workers: the seed's single-dash spellings work too
    p.add_argument("-batch_size", "--batch_size", type=int, default=BATCH_SIZE, help="per-worker batch size")
    p.add_argument("-Iterations", "--Iterations", type=int, default=ITERATIONS,
                   help="global-step target; a rerun with a larger value resumes and continues")
    p.add_argument("-ps", "--ps", type=int, default=1, help="number of parameter servers (the first tasks; default 1)")
    p.add_argument("-workers", "--workers", type=int, default=None,
                   help="number of workers (default: the step's other tasks); ps + workers must be the step's tasks")
    p.add_argument("--IB", choices=("auto", "IB", "NoIB"), default="auto",
                   help="node addresses: auto (default: InfiniBand names, TF_SLURM_IB_TEMPLATE or '{host}-ib', "
                        "when they resolve for every node, else host names), IB (force them) or NoIB (host "
                        "names); an explicit TF_SLURM_ADDRESS policy overrides all three")
    p.add_argument("--NoIB", action="store_true", help="same as --IB NoIB (the seed's flag)")
    p.add_argument("--sync", action="store_true",
                   help="synchronous updates (SyncReplicasOptimizer) instead of asynchronous")
    p.add_argument("--learning_rate", type=float, default=LEARNING_RATE, help="Adam learning rate")
    p.add_argument("--eval_every", type=int, default=EVAL_EVERY,
                   help="chief: held-out accuracy every N global steps (0: only at the end)")
    p.add_argument("--download", action="store_true",
                   help="fetch the standard MNIST files into --data_dir first (needs internet)")
    p.add_argument("--min_step_seconds", type=float, default=0.0, metavar="S",
                   help=pacing.HELP + "; each worker paces its own steps: at most workers * (floor(t / S) + 1) "
                                      "global steps in t seconds (--sync: floor(t / S) + 1)")
    args = p.parse_args(argv)
    check_flags(args)
    return args


def check_flags(args: argparse.Namespace) -> None:
    """Reject values no run could use before any server starts (one line, exit status 2)."""
    if args.NoIB and args.IB == "IB":
        raise UsageError("--NoIB and --IB IB: expected one of them")
    for name, value, ok, expected in (
            ("--Iterations", args.Iterations, args.Iterations >= 1, "a global-step target >= 1"),
            ("--batch_size", args.batch_size, args.batch_size >= 1, "a batch size >= 1"),
            ("--learning_rate", args.learning_rate, args.learning_rate > 0, "a learning rate > 0"),
            ("--eval_every", args.eval_every, args.eval_every >= 0, "0 (only at the end) or a step count")):
        if not ok:
            raise UsageError(bad_value(name, value, expected))
    pacing.check_min_step_seconds(args.min_step_seconds)  # also rejects nan and inf


def check_model_dir(path: str) -> None:
    """Create --model_dir and write a probe file there now: an unwritable directory is one line and
    exit status 2 before any server starts, not a TensorFlow traceback at the first checkpoint."""
    import tempfile

    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".write-check-"):
            pass
    except OSError as exc:
        raise UsageError(bad_value("--model_dir", path, f"a directory this task can write ({exc.strerror})")) from None


def list_of_tf_tasks(ps: int, workers: Optional[int], ntasks: int) -> list:
    """['ps'] * ps + ['worker'] * workers, checked against the number of tasks in the step.

    workers=None: the step's other tasks (the seed's command line always gave both counts; the
    step already knows the total).
    """
    if ps < 1:
        raise UsageError(bad_value("--ps", ps, "at least 1 parameter server"))
    if workers is None:
        if ps >= ntasks:
            raise UsageError(f"--ps={ps} leaves no worker among the step's {ntasks} tasks: expected --ps "
                             f"< {ntasks} (or more tasks: srun -n / tf-slurm local -n)")
        workers = ntasks - ps
    if workers < 1:
        raise UsageError(bad_value("--workers", workers, "at least 1 worker"))
    if ps + workers != ntasks:
        raise UsageError(f"--ps={ps} + --workers={workers} = {ps + workers}: expected the number of "
                         f"tasks in the step ({ntasks}); e.g. srun -n {ps + workers} or "
                         f"tf-slurm local -n {ps + workers}")
    return ["ps"] * ps + ["worker"] * workers


def main(argv=None) -> int:
    # TensorFlow is imported only inside train(), after launch() started the server: the
    # library sets CUDA_VISIBLE_DEVICES for this task first, and TF adds no second log handler.
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = parse_args(argv)
    check_model_dir(args.model_dir)
    from tf_for_slurm import plan_from_env, step_from_env
    from tf_for_slurm.environment import noib_address

    ntasks = step_from_env(os.environ).ntasks
    tasks = list_of_tf_tasks(args.ps, args.workers, ntasks)
    args.workers = tasks.count("worker")
    no_ib = True if args.NoIB else {"auto": None, "IB": False, "NoIB": True}[args.IB]
    plan = plan_from_env(tasks=tasks, address=noib_address(no_ib))
    me = plan.me
    log.info("task %d of %d: %s:%d at %s; cluster %s", me.rank, plan.size, me.role, me.index,
             me.address, plan.server_dictionary())

    data = None
    if me.role != "ps":  # load (and validate) before the server starts: bad data fails fast
        import mnist_data

        if args.download:
            mnist_data.download_mnist(args.data_dir)
        data = mnist_data.load_mnist(args.data_dir)

    def train(ctx) -> None:
        from DeepMNIST_DistributedTRAIN import DistributedTrain

        DistributedTrain(ctx.server, ctx.plan.server_dictionary(), ctx.job_type, ctx.task_index,
                         data=data, model_dir=args.model_dir, batch_size=args.batch_size,
                         iterations=args.Iterations, learning_rate=args.learning_rate,
                         sync=args.sync, is_chief=ctx.is_chief, hooks=ctx.hooks,
                         config=ctx.session_config, eval_every=args.eval_every, stop=ctx.stop,
                         min_step_seconds=args.min_step_seconds)

    from tf_for_slurm.runtime.launch import launch

    # ps_fast_exit=False: the ps returns here (instead of leaving inside launch) to say how it ended
    status = launch(train, plan=plan, ps_fast_exit=False)
    if me.role == "ps":
        if status == 0:
            print(f"ps:{me.index}: all {args.workers} workers reported done; exiting cleanly (status 0)",
                  flush=True)
        else:
            print(f"ps:{me.index}: exiting with status {status} (a worker died or failed)", flush=True)
    return status


if __name__ == "__main__":
    try:
        sys.exit(main())
    except TfSlurmError as e:
        print(f"LaunchTFServerWithHooks.py: error: {e}", file=sys.stderr)
        sys.exit(e.exit_code)
