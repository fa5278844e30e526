"""Compatibility face with the original API names (scripts written for tf4slurm keep working)."""

from __future__ import annotations

from typing import Sequence

from .environment import noib_address, plan_from_env


def GetServerDictionary(ListOfTFTasks: Sequence[str], NoIB: bool = True):  # noqa: N802,N803 (original names)
    """Read os.environ and return (ServerDictionary, job_type, task_index) for this task.

    NoIB=False addresses nodes by their InfiniBand names (TF_SLURM_IB_TEMPLATE, default '{host}-ib');
    an explicit TF_SLURM_ADDRESS policy wins over both.
    """
    plan = plan_from_env(tasks=list(ListOfTFTasks), address=noib_address(NoIB))
    return plan.server_dictionary(), plan.job_type, plan.task_index
