"""`tf-slurm mem`: print the memory per task (or per CPU) in MB, for `srun --mem-per-cpu`.

The options and the printing; the variables and files are read by tf_for_slurm.host, the
arithmetic is tf_for_slurm.plan.memory's.
"""

from __future__ import annotations

import argparse
import sys
from typing import List

from tf_for_slurm.errors import UsageError, bad_value
from tf_for_slurm.host import slurm
from tf_for_slurm.host.allocation import memory_per_task
from tf_for_slurm.host.user_files import read_source

__all__ = ["add_arguments", "main"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `tf-slurm mem`; SLURM_* from the environment fill what is not given."""
    parser.add_argument("--cpus-per-task", type=int, help=f"CPUs per task (default {slurm.CPUS_PER_TASK}, else 1)")
    parser.add_argument("--tasks-on-node", type=int,
                        help=f"tasks sharing one node's memory (default: the busiest node of {slurm.TASKS_PER_NODE})")
    parser.add_argument("--partition", help=f"partition to read from --partition-info (default {slurm.JOB_PARTITION})")
    parser.add_argument("--partition-info", metavar="FILE|-",
                        help="`scontrol show partition` output (file, or - for stdin)")
    parser.add_argument("--node-info", metavar="FILE|-", help="`scontrol show node` output (file, or - for stdin)")
    parser.add_argument("--per", choices=["cpu", "task"], default="task",
                        help="print MB per task (default) or per CPU (for srun --mem-per-cpu, as the templates do)")
    parser.add_argument("--explain", action="store_true", help="also say where the number came from (stderr)")


def main(args: argparse.Namespace) -> int:
    """Print the memory (MB, an integer) on stdout: per task by default, per CPU with --per cpu."""
    stdin_used: List[str] = []
    if args.cpus_per_task is not None and args.cpus_per_task < 1:
        raise UsageError(bad_value("--cpus-per-task", args.cpus_per_task, "an integer >= 1"))
    if args.tasks_on_node is not None and args.tasks_on_node < 1:
        raise UsageError(bad_value("--tasks-on-node", args.tasks_on_node, "an integer >= 1"))
    ans = memory_per_task(
        cpus_per_task=args.cpus_per_task,
        tasks_on_node=args.tasks_on_node,
        partition_info=read_source(args.partition_info, "--partition-info", stdin_used),
        node_info=read_source(args.node_info, "--node-info", stdin_used),
        partition=args.partition,
    )
    if getattr(args, "explain", False):
        sys.stderr.write(f"{ans.per_cpu} MB per CPU x {ans.cpus_per_task} CPUs = {ans.per_task} MB per task "
                         f"(from {ans.source})\n")
    print(ans.per_cpu if args.per == "cpu" else ans.per_task)
    return 0
