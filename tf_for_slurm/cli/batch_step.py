"""`tf-slurm batch-step -- srun ...`: run a batch job's training step and requeue the job when the
time-limit warning stopped training early.

The options, their checks and the settings they fall back to; the step itself (signals, srun,
the requeue) is tf_for_slurm.supervise.batch_step's.
"""

from __future__ import annotations

import argparse
import os
from typing import List, Mapping

from tf_for_slurm.errors import UsageError, bad_value
from tf_for_slurm.host import settings, slurm
from tf_for_slurm.plan.batch_settings import strict_int
from tf_for_slurm.plan.requeue import START_GRACE
from tf_for_slurm.plan.srun_command import is_srun, options_end
from tf_for_slurm.plan.step import expand_nodelist
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
    parser.add_argument("--max-relaunches", metavar="N", help="times a step that lost a node is started again at once "
                        "on the allocation's healthy nodes, before any requeue (default: "
                        f"{settings.MAX_RELAUNCHES}, else {settings.default_int(settings.MAX_RELAUNCHES)}; 0: off)")
    parser.add_argument("--spare-nodes", metavar="K", help="nodes of the allocation the first step leaves free "
                        "(srun --nodes=ALLOCATED-K) to take a lost node's place (default: "
                        f"{settings.SPARE_NODES}, else 0)")
    parser.add_argument("--min-workers", metavar="K", help="with too few healthy nodes left for a relaunch, start "
                        "the step again with fewer workers, down to K, rather than requeue the job (default: "
                        f"{settings.MIN_WORKERS}, else the planned count: never fewer)")
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
    relaunches, spares, allocation = _relaunch_options(args, env, command)
    fewest = (strict_int(args.min_workers, "--min-workers", 1) if args.min_workers is not None
              else settings.integer(env, settings.MIN_WORKERS, minimum=1))
    wait = settings.seconds(env, settings.CONTROLLER_WAIT, 0.0, 7 * 86400.0)
    wait = settings.default_seconds(settings.CONTROLLER_WAIT) if wait is None else wait
    return batch_step.run_step(command, job, restarts=restarts, max_requeues=limit, warn_margin=margin,
                               target=target, checkpoint_dir=args.checkpoint_dir, warn_file=args.warn_file,
                               requeue=not args.no_requeue, start_grace=grace, max_relaunches=relaunches,
                               allocation=allocation, spare_nodes=spares,
                               controller_wait=wait, min_workers=fewest)


def _relaunch_options(args: argparse.Namespace, env: Mapping[str, str], command: List[str]) -> tuple:
    """(--max-relaunches, --spare-nodes, the allocation's nodes), checked."""
    relaunches = (strict_int(args.max_relaunches, "--max-relaunches") if args.max_relaunches is not None
                  else settings.count_from(env, settings.MAX_RELAUNCHES, settings.default_int(settings.MAX_RELAUNCHES)))
    spares = (strict_int(args.spare_nodes, "--spare-nodes") if args.spare_nodes is not None
              else settings.count_from(env, settings.SPARE_NODES, 0))
    nodelist = env.get(slurm.JOB_NODELIST, "")
    allocation = expand_nodelist(nodelist, slurm.JOB_NODELIST) if nodelist else ()
    if spares and len(allocation) <= spares:
        raise UsageError(bad_value("--spare-nodes", spares, f"fewer than the allocation's {len(allocation)} node(s) "
                                   f"({slurm.JOB_NODELIST}={nodelist!r})"))
    het = any(word.startswith("--het-group") for word in command[:options_end(command)])
    if (spares or relaunches) and (het or not is_srun(command)):
        if spares:
            raise UsageError(bad_value("--spare-nodes", spares, "a step command that runs srun, not over the "
                                       "components of a heterogeneous job"))
        relaunches = 0  # a relaunch changes srun's node options: another command, or a het step, runs as given
    return relaunches, spares, allocation
