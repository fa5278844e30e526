"""Compatibility face with the original API names (scripts written for tf4slurm keep working)."""

from __future__ import annotations

import os
from typing import Sequence

from .environment import ib_address, plan_from_env


def GetServerDictionary(ListOfTFTasks: Sequence[str], NoIB: bool = True):  # noqa: N802,N803 (original names)
    """Read os.environ and return (ServerDictionary, job_type, task_index) for this task.

    NoIB=False addresses nodes by their InfiniBand names (TF_SLURM_IB_TEMPLATE, default '{host}-ib').
    """
    policy = ib_address(NoIB)
    spec = "hostname" if policy.kind == "hostname" else f"template:{policy.arg}"
    if NoIB and os.environ.get("TF_SLURM_ADDRESS"):
        spec = os.environ["TF_SLURM_ADDRESS"]  # an explicit policy (e.g. the local launcher's) wins
    plan = plan_from_env(tasks=list(ListOfTFTasks), address=spec)
    return plan.server_dictionary(), plan.job_type, plan.task_index
