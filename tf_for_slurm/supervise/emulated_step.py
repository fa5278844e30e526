"""The step `tf-slurm local` emulates: its layout over nodes `node[1-K]` and each task's environment.

Why a module of its own: these are the step's values (what srun would have decided and exported),
checked before any process starts; launcher.py only starts, watches and ends the processes.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Dict, Mapping, Optional, Tuple

from tf_for_slurm.errors import PlanError, SlurmEnvError, UsageError, bad_value
from tf_for_slurm.host import settings, slurm
from tf_for_slurm.plan import roles as roles_mod
from tf_for_slurm.plan.step import format_tasks_per_node, parse_tasks_per_node

NODE_PREFIX = "node"

# Inherited variables that describe some other step or cluster: a fresh step must not see them
# (besides every Slurm variable, slurm.PREFIXES).  The user's own settings of the plan that
# `tf-slurm local` has no option for (placement, explicit chief, base port) are passed on.
DROPPED: Tuple[str, ...] = ("TF_CONFIG",) + settings.STALE_FOR_LOCAL
# how every emulated node is reached: all of them are this one host
LOOPBACK_ADDRESS = "template:127.0.0.1"
STEP_PORT_SCOPE = "step"


@dataclass(frozen=True)
class Layout:
    """Where the emulated step puts its tasks: node names and task counts, Slurm's block order."""

    nodes: tuple  # ('node1', 'node2', ...)
    tasks_per_node: tuple  # one count per node

    @property
    def ntasks(self) -> int:
        return sum(self.tasks_per_node)

    @property
    def nodelist(self) -> str:
        """Slurm's compressed form: 'node1' or 'node[1-K]'."""
        if len(self.nodes) == 1:
            return self.nodes[0]
        return f"{NODE_PREFIX}[1-{len(self.nodes)}]"

    def placement(self, rank: int) -> tuple:
        """rank -> (node index, local id): block distribution, node by node."""
        first = 0
        for node_index, count in enumerate(self.tasks_per_node):
            if rank < first + count:
                return node_index, rank - first
            first += count
        raise UsageError(bad_value("rank", rank, f"a task rank in 0-{self.ntasks - 1}"))


def make_layout(ntasks: int, nodes: Optional[int] = None, tasks_per_node: Optional[str] = None) -> Layout:
    """Validate -n/--nodes/--tasks-per-node and lay the tasks out like Slurm's block layout.

    Without a spec each node gets ntasks // nodes tasks and the first ntasks % nodes one more.
    """
    if not isinstance(ntasks, int) or isinstance(ntasks, bool) or ntasks < 1:
        raise UsageError(bad_value("-n/--ntasks", ntasks, "a number of tasks >= 1"))
    if nodes is not None and (not isinstance(nodes, int) or isinstance(nodes, bool) or nodes < 1):
        raise UsageError(bad_value("--nodes", nodes, "a number of nodes >= 1"))
    if tasks_per_node is not None:
        try:
            counts = parse_tasks_per_node(tasks_per_node, "--tasks-per-node")
        except SlurmEnvError as exc:
            raise UsageError(str(exc)) from None
        if nodes is not None and len(counts) != nodes:
            raise UsageError(bad_value("--tasks-per-node", tasks_per_node,
                                       f"one count per node ({nodes} nodes from --nodes), got {len(counts)}"))
        if sum(counts) != ntasks:
            raise UsageError(bad_value("--tasks-per-node", tasks_per_node,
                                       f"counts summing to -n {ntasks}, got {sum(counts)} "
                                       f"({format_tasks_per_node(counts)})"))
    else:
        k = 1 if nodes is None else nodes
        if k > ntasks:
            raise UsageError(bad_value("--nodes", k, f"at most -n {ntasks} (every node runs a task)"))
        base, extra = divmod(ntasks, k)
        counts = tuple(base + (1 if i < extra else 0) for i in range(k))
    names = tuple(f"{NODE_PREFIX}{i + 1}" for i in range(len(counts)))
    return Layout(nodes=names, tasks_per_node=tuple(counts))


def check_roles(ntasks: int, ps: Optional[int] = None, tasks: Optional[str] = None) -> None:
    """Reject --ps/--tasks that no plan could use, before any process starts."""
    if ps is not None and tasks is not None:
        raise UsageError(f"--ps={ps!r} and --tasks={tasks!r}: expected only one of them")
    try:
        if tasks is not None:
            roles_mod.roles_from_list(tasks, ntasks, "--tasks")
        if ps is not None:
            roles_mod.first_ps(ntasks, ps)
    except PlanError as exc:
        raise UsageError(str(exc).replace("ps=", "--ps=", 1) if tasks is None else str(exc)) from None


def task_env(layout: Layout, rank: int, job_id: str, base: Mapping[str, str],
             ps: Optional[int] = None, tasks: Optional[str] = None) -> Dict[str, str]:
    """The environment of task `rank`: `base` without stale Slurm/TF variables, plus the step's."""
    node_index, local_id = layout.placement(rank)
    env = {k: v for k, v in base.items() if not k.startswith(slurm.PREFIXES) and k not in DROPPED}
    env.update(slurm.fake_step_env(job_id=job_id, nodelist=layout.nodelist, tasks_per_node=layout.tasks_per_node,
                                   rank=rank, local_id=local_id, node_index=node_index,
                                   node_name=layout.nodes[node_index]))
    env[settings.ADDRESS] = LOOPBACK_ADDRESS
    env[settings.PORT_SCOPE] = STEP_PORT_SCOPE
    if tasks is not None:
        env[settings.TASKS] = ",".join(r.strip() for r in tasks.split(","))
    if ps is not None:
        env[settings.PS] = str(ps)
    return env


def output_path(pattern: str, job_id: str, rank: int, node_index: int, node: str) -> str:
    """srun's --output patterns: %j job id, %t task rank, %n node index, %N node name, %% a '%'."""
    fields = {"j": job_id, "t": str(rank), "n": str(node_index), "N": node, "%": "%"}
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if c != "%":
            out.append(c)
            i += 1
            continue
        key = pattern[i + 1:i + 2]
        if key not in fields:
            raise UsageError(bad_value("--output", pattern, "a file name pattern with %j, %t, %n, %N or %% only"))
        out.append(fields[key])
        i += 2
    return "".join(out)


def new_job_id() -> str:
    """A fresh numeric job id, so concurrent launches get different port windows."""
    return str(random.SystemRandom().randint(1_000_000, 9_999_999))


def check_job_id(job_id: str) -> str:
    """A job id given for the emulated step: digits, as Slurm's (ports derive from it)."""
    if not str(job_id).isdigit():
        raise UsageError(bad_value("--job-id", job_id, "a numeric Slurm job id like 12345"))
    return str(job_id)
