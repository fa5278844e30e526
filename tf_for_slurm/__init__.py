"""tf_for_slurm: distributed TensorFlow on Slurm, from the step's environment to a cluster plan.

Importing this package never imports TensorFlow; only `tf_for_slurm.runtime` and
`tf_for_slurm.DistributedTFQueueHook` do.
"""

import importlib
from typing import TYPE_CHECKING

from tf_for_slurm import _moved
from tf_for_slurm.errors import PlanError, SlurmEnvError, TfSlurmError, UsageError

if TYPE_CHECKING:  # loaded on first use (_LAZY): `tf-slurm` and a task's program import only what they use
    from tf_for_slurm.host.environment import plan_from_env
    from tf_for_slurm.host.progress_report import report_progress
    from tf_for_slurm.host.slurm import step_from_env
    from tf_for_slurm.plan.cluster import ClusterPlan, Task, build_plan
    from tf_for_slurm.plan.step import SlurmStep

__all__ = [
    "ClusterPlan", "PlanError", "SlurmClusterResolver", "SlurmEnvError", "SlurmStep", "Task", "TfSlurmError",
    "UsageError", "build_plan", "plan_from_env", "report_progress", "step_from_env",
]
__version__ = "0.1.0"

_moved.install()  # old module paths (tf_for_slurm.slurm, ...) still import

# The public names, loaded on first use: `import tf_for_slurm` (every `tf-slurm` call starts with it)
# imports no plan, network or environment code until a name is asked for.
# The original tf4slurm names, importable from the package itself (`from tf_for_slurm import
# PrintStepHook`), likewise, so `import tf_for_slurm` still imports no TensorFlow (nor tf_for_slurm.runtime).
_LAZY = {
    "plan_from_env": "tf_for_slurm.host.environment",
    "report_progress": "tf_for_slurm.host.progress_report",
    "step_from_env": "tf_for_slurm.host.slurm",
    "ClusterPlan": "tf_for_slurm.plan.cluster",
    "Task": "tf_for_slurm.plan.cluster",
    "build_plan": "tf_for_slurm.plan.cluster",
    "SlurmStep": "tf_for_slurm.plan.step",
    "SlurmClusterResolver": "tf_for_slurm.runtime.slurm_resolver",  # imports no TensorFlow
    "GetServerDictionary": "tf_for_slurm.ServerDictionary",
    "create_done_queue": "tf_for_slurm.runtime.done_queue",
    "create_done_queues": "tf_for_slurm.runtime.done_queue",
    "QueueManagementHook": "tf_for_slurm.runtime.done_queue",
    "BarrierOnChiefHook": "tf_for_slurm.runtime.hooks",
    "PrintStepHook": "tf_for_slurm.runtime.hooks",
}


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tf_for_slurm' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(list(globals()) + list(_LAZY))
