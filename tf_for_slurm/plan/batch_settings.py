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

Pure: text in, integers out.  `tf_for_slurm.host.allocation.batch_settings(env, ...)` reads the job's
variables and `tf_for_slurm.cli.batch` is the two commands.
"""

from __future__ import annotations

import re
from typing import Dict, Mapping, Optional, Sequence, Set, Tuple

from tf_for_slurm.errors import UsageError
from tf_for_slurm.plan.numbers import parse_int
from tf_for_slurm.plan.step import MAX_TASKS, parse_tasks_per_node

__all__ = ["SETTINGS", "first_failure", "job_counts", "mem_per_cpu_for_task", "srun_ended_ranks", "strict_int",
           "template_settings"]

SETTINGS = ("NTASKS", "CPUS_PER_TASK", "NUM_WORKERS", "MEM_PER_CPU", "RESV_PORTS")
# srun 22.05: "srun: error: node2: task 2: Exited with exit code 3", "... tasks 1-2: Killed",
# "... task 0: Terminated"
_SRUN_TASK_END = re.compile(r"^srun: error: \S+: tasks? ([0-9,\-]+): "
                            r"(?:Exited with exit code ([0-9]+)|(Killed|Terminated|Segmentation fault|Aborted))")
_SIGNALS = {"Killed": 9, "Terminated": 15, "Segmentation fault": 11, "Aborted": 6}
MAX_RANKS = 1 << 20  # bound on one 'tasks A-B' range read from srun's stderr


def strict_int(value: object, name: str, minimum: int = 0, maximum: Optional[int] = None) -> int:
    """A plain non-negative decimal integer (as text) in [minimum, maximum], else one UsageError
    (plan.numbers.parse_int: ASCII digits only, so nothing bash would evaluate gets through)."""
    return parse_int(value, name, minimum, maximum)


def job_counts(*, ntasks: Optional[str], cpus_per_task: Optional[str], tasks_per_node: Optional[str],
               num_ps: str, min_ps: int = 0, names: Optional[Mapping[str, str]] = None,
               spare_nodes: int = 0) -> Tuple[int, int, int, int]:
    """(tasks, CPUs per task, workers, tasks on the busiest node) from the job's values as text; with
    `spare_nodes`, of the step that leaves the allocation's last nodes free (a lost node's replacements).

    Unset or empty `cpus_per_task` is 1 and `tasks_per_node` is every task on one node; unset `ntasks`
    (sbatch -N alone, or -N MIN-MAX) is what `tasks_per_node` counts: a task on each node Slurm gave.  `names`
    says where the values came from ({'ntasks': ..., 'cpus_per_task': ..., 'tasks_per_node': ...}),
    for the messages; NUM_PS is the templates' own setting.
    """
    names = names or {}
    nt_name = names.get("ntasks", "ntasks")
    if not ntasks and not tasks_per_node:
        raise UsageError(f"{nt_name} is not set: expected sbatch --ntasks (or -n) or --nodes (or -N)")
    cpus = strict_int(cpus_per_task or "1", names.get("cpus_per_task", "cpus_per_task"), 1, 1 << 20)
    if ntasks:
        count = strict_int(ntasks, nt_name, 1, MAX_TASKS)
        per_node = parse_tasks_per_node(tasks_per_node or str(count), names.get("tasks_per_node", "tasks_per_node"))
    else:  # sbatch -N alone, or a range -N MIN-MAX, sets no task count: one task on each node it gave (measured)
        per_node = parse_tasks_per_node(tasks_per_node or "", names.get("tasks_per_node", "tasks_per_node"))
        count = sum(per_node)
    if spare_nodes:
        if len(per_node) <= spare_nodes:
            raise UsageError(f"SPARE_NODES={spare_nodes} leaves no node for the step: the allocation has "
                             f"{len(per_node)} ({names.get('tasks_per_node', 'tasks_per_node')}={tasks_per_node!r}); "
                             f"expected sbatch --nodes=N+{spare_nodes}")
        per_node = per_node[:-spare_nodes]
        count = sum(per_node)
    n_ps = strict_int(num_ps, "NUM_PS", min_ps, MAX_TASKS)
    if count - n_ps < 1:
        raise UsageError(f"NUM_PS={n_ps} leaves no worker in {count} tasks ({nt_name}): expected at most "
                         f"{count - 1}")
    return count, cpus, count - n_ps, max(per_node)


def mem_per_cpu_for_task(mem_per_task_mb: str, cpus_per_task: int) -> int:
    """MB per CPU for `srun --mem-per-cpu` from the template's MEM_PER_TASK_MB, rounded up (srun gets
    at least what was asked per task)."""
    per_task = strict_int(mem_per_task_mb, "MEM_PER_TASK_MB", 1, 1 << 40)
    return -(-per_task // cpus_per_task)


def template_settings(ntasks: int, cpus_per_task: int, workers: int, mem_per_cpu: int,
                      busiest: int) -> Dict[str, int]:
    """The SETTINGS by name.  RESV_PORTS: 2 per task on the busiest node (a TensorFlow port and an
    auxiliary port)."""
    return dict(zip(SETTINGS, (ntasks, cpus_per_task, workers, mem_per_cpu, 2 * busiest)))


def first_failure(srun_stderr: str, srun_status: int) -> int:
    """The job's exit status: that of the task srun reported first as failed, else srun's own."""
    if srun_status == 0:
        return 0
    for line in srun_stderr.splitlines():
        m = _SRUN_TASK_END.match(line.strip())
        if not m:
            continue
        code = int(m.group(2)) if m.group(2) is not None else 128 + _SIGNALS[m.group(3)]
        if code != 0:
            return min(code, 255)
    return srun_status


def srun_ended_ranks(lines: Sequence[str]) -> Set[int]:
    """The ranks srun reported ending, by the same lines as first_failure ('srun: error: node2: tasks
    1-2,4: Exited ...')."""
    ranks: Set[int] = set()
    for line in lines:
        m = _SRUN_TASK_END.match(line.strip())
        for part in m.group(1).split(",") if m else ():
            low, _, high = part.partition("-")
            if low.isdigit() and (high.isdigit() or not high) and 0 <= int(high or low) - int(low) <= MAX_RANKS:
                ranks.update(range(int(low), int(high or low) + 1))
    return ranks
