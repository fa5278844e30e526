"""tf_for_slurm: distributed TensorFlow on Slurm, from the step's environment to a cluster plan.

Importing this package never imports TensorFlow; only `tf_for_slurm.runtime` and
`tf_for_slurm.DistributedTFQueueHook` do.
"""

from .errors import PlanError, SlurmEnvError, TfSlurmError, UsageError
from .environment import plan_from_env
from .plan import ClusterPlan, Task, build_plan
from .slurm import SlurmStep, step_from_env

__all__ = [
    "ClusterPlan", "PlanError", "SlurmEnvError", "SlurmStep", "Task", "TfSlurmError", "UsageError",
    "build_plan", "plan_from_env", "step_from_env",
]
__version__ = "0.1.0"
