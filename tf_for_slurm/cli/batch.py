"""`tf-slurm batch-settings` and `tf-slurm batch-status`: the sbatch templates' two helpers.

The options and the printing; the job's variables and the named files are read by
tf_for_slurm.host, the checks and arithmetic are tf_for_slurm.plan.batch_settings's.
"""

from __future__ import annotations

import argparse
from typing import List

from tf_for_slurm.host import slurm
from tf_for_slurm.host.allocation import batch_settings
from tf_for_slurm.host.settings import environ
from tf_for_slurm.host.user_files import read_file, read_source
from tf_for_slurm.plan.batch_settings import SETTINGS, first_failure, strict_int

__all__ = ["add_arguments", "add_status_arguments", "main", "main_status"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `tf-slurm batch-settings` (the values come from the template's settings)."""
    parser.add_argument("--num-ps", required=True, help="parameter servers (the template's NUM_PS)")
    parser.add_argument("--min-ps", type=int, default=0, help="smallest NUM_PS allowed (default 0)")
    parser.add_argument("--mem-per-task-mb", default="",
                        help="MB per task (MEM_PER_TASK_MB); empty: from the allocation, partition or nodes")
    parser.add_argument("--spare-nodes", default="0", help="nodes left free by the step (SPARE_NODES): the tasks "
                        "counted are those on the other nodes")
    parser.add_argument("--partition", help=f"partition to read from --partition-info (default {slurm.JOB_PARTITION})")
    parser.add_argument("--partition-info", metavar="FILE|-", help="`scontrol show partition` output")
    parser.add_argument("--node-info", metavar="FILE|-", help="`scontrol show node` output")


def main(args: argparse.Namespace) -> int:
    """Print `NTASKS CPUS_PER_TASK NUM_WORKERS MEM_PER_CPU RESV_PORTS` (integers, one line)."""
    stdin_used: List[str] = []
    values = batch_settings(
        environ(), num_ps=args.num_ps, min_ps=args.min_ps, mem_per_task_mb=args.mem_per_task_mb,
        partition_info=read_source(args.partition_info, "--partition-info", stdin_used),
        node_info=read_source(args.node_info, "--node-info", stdin_used), partition=args.partition,
        spare_nodes=strict_int(args.spare_nodes, "--spare-nodes"))
    print(" ".join(str(values[k]) for k in SETTINGS))
    return 0


def add_status_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `tf-slurm batch-status`."""
    parser.add_argument("--srun-status", required=True, help="srun's exit status ($?)")
    parser.add_argument("--srun-log", metavar="FILE", required=True, help="srun's stderr, as written")


def main_status(args: argparse.Namespace) -> int:
    """Print the job's exit status (an integer 0-255)."""
    status = strict_int(args.srun_status, "--srun-status", 0, 255)
    print(first_failure(read_file(args.srun_log, "--srun-log"), status))
    return 0
