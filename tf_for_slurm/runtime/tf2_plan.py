"""The plan side of the TF2 strategies: which plan, which cluster, which tasks.  No TensorFlow.

Shared by `runtime.tf2` (building the strategies) and `runtime.pss_exit` (ending the
ParameterServerStrategy servers), so both check a plan the same way and name the same tasks.
"""

from __future__ import annotations

from typing import Optional

from tf_for_slurm.errors import PlanError, UsageError, bad_value
from tf_for_slurm.host import settings
from tf_for_slurm.host.environment import plan_from_env
from tf_for_slurm.plan.cluster import ClusterPlan, Task


def plan_or_env(plan: Optional[ClusterPlan], strategy: str) -> ClusterPlan:
    """The given plan, or one built from the Slurm environment with this strategy's defaults.

    Defaults apply only where the user set no roles (TF_SLURM_TASKS / TF_SLURM_PS): MWMS wants
    no ps; ParameterServerStrategy wants a chief (its coordinator).
    """
    if plan is not None:
        if not isinstance(plan, ClusterPlan):
            raise UsageError(bad_value("plan", type(plan).__name__, "a tf_for_slurm ClusterPlan or None"))
        return plan
    env = settings.environ()
    kwargs: dict = {}
    if strategy == "mwms" and not (settings.text(env, settings.TASKS) or settings.text(env, settings.PS)):
        kwargs["ps"] = 0
    if strategy == "pss" and not settings.text(env, settings.TASKS):
        kwargs["chief"] = True
    return plan_from_env(**kwargs)


def cluster_dict(plan: ClusterPlan) -> dict:
    """server_dictionary() without empty roles: TensorFlow rejects or mis-handles an empty job."""
    return {role: list(addrs) for role, addrs in plan.server_dictionary().items() if addrs}


def task_of(plan: ClusterPlan, rank: Optional[int]) -> Task:
    """Task `rank` of the plan (this task when None), after checking the rank."""
    if rank is None:
        return plan.me
    if not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < plan.size:
        raise UsageError(bad_value("rank", rank, f"an int in [0, {plan.size - 1}]"))
    return plan.tasks[rank]


def pss_coordinator(plan: ClusterPlan) -> Task:
    """The coordinator (chief:0) after checking the plan can run ParameterServerStrategy."""
    roles = [t.role for t in plan.tasks]
    if plan.count("chief") != 1:
        raise PlanError(bad_value("plan roles", roles,
                                  "exactly one 'chief' (the ParameterServerStrategy coordinator), "
                                  f"e.g. {settings.TASKS}=chief,ps,worker,worker"))
    if plan.count("ps") < 1 or plan.count("worker") < 1:
        raise PlanError(bad_value("plan roles", roles,
                                  "at least one 'ps' and one 'worker' for ParameterServerStrategy"))
    return plan.task("chief", 0)


def pss_servers(plan: ClusterPlan) -> list:
    """The tasks that only serve under ParameterServerStrategy: every ps, then every worker."""
    return plan.tasks_with_role("ps") + plan.tasks_with_role("worker")


def pss_cluster_dict(plan: ClusterPlan) -> dict:
    """The cluster the PSS servers and coordinator share (an evaluator runs on its own)."""
    return {role: addrs for role, addrs in cluster_dict(plan).items() if role != "evaluator"}
