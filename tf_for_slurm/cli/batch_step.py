"""`tf-slurm batch-step -- srun ...`: run a batch job's training step and requeue the job when the
time-limit warning stopped training early.

The options, their checks and the settings they fall back to; the step itself (signals, srun,
the requeue) is tf_for_slurm.supervise.batch_step's.
"""

from __future__ import annotations

import argparse
import os

from tf_for_slurm.errors import UsageError, bad_value
from tf_for_slurm.host import settings, slurm
from tf_for_slurm.plan.batch_settings import strict_int
from tf_for_slurm.plan.requeue import START_GRACE
from tf_for_slurm.supervise import batch_step


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `tf-slurm batch-step` (the CLI's subcommand table wires them in)."""
    parser.add_argument("--checkpoint-dir", metavar="DIR", help="the training's checkpoint directory (its "
                        "'checkpoint' file names the last step saved)")
    parser.add_argument("--target", help="the global-step target: a checkpoint at it means done")
    parser.add_argument("--max-requeues", help=f"requeues allowed (default: {settings.MAX_REQUEUES}, else "
                        f"{settings.default_int(settings.MAX_REQUEUES)})")
    parser.add_argument("--warn-margin", default=None, help="seconds before the time limit at which the tasks are "
                        f"told to stop (default: {settings.WARN_MARGIN}, else "
                        f"{settings.default_int(settings.WARN_MARGIN)})")
    parser.add_argument("--warn-file", metavar="FILE", help="where the batch shell's trap writes 'USR1 <epoch "
                        "seconds>' (read every 0.2 s): the shell gets --signal=B: warnings, this process may not")
    parser.add_argument("--start-grace", metavar="SECONDS", default=None,
                        help=f"seconds after the step started before a stop is passed on to its tasks (their "
                             f"start-up cannot take a signal yet; default {START_GRACE:g})")
    parser.add_argument("--no-requeue", action="store_true", help="never requeue (the decision is still logged)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- srun ARGS...")


def main(args: argparse.Namespace) -> int:
    """Run the step; exit with its first failure's status, or requeue the job."""
    env = settings.environ()
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise UsageError("no step command: expected 'tf-slurm batch-step [OPTIONS] -- srun ARGS...'")
    job = env.get(slurm.JOB_ID, "")
    if not job:
        raise UsageError(f"{slurm.JOB_ID} is not set: expected to run in a batch job (sbatch)")
    limit = (strict_int(args.max_requeues, "--max-requeues") if args.max_requeues is not None
             else settings.count_from(env, settings.MAX_REQUEUES, settings.default_int(settings.MAX_REQUEUES)))
    margin = (strict_int(args.warn_margin, "--warn-margin") if args.warn_margin is not None
              else settings.count_from(env, settings.WARN_MARGIN, settings.default_int(settings.WARN_MARGIN)))
    target = strict_int(args.target, "--target", 1) if args.target else None
    grace = strict_int(args.start_grace, "--start-grace") if args.start_grace is not None else START_GRACE
    if args.checkpoint_dir and not os.path.isdir(args.checkpoint_dir):
        raise UsageError(bad_value("--checkpoint-dir", args.checkpoint_dir, "an existing directory"))
    restarts = settings.count_from(env, slurm.RESTART_COUNT, 0)
    return batch_step.run_step(command, job, restarts=restarts, max_requeues=limit, warn_margin=margin,
                               target=target, checkpoint_dir=args.checkpoint_dir, warn_file=args.warn_file,
                               requeue=not args.no_requeue, start_grace=grace)
