"""TF1-style runtime: servers, the done queue, the ps wait, hooks and `launch`.

Importing this package does not import TensorFlow: the submodules import it only inside the
functions that need it.  (Imports are eager so that the submodule `launch` can never shadow
the function `launch` on this package.)
"""

from tf_for_slurm.runtime.done_queue import (
    QueueManagementHook,
    create_done_queue,
    create_done_queues,
    report_done,
    reporter_index,
    reporter_tasks,
    reporting_done,
)
from tf_for_slurm.runtime.hooks import BarrierOnChiefHook, BarrierTimeout, PrintStepHook, SessionHook, StopOnSignalHook
from tf_for_slurm.runtime.launch import TrainContext, chief_of, launch
from tf_for_slurm.runtime.ps_wait import EXIT_OK, EXIT_TIMEOUT, EXIT_WORKER_FAILED, EXIT_WORKER_LOST, wait_for_workers
from tf_for_slurm.runtime.server import check_port_free, configure_gpus, device_filters, session_config, start_server

__all__ = [
    "BarrierOnChiefHook", "BarrierTimeout", "EXIT_OK", "EXIT_TIMEOUT", "EXIT_WORKER_FAILED", "EXIT_WORKER_LOST",
    "PrintStepHook", "QueueManagementHook", "SessionHook", "StopOnSignalHook", "TrainContext", "check_port_free",
    "chief_of", "configure_gpus", "create_done_queue", "create_done_queues", "device_filters",
    "launch", "report_done", "reporter_index", "reporter_tasks", "reporting_done",
    "session_config", "start_server", "wait_for_workers",
]
