"""Compatibility face for scripts written against the original tf_for_slurm.

`from tf_for_slurm import DistributedTFQueueHook as dq` then `dq.create_done_queue(i, n)`,
`dq.create_done_queues(n_ps, n_workers)` and `dq.QueueManagementHook(n_ps, n_workers,
worker_index=i)` keep working.  Differences from the original: the number of workers is an
argument (no global FLAGS), and each worker must say which one it is (`worker_index`) so the
ps counts distinct workers.  Prefer `reporting_done` / `tf_for_slurm.runtime.launch`.
"""

from tf_for_slurm.runtime.done_queue import (  # noqa: F401
    QueueManagementHook,
    create_done_queue,
    create_done_queues,
    report_done,
    reporting_done,
)
from tf_for_slurm.runtime.hooks import BarrierOnChiefHook, PrintStepHook  # noqa: F401

__all__ = ["create_done_queue", "create_done_queues", "QueueManagementHook", "report_done",
           "reporting_done", "BarrierOnChiefHook", "PrintStepHook"]
