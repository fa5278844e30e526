"""Pure planning: values in, values out (no environment, no sockets, no processes, no TensorFlow).

`tf_for_slurm.plan` was the cluster-plan module before the layers became folders; its names
are still importable from here.
"""

from tf_for_slurm.plan.cluster import ROLE_ORDER, ClusterPlan, Task, build_plan, localhost_plan

__all__ = ["ROLE_ORDER", "ClusterPlan", "Task", "build_plan", "localhost_plan"]
