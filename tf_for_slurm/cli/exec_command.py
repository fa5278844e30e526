"""`tf-slurm exec -- CMD`: the options and the entry; the task itself is tf_for_slurm.supervise.task_exec's.

Why a module of its own: every task of a step runs this command, so the CLI imports it (and the
supervisor) only for `exec`, and exec's start-up imports no other command's code.
"""

from __future__ import annotations

import argparse
import logging

from tf_for_slurm.cli import het, log_level, restart_options, role_options
from tf_for_slurm.host import settings
from tf_for_slurm.supervise import child_process, task_exec


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `tf-slurm exec`."""
    env = settings.environ()
    role_options.add_arguments(parser, strategy=True)
    parser.add_argument("--drain", type=float, default=None, metavar="SECONDS",
                        help="after the chief finished, how long other training tasks may run (default: "
                             f"{settings.DRAIN}, else {settings.default_seconds(settings.DRAIN):g})")
    parser.add_argument("--no-device-filters", action="store_true",
                        help=f"do not give TF1 worker servers device filters ({settings.DEVICE_FILTERS}=0)")
    restart_options.add_arguments(parser)
    parser.add_argument("--no-supervise", "--no-sidecar", dest="no_supervise", action="store_true",
                        help="run the command without the supervisor (nothing ends the step for you)")
    parser.add_argument("--supervisor-log-level", "--sidecar-log-level", dest="supervisor_log_level",
                        default=settings.text(env, settings.SUPERVISOR_LOG_LEVEL)
                        or settings.text(env, settings.SIDECAR_LOG_LEVEL),
                        help="logging level of the supervisor: DEBUG..CRITICAL (default: --log-level)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ARGS...")


def main(args: argparse.Namespace) -> int:
    """Run the command with its TF_CONFIG, under the supervisor; the status the task exits with."""
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if args.supervisor_log_level is not None:
        logging.getLogger(child_process.LOGGER).setLevel(log_level(args.supervisor_log_level,
                                                                   "--supervisor-log-level"))
    if logging.getLogger().getEffectiveLevel() <= logging.WARNING:  # the step's summary, unless asked for less
        logging.getLogger(child_process.SUMMARY_LOGGER).setLevel(logging.INFO)
    return task_exec.run(command, tasks=args.tasks.split(",") if args.tasks else None, ps=args.ps,
                         placement=args.placement, chief=args.chief, address=args.address,
                         component_roles=het.component_roles(args),
                         strategy=args.strategy, drain=args.drain, device_filters=not args.no_device_filters,
                         supervise=not args.no_supervise, **restart_options.values(args))
