"""Compatibility face with the original API names (scripts written for tf4slurm keep working)."""

from __future__ import annotations

from typing import Optional, Sequence

from .compat import ib_switch, remember_plan
from .environment import compat_arguments, noib_address, plan_from_env


def GetServerDictionary(ListOfTFTasks: Sequence[str], NoIB: Optional[bool] = None,  # noqa: N802,N803
                        InfinyBand: Optional[bool] = None):  # (original names)
    """Read os.environ and return (ServerDictionary, job_type, task_index) for this task.

    NoIB=True: host names; NoIB=False, or the original's InfinyBand=True: InfiniBand names
    (TF_SLURM_IB_TEMPLATE, default '{host}-ib'); neither: auto (InfiniBand names when they resolve
    for every node of the step, else host names).  An explicit TF_SLURM_ADDRESS policy wins over
    all of them.  The plan is remembered, so hooks built later without a worker index find it.
    """
    no_ib = ib_switch(NoIB, InfinyBand)  # checks both; None = auto
    tasks, _ = compat_arguments(ListOfTFTasks, bool(no_ib))
    plan = plan_from_env(tasks=tasks, address=noib_address(no_ib))
    remember_plan(plan)
    return plan.server_dictionary(), plan.job_type, plan.task_index
