"""Compatibility face with the original API names (scripts written for tf4slurm keep working)."""

from __future__ import annotations

import logging
from typing import Optional, Sequence

from tf_for_slurm._shim.tf_slurm_session_filters import install, install_recovery_wait
from tf_for_slurm.compat import ib_switch
from tf_for_slurm.host import settings
from tf_for_slurm.host.environment import compat_arguments, noib_address, plan_from_env, remember_plan
from tf_for_slurm.plan.strategy import exec_device_filters


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
    _session_filters(plan)
    return plan.server_dictionary(), plan.job_type, plan.task_index


def _session_filters(plan) -> None:
    """Give this task's TF1 sessions device filters, as `tf-slurm exec` does through its shim: the
    original scripts open sessions without them, and one opened after another task has exited
    (a late ps, or a session re-created after an error) would wait for it forever.
    TF_SLURM_DEVICE_FILTERS=0 turns this off; a session config that names filters is left alone."""
    if not settings.device_filters_on():
        return
    me = plan.me
    filters = exec_device_filters("tf1", me.role, me.index)
    if filters:
        install(filters, me.port)
        install_recovery_wait(settings.recovery_wait())
        logging.getLogger(__name__).info("device filters %s for this task's sessions", ",".join(filters))
