"""The cluster plan: every task of the step with its role, index, address and GPUs.

Built by `build_plan` from a `SlurmStep` (see slurm.py); everything downstream (CLI, runtime,
launcher, supervisor) reads only this object.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from typing import List, Mapping, NamedTuple, Optional, Sequence, Tuple

from tf_for_slurm.errors import PlanError, bad_value
from tf_for_slurm.plan.addresses import AddressPolicy, hosts_for
from tf_for_slurm.plan.ports import assign_ports
from tf_for_slurm.plan.roles import normalise_role
from tf_for_slurm.plan.step import SlurmStep
from tf_for_slurm.plan.strategy import find_chief

ROLE_ORDER = ("chief", "ps", "worker", "evaluator")


class Task(NamedTuple):
    """One task slot of the step (a NamedTuple: plans of 16k tasks build 4x faster than with dataclasses)."""

    rank: int  # slot index: node by node in Slurm's node order, local id within the node
    node: str  # Slurm node name
    node_index: int  # position of the node in the step's node list
    local_id: int  # SLURM_LOCALID of the task on its node
    role: str  # 'chief' | 'ps' | 'worker' | 'evaluator'
    index: int  # type: ignore[assignment]  # task index within its role (shadows tuple.index)
    host: str  # host part of the address (node name, IB name or IP)
    port: int  # TensorFlow server port
    aux_port: Optional[int] = None  # a second collision-free port (the chief's: the exec supervisors' hub)
    gpus: tuple = ()  # GPU ids Slurm gave this task's node (known only on the task's own node)

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
    details: tuple = field(default=())  # the same choices as (key, value) pairs, for `explain --json`
    me_hint: str = "an offline plan has no task"  # what `me` says when my_rank is unknown
    components: tuple = ()  # heterogeneous job: each task's component (rank order); () for a plain step

    # -- questions the rest of the code asks -------------------------------------------------
    @property
    def size(self) -> int:
        return len(self.tasks)

    @property
    def me(self) -> Task:
        """This process's task; only a plan built inside a step knows it."""
        if self.my_rank is None:
            raise PlanError(f"this task's place in the step is unknown: {self.me_hint}")
        return self.tasks[self.my_rank]

    @property
    def job_type(self) -> str:
        return self.me.role

    @property
    def task_index(self) -> int:
        return self.me.index

    @property
    def chief(self) -> Optional[Task]:
        """The task that initialises variables and writes checkpoints: the 'chief' if the plan has
        one, else worker 0 (TensorFlow's implicit chief); None without either."""
        return find_chief(self.tasks)

    def tasks_with_role(self, role: str) -> list:
        return [t for t in self.tasks if t.role == role]

    def task(self, role: str, index: int) -> Task:
        for t in self.tasks:
            if t.role == role and t.index == index:
                return t
        raise PlanError(f"role={role!r} index={index}: no such task in the plan")

    def count(self, role: str) -> int:
        return sum(1 for t in self.tasks if t.role == role)

    def server_dictionary(self) -> dict:
        """{'ps': [...], 'worker': [...]} (plus 'chief'/'evaluator' when used), index order.

        'ps' and 'worker' are always present, as in the original ServerDictionary.
        """
        return {role: list(addrs) for role, addrs in self._addresses_by_role.items()}

    @cached_property
    def _addresses_by_role(self) -> dict:
        groups: dict = {role: [] for role in ROLE_ORDER}
        for t in self.tasks:  # tasks are in rank order and indices grow with rank
            host = t.host
            groups[t.role].append(f"[{host}]:{t.port}" if ":" in host else f"{host}:{t.port}")
        return {r: a for r, a in groups.items() if a or r in ("ps", "worker")}

    def cluster_spec(self) -> dict:
        """Cluster dictionary for TensorFlow (TF_CONFIG's 'cluster'): empty jobs left out."""
        return {r: list(a) for r, a in self._addresses_by_role.items() if a}

    def tf_config(self, rank: Optional[int] = None) -> dict:
        """The TF_CONFIG dictionary for task `rank` (default: this task)."""
        task = self.me if rank is None else self.tasks[rank]
        return {"cluster": self.cluster_spec(), "task": {"type": task.role, "index": task.index}}

    def tf_config_json(self, rank: Optional[int] = None) -> str:
        return json.dumps(self.tf_config(rank), separators=(",", ":"))


def localhost_plan(roles: list, ports: list, my_rank: Optional[int] = None) -> ClusterPlan:
    """A plan of tasks all on 127.0.0.1 with the given roles and ports (tests, local runs)."""
    counters: dict = {}
    tasks = []
    for rank, (role, port) in enumerate(zip(roles, ports)):
        role = normalise_role(role, f"roles[{rank}]")
        index = counters.get(role, 0)
        counters[role] = index + 1
        tasks.append(Task(rank=rank, node="localhost", node_index=0, local_id=rank, role=role,
                          index=index, host="127.0.0.1", port=int(port)))
    return ClusterPlan(tasks=tuple(tasks), my_rank=my_rank, job_id="local", step_id="0")


def build_plan(step: SlurmStep, roles: Sequence[str], *, address: Optional[AddressPolicy] = None,
               port_scope: str = "auto", base_port: Optional[int] = None,
               node_addresses: Optional[Mapping[str, str]] = None, ports: Optional[Sequence[int]] = None,
               names: Optional[Mapping[str, str]] = None,
               me_hint: str = "an offline plan has no task") -> ClusterPlan:
    """Slots from the step, labelled with `roles` (one per slot, node by node), with addresses and ports.

    `ports` (optional, one per slot) overrides the port policy: the mpi4py rendezvous uses it.
    `names` says where port_scope, base_port and the reserved ports came from ({'port_scope': ...,
    'base_port': ..., 'reserved': ...}), for error messages; `me_hint` what `plan.me` says when this
    task's slot is unknown.
    """
    names = names or {}
    policy = address if address is not None else AddressPolicy("hostname")
    if port_scope not in ("auto", "node", "step"):
        raise PlanError(bad_value(names.get("port_scope", "port_scope"), port_scope, "'node' or 'step'"))
    if len(roles) != step.ntasks:
        raise PlanError(f"roles has {len(roles)} entries: expected one per task ({step.ntasks})")
    hosts = hosts_for(step.nodes, policy, node_addresses)
    slot_node, slot_local = _slots(step.tasks_per_node)
    slot_host = [hosts[step.nodes[n]] for n in slot_node]
    scope = "step" if port_scope == "step" or (port_scope == "auto" and policy.shared_host) else "node"
    policy_text = policy.kind + (":" + policy.arg if policy.arg else "")
    notes: list = [f"address policy {policy_text}", f"port scope {scope}"]
    details: dict = {"address_policy": policy_text, "port_scope": scope}
    if ports is not None:
        if len(ports) != len(slot_node):
            raise PlanError(f"ports has {len(ports)} entries: expected one per task ({len(slot_node)})")
        port_list: Sequence[int] = list(ports)
        aux_list: Sequence[Optional[int]] = [None] * len(ports)
        notes.append("ports exchanged between tasks (rendezvous)")
        details["port_policy"] = "rendezvous"
    else:
        port_list, aux_list = _policy_ports(step, _port_offsets(slot_host, scope), scope, base_port, names,
                                            notes, details)
    my_slot = step.my_slot
    tasks = _tasks(step, roles, my_slot, (slot_node, slot_local, slot_host), port_list, aux_list)
    return ClusterPlan(tasks=tasks, my_rank=my_slot, job_id=step.job_id, step_id=step.step_id,
                       notes=tuple(notes), details=tuple(details.items()), me_hint=me_hint,
                       components=step.task_components)


def _slots(tasks_per_node: Sequence[int]) -> Tuple[List[int], List[int]]:
    """(node index, local id) of every slot, node by node (Slurm's block layout)."""
    slot_node: List[int] = []
    slot_local: List[int] = []
    for node_index, count in enumerate(tasks_per_node):
        slot_node.extend([node_index] * count)
        slot_local.extend(range(count))
    return slot_node, slot_local


def _port_offsets(slot_host: Sequence[str], scope: str) -> List[int]:
    """Each slot's offset in its port window: unique across the step, or per host."""
    if scope == "step":
        return list(range(len(slot_host)))
    seen: dict = {}
    offsets: List[int] = []
    for h in slot_host:
        offsets.append(seen.get(h, 0))
        seen[h] = offsets[-1] + 1
    return offsets


def _policy_ports(step: SlurmStep, offsets: Sequence[int], scope: str, base_port: Optional[int],
                  names: Mapping[str, str], notes: list,
                  details: dict) -> Tuple[Sequence[int], Sequence[Optional[int]]]:
    """(ports, aux ports) from the port policy; the choice is added to `notes` and `details`."""
    reserved = step.resv_ports if scope == "node" else ()
    if reserved and len(set(step.components)) > 1:  # each sub-range is reserved on its own component only
        reserved = ()
        notes.append(f"reserved ports ({names.get('reserved', 'reserved')}) not used: in a step over "
                     f"{len(set(step.components))} heterogeneous-job components each sub-range is reserved "
                     "only on its own component's nodes")
    choice = assign_ports(offsets, job_id=step.job_id, step_id=step.step_id, reserved=reserved,
                          base_port=base_port, base_port_name=names.get("base_port", "base_port"),
                          reserved_name=names.get("reserved", "reserved"))
    notes.append(choice.note)
    details.update(port_policy=choice.policy, port_window=f"{choice.span[0]}-{choice.span[1]}")
    return choice.ports, choice.aux_ports


def _tasks(step: SlurmStep, roles: Sequence[str], my_slot: Optional[int], slots: tuple,
           port_list: Sequence[int], aux_list: Sequence[Optional[int]]) -> tuple:
    """The Task of every slot, in rank order; only this task's slot (`my_slot`) knows its node's GPUs.

    slots: (node index, local id, host) lists, one entry per slot."""
    slot_node, slot_local, slot_host = slots
    counters: dict = {}
    nodes, gpus, make = step.nodes, step.gpus, tuple.__new__  # tuple.__new__: 3x cheaper than Task(...)
    tasks = []
    for rank, role in enumerate(roles):
        index = counters.get(role, 0)
        counters[role] = index + 1
        n = slot_node[rank]
        tasks.append(make(Task, (rank, nodes[n], n, slot_local[rank], role, index, slot_host[rank],
                                 port_list[rank], aux_list[rank], gpus if rank == my_slot else ())))
    return tuple(tasks)
