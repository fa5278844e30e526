"""The environment a task's program gets: TF_CONFIG and friends, at any cluster size.

Linux refuses an environment string longer than 128 KiB (MAX_ARG_STRLEN) at exec time; the full
TF_CONFIG of ~16k tasks is larger.  Then the full JSON goes to a file, TF_CONFIG carries a trimmed
spec (ps, chief, and this task sparse: {"worker": {"7": "host:port"}}, which TensorFlow's
TFConfigClusterResolver accepts), and a `sitecustomize` shim put first on PYTHONPATH loads the full
TF_CONFIG into os.environ when a Python program starts (os.environ has no such limit in-process).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Optional

from tf_for_slurm.host import settings
from tf_for_slurm.plan.cluster import ClusterPlan
from tf_for_slurm.plan.strategy import find_chief

MAX_ENV_STRING = 128 * 1024  # bytes, "NAME=value" plus the trailing NUL
SHIM_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "_shim")  # tf_for_slurm/_shim


@dataclass(frozen=True)
class TaskEnv:
    variables: dict  # name -> value to set
    full_tf_config: str  # the complete JSON (to write to a file when `spill` is set)
    spill: bool  # True when TF_CONFIG had to be trimmed and the full JSON needs the file route
    note: str  # one line saying what was done


def fits(name: str, value: str) -> bool:
    return len(name.encode()) + 1 + len(value.encode()) + 1 <= MAX_ENV_STRING


def trimmed_tf_config(plan: ClusterPlan, rank: int) -> dict:
    """What a ps/worker task needs in TF1 and PS-strategy clusters: every ps, the chief, itself."""
    task = plan.tasks[rank]
    cluster: dict = {}
    for role, addrs in plan.cluster_spec().items():
        if role in ("ps", "chief"):
            cluster[role] = addrs
    if task.role not in ("ps", "chief"):
        cluster[task.role] = {str(task.index): task.address}
    return {"cluster": cluster, "task": {"type": task.role, "index": task.index}}


def task_env(plan: ClusterPlan, rank: Optional[int] = None) -> TaskEnv:
    rank = plan.me.rank if rank is None else rank
    task = plan.tasks[rank]
    full = plan.tf_config_json(rank)
    chief = find_chief(plan.tasks)
    base = {
        settings.JOB_TYPE: task.role,
        settings.TASK_INDEX: str(task.index),
        settings.RANK: str(rank),
        settings.NUM_PS: str(plan.count("ps")),
        settings.NUM_WORKERS: str(plan.count("worker")),
        settings.SELF_ADDRESS: task.address,
        settings.IS_CHIEF: "1" if chief is not None and chief.rank == rank else "0",
    }
    if fits("TF_CONFIG", full):
        return TaskEnv({"TF_CONFIG": full, **base}, full, False, "TF_CONFIG set in the environment")
    trimmed = json.dumps(trimmed_tf_config(plan, rank), separators=(",", ":"))
    if fits("TF_CONFIG", trimmed):
        note = (f"full TF_CONFIG is {len(full)} bytes (> 128 KiB, too large for one environment string): "
                "TF_CONFIG holds a trimmed spec (ps, chief, this task); Python programs get the full one "
                f"from {settings.TF_CONFIG_FILE} through the sitecustomize shim")
        return TaskEnv({"TF_CONFIG": trimmed, **base}, full, True, note)
    note = (f"full TF_CONFIG is {len(full)} bytes and even the trimmed spec is {len(trimmed)} bytes: "
            f"TF_CONFIG is left unset; Python programs get it from {settings.TF_CONFIG_FILE} through the "
            "sitecustomize shim")
    return TaskEnv(base, full, True, note)


def apply_tf_config(plan: ClusterPlan, rank: Optional[int] = None) -> None:
    """Set TF_CONFIG (full, at any size) and friends in this process's os.environ."""
    env = task_env(plan, rank)
    os.environ.update(env.variables)
    os.environ["TF_CONFIG"] = env.full_tf_config
