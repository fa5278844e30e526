"""`tf-slurm batch-settings` and `tf-slurm batch-status`: the arithmetic of the sbatch templates.

Why this exists: bash evaluates the value of a variable used in `$((...))` as an arithmetic
expression, array subscripts included, so `SLURM_NTASKS='a[$(touch /tmp/x)]'` ran a command in
the templates.  Here every value is checked to be a plain decimal integer before any arithmetic,
and the templates only `read` the printed integers (nothing is evaluated).  Both templates call
the same code, so it is tested once.

- `batch-settings` prints one line of integers, in a fixed order (see SETTINGS):
  tasks, CPUs per task, workers, MB per CPU for `srun --mem-per-cpu`, ports to reserve.
- `batch-status` turns srun's exit status into the job's: srun returns the highest status of its
  tasks (143 for a task that srun itself ended with SIGTERM after another failed); the job should
  report the status of the task that failed first, which srun's stderr names first.
"""

from __future__ import annotations

import argparse
import re
from typing import List, Mapping, Optional

from tf_for_slurm.errors import UsageError, bad_value

__all__ = ["SETTINGS", "add_arguments", "add_status_arguments", "batch_settings", "first_failure", "main",
           "main_status", "strict_int"]

SETTINGS = ("NTASKS", "CPUS_PER_TASK", "NUM_WORKERS", "MEM_PER_CPU", "RESV_PORTS")
_DIGITS = re.compile(r"[0-9]{1,18}")  # ASCII digits only: int() would also take '+5', '5_0', '٥'
# srun 22.05: "srun: error: node2: task 2: Exited with exit code 3", "... tasks 1-2: Killed",
# "... task 0: Terminated"
_SRUN_TASK_END = re.compile(r"^srun: error: \S+: tasks? [0-9,\-]+: (?:Exited with exit code ([0-9]+)|(Killed|Terminated|"
                            r"Segmentation fault|Aborted))")
_SIGNALS = {"Killed": 9, "Terminated": 15, "Segmentation fault": 11, "Aborted": 6}


def strict_int(value: object, name: str, minimum: int = 0, maximum: Optional[int] = None) -> int:
    """A plain non-negative decimal integer (as text) in [minimum, maximum], else one UsageError."""
    text = value.strip() if isinstance(value, str) else value
    if not isinstance(text, str) or not _DIGITS.fullmatch(text):
        raise UsageError(bad_value(name, value, f"an integer >= {minimum}"))
    number = int(text)
    if number < minimum or (maximum is not None and number > maximum):
        bound = f"an integer in {minimum}-{maximum}" if maximum is not None else f"an integer >= {minimum}"
        raise UsageError(bad_value(name, value, bound))
    return number


def batch_settings(env: Mapping[str, str], *, num_ps: str, min_ps: int = 0, mem_per_task_mb: str = "",
                   partition_info: Optional[str] = None, node_info: Optional[str] = None,
                   partition: Optional[str] = None) -> dict:
    """The template's numbers from the job's environment and its settings (all given as text).

    RESV_PORTS: 2 per task on the busiest node (a TensorFlow port and an auxiliary port).
    """
    from tf_for_slurm.plan.memory import memory_per_task
    from tf_for_slurm.plan.step import MAX_TASKS, parse_tasks_per_node

    if not env.get("SLURM_NTASKS"):
        raise UsageError("SLURM_NTASKS is not set: expected sbatch --ntasks (or -n)")
    ntasks = strict_int(env["SLURM_NTASKS"], "SLURM_NTASKS", 1, MAX_TASKS)
    cpus = strict_int(env.get("SLURM_CPUS_PER_TASK") or "1", "SLURM_CPUS_PER_TASK", 1, 1 << 20)
    n_ps = strict_int(num_ps, "NUM_PS", min_ps, MAX_TASKS)
    if ntasks - n_ps < 1:
        raise UsageError(f"NUM_PS={n_ps} leaves no worker in {ntasks} tasks (SLURM_NTASKS): expected at most "
                         f"{ntasks - 1}")
    tpn = env.get("SLURM_TASKS_PER_NODE") or str(ntasks)
    busiest = max(parse_tasks_per_node(tpn, "SLURM_TASKS_PER_NODE"))
    if mem_per_task_mb:
        per_task = strict_int(mem_per_task_mb, "MEM_PER_TASK_MB", 1, 1 << 40)
        mem_per_cpu = -(-per_task // cpus)  # rounded up: srun gets at least what was asked per task
    else:
        mem_per_cpu = memory_per_task({**env, "SLURM_CPUS_PER_TASK": str(cpus)}, cpus_per_task=cpus,
                                      partition_info=partition_info, node_info=node_info,
                                      partition=partition).per_cpu
    values = (ntasks, cpus, ntasks - n_ps, mem_per_cpu, 2 * busiest)
    return dict(zip(SETTINGS, values))


def first_failure(srun_stderr: str, srun_status: int) -> int:
    """The job's exit status: that of the task srun reported first as failed, else srun's own."""
    if srun_status == 0:
        return 0
    for line in srun_stderr.splitlines():
        m = _SRUN_TASK_END.match(line.strip())
        if not m:
            continue
        code = int(m.group(1)) if m.group(1) is not None else 128 + _SIGNALS[m.group(2)]
        if code != 0:
            return min(code, 255)
    return srun_status


# -- the two subcommands ------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `tf-slurm batch-settings` (the values come from the template's settings)."""
    parser.add_argument("--num-ps", required=True, help="parameter servers (the template's NUM_PS)")
    parser.add_argument("--min-ps", type=int, default=0, help="smallest NUM_PS allowed (default 0)")
    parser.add_argument("--mem-per-task-mb", default="",
                        help="MB per task (MEM_PER_TASK_MB); empty: from the allocation, partition or nodes")
    parser.add_argument("--partition", help="partition to read from --partition-info (default SLURM_JOB_PARTITION)")
    parser.add_argument("--partition-info", metavar="FILE|-", help="`scontrol show partition` output")
    parser.add_argument("--node-info", metavar="FILE|-", help="`scontrol show node` output")


def main(args: argparse.Namespace, env: Optional[Mapping[str, str]] = None) -> int:
    """Print `NTASKS CPUS_PER_TASK NUM_WORKERS MEM_PER_CPU RESV_PORTS` (integers, one line)."""
    import os

    from tf_for_slurm.plan.memory import _read_source

    stdin_used: List[str] = []
    values = batch_settings(
        os.environ if env is None else env, num_ps=args.num_ps, min_ps=args.min_ps,
        mem_per_task_mb=args.mem_per_task_mb,
        partition_info=_read_source(args.partition_info, "--partition-info", stdin_used),
        node_info=_read_source(args.node_info, "--node-info", stdin_used), partition=args.partition)
    print(" ".join(str(values[k]) for k in SETTINGS))
    return 0


def add_status_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `tf-slurm batch-status`."""
    parser.add_argument("--srun-status", required=True, help="srun's exit status ($?)")
    parser.add_argument("--srun-log", metavar="FILE", required=True, help="srun's stderr, as written")


def main_status(args: argparse.Namespace) -> int:
    """Print the job's exit status (an integer 0-255)."""
    status = strict_int(args.srun_status, "--srun-status", 0, 255)
    try:
        with open(args.srun_log, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError as exc:
        raise UsageError(bad_value("--srun-log", args.srun_log, f"a readable file ({exc.strerror})")) from None
    print(first_failure(text, status))
    return 0
