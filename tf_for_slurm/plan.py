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

    # -- questions the rest of the code asks -------------------------------------------------
    @property
    def size(self) -> int:
        return len(self.tasks)

    @property
    def me(self) -> Task:
        """This process's task; only a plan built inside a step knows it."""
        if self.my_rank is None:
            from .errors import PlanError

            raise PlanError(
                "this task's rank is unknown (offline plan): expected SLURM_PROCID/SLURM_LOCALID "
                "and SLURM_NODEID in the environment"
            )
        return self.tasks[self.my_rank]

    @property
    def job_type(self) -> str:
        return self.me.role

    @property
    def task_index(self) -> int:
        return self.me.index

    def tasks_with_role(self, role: str) -> list:
        return [t for t in self.tasks if t.role == role]

    def task(self, role: str, index: int) -> Task:
        for t in self.tasks:
            if t.role == role and t.index == index:
                return t
        from .errors import PlanError

        raise PlanError(f"role={role!r} index={index}: no such task in the plan")

    def count(self, role: str) -> int:
        return sum(1 for t in self.tasks if t.role == role)

    def server_dictionary(self) -> dict:
        """{'ps': [...], 'worker': [...]} (plus 'chief'/'evaluator' when used), index order."""
        out: dict = {}
        for role in ROLE_ORDER:
            members = self.tasks_with_role(role)
            if members or role in ("ps", "worker"):
                if members or role == "worker":
                    out[role] = [t.address for t in sorted(members, key=lambda t: t.index)]
        return out

    def tf_config(self, rank: Optional[int] = None) -> dict:
        """The TF_CONFIG dictionary for task `rank` (default: this task)."""
        task = self.me if rank is None else self.tasks[rank]
        return {"cluster": self.server_dictionary(), "task": {"type": task.role, "index": task.index}}

    def tf_config_json(self, rank: Optional[int] = None) -> str:
        return json.dumps(self.tf_config(rank), separators=(",", ":"))


def localhost_plan(roles: list, ports: list, my_rank: Optional[int] = None) -> ClusterPlan:
    """A plan of tasks all on 127.0.0.1 with the given roles and ports (tests, local runs)."""
    from .roles import normalise_role

    counters: dict = {}
    tasks = []
    for rank, (role, port) in enumerate(zip(roles, ports)):
        role = normalise_role(role, f"roles[{rank}]")
        index = counters.get(role, 0)
        counters[role] = index + 1
        tasks.append(Task(rank=rank, node="localhost", node_index=0, local_id=rank, role=role,
                          index=index, host="127.0.0.1", port=int(port)))
    return ClusterPlan(tasks=tuple(tasks), my_rank=my_rank, job_id="local", step_id="0")
