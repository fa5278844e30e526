"""This task's place as the original tf4slurm hooks need it, from a plan or from TF_CONFIG.

The original hooks were built from counts alone (`QueueManagementHook(NumberOfPS=1,
NumberOfWorkers=2)`); this library's hooks also need the task's *reporter index* (so a ps counts
distinct workers).  `host.environment.this_task` decides where it comes from; the functions here
are pure: values in, values out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional, Tuple

from tf_for_slurm.errors import UsageError, bad_value
from tf_for_slurm.plan.strategy import reporter_tasks


@dataclass(frozen=True)
class TaskInfo:
    """This task as the original hooks need it."""

    job_type: str
    task_index: int
    n_ps: int
    n_workers: int  # tasks that train and report done: the chief (if any) + the workers
    worker_index: Optional[int]  # reporter index (chief first, then workers); None for ps/evaluator
    source: str  # where it came from, for error messages

    @property
    def name(self) -> str:
        return f"{self.job_type}:{self.task_index}"


def info_from_plan(plan: Any, source: str) -> TaskInfo:
    """TaskInfo of `plan.me`, reporter indices numbered as the done queue numbers them."""
    me = plan.me
    reporters = reporter_tasks(plan)
    index = next((i for i, t in enumerate(reporters) if t.rank == me.rank), None)
    return TaskInfo(me.role, me.index, plan.count("ps"), len(reporters), index, source)


def info_from_tf_config(tf_config: Mapping[str, Any], name: str = "TF_CONFIG") -> TaskInfo:
    """TaskInfo from a TF_CONFIG dictionary; one-line UsageError when it lacks what is needed."""
    cluster = tf_config.get("cluster") if isinstance(tf_config, Mapping) else None
    task = tf_config.get("task") if isinstance(tf_config, Mapping) else None
    if not isinstance(cluster, Mapping) or not isinstance(task, Mapping):
        raise UsageError(bad_value(name, tf_config, "a JSON object with 'cluster' and 'task'"))
    job_type, index = task.get("type"), task.get("index", 0)
    if job_type == "master":
        job_type = "chief"
    sizes = {}
    for role, members in cluster.items():
        role = "chief" if role == "master" else role
        sizes[role] = len(members) if isinstance(members, (list, tuple, Mapping)) else 0
    if not isinstance(job_type, str) or job_type not in sizes or isinstance(index, bool) \
            or not isinstance(index, int) or not 0 <= index < sizes[job_type]:
        raise UsageError(bad_value(f"{name} task", dict(task),
                                   f"a type among {sorted(sizes)} and an index within that job"))
    n_workers = sizes.get("chief", 0) + sizes.get("worker", 0)
    if job_type == "chief":
        worker_index: Optional[int] = index
    elif job_type == "worker":
        worker_index = sizes.get("chief", 0) + index
    else:
        worker_index = None
    return TaskInfo(job_type, index, sizes.get("ps", 0), n_workers, worker_index, name)


def one_of(new_name: str, new: Any, old_name: str, old: Any) -> Tuple[Any, str]:
    """The value of an argument that has today's name and the original one, and the name used."""
    if new is not None and old is not None and new != old:
        raise UsageError(f"{new_name}={new!r} and {old_name}={old!r}: expected only one of them "
                         f"({old_name} is the original tf4slurm name of {new_name})")
    return (old, old_name) if old is not None else (new, new_name)


def fill_from_task(info: TaskInfo, who: str, n_ps: Optional[int], n_ps_name: str, n_workers: Optional[int],
                   n_workers_name: str, worker_index: Optional[int] = None) -> Tuple[int, int, int]:
    """(n_ps, n_workers, worker_index) for a hook: what is missing comes from `info`; counts given
    are checked against it (a wrong count would leave the ps waiting for a worker that never comes)."""
    if worker_index is None and info.worker_index is None:
        raise UsageError(f"{who}: this task is {info.name} (from {info.source}): expected it only on a "
                         "worker or chief task, or pass worker_index=")
    for name, given, known in ((n_ps_name, n_ps, info.n_ps), (n_workers_name, n_workers, info.n_workers)):
        if given is not None and given != known:
            raise UsageError(bad_value(name, given, f"{known}, the number in this step (from {info.source})"))
    index = info.worker_index if worker_index is None else worker_index
    assert index is not None  # checked above
    return info.n_ps, info.n_workers, index
