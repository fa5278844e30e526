"""The cluster plan: every task of the step with its role, index, address and GPUs.

Built by `build_plan` from a `SlurmStep` (see slurm.py); everything downstream (CLI, runtime,
launcher, sidecar) reads only this object.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Optional

ROLE_ORDER = ("chief", "ps", "worker", "evaluator")


@dataclass(frozen=True)
class Task:
    """One task slot of the step."""

    rank: int  # slot index: node by node in Slurm's node order, local id within the node
    node: str  # Slurm node name
    node_index: int  # position of the node in the step's node list
    local_id: int  # SLURM_LOCALID of the task on its node
    role: str  # 'chief' | 'ps' | 'worker' | 'evaluator'
    index: int  # task index within its role
    host: str  # host part of the address (node name, IB name or IP)
    port: int  # TensorFlow server port
    aux_port: Optional[int] = None  # second collision-free port (ps sidecar), when available
    gpus: tuple = ()  # GPU ids Slurm gave this task ('' entries never invented)

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


@dataclass(frozen=True)
class ClusterPlan:
    tasks: tuple  # tuple[Task, ...] in rank order
    my_rank: Optional[int] = None  # this process's slot, None when planning offline
    job_id: str = "0"
    step_id: str = "0"
    notes: tuple = field(default=())  # human-readable notes on choices made (port policy, ...)
