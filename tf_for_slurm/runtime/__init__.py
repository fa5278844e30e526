"""TF1-style runtime: servers, the done queue, the ps wait, hooks and `launch`.

Names are resolved lazily (PEP 562), so `import tf_for_slurm.runtime` does not import
TensorFlow; the submodules import it only inside the functions that need it.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "start_server": "server", "session_config": "server", "device_filters": "server",
    "configure_gpus": "server", "check_port_free": "server",
    "create_done_queue": "done_queue", "create_done_queues": "done_queue",
    "QueueManagementHook": "done_queue", "report_done": "done_queue",
    "reporting_done": "done_queue", "reporter_tasks": "done_queue", "reporter_index": "done_queue",
    "wait_for_workers": "ps_wait", "EXIT_OK": "ps_wait", "EXIT_WORKER_LOST": "ps_wait",
    "EXIT_TIMEOUT": "ps_wait",
    "BarrierOnChiefHook": "hooks", "PrintStepHook": "hooks", "BarrierTimeout": "hooks",
    "SessionHook": "hooks",
    "launch": "launch", "TrainContext": "launch", "chief_of": "launch",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tf_for_slurm.runtime' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list:
    return sorted(set(globals()) | set(_EXPORTS))
