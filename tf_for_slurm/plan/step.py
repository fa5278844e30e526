"""A Slurm step as plain values: the `SlurmStep` record and the parsers of Slurm's notations.

Pure: no environment, no variable names (callers pass the name a value came from, for errors).
`host.slurm` reads a step from Slurm's variables, `host.mpi` from MPI, `tf-slurm local` emulates
one: all three produce the same `SlurmStep`, so everything downstream is identical.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional, Sequence

import hostlist

from tf_for_slurm.errors import SlurmEnvError, bad_value

# A host name as RFC 1123 defines it (labels of letters, digits and '-', 1-63 characters, not
# starting or ending with '-', 253 in all), plus '_', which some sites use in Slurm node names.
_HOST_RE = re.compile(r"(?=.{1,253}$)(?!-)[A-Za-z0-9_-]{1,63}(?<!-)(?:\.(?!-)[A-Za-z0-9_-]{1,63}(?<!-))*\.?")
_HOST_EXPECTED = ("host names of ASCII letters, digits, '-' and '.' (RFC 1123 labels of 1-63 characters, "
                  "no spaces)")
MAX_TASKS = hostlist.MAX_SIZE  # python-hostlist's own bound on one expansion
MAX_MEMORY_MB = 1 << 40  # 1 EiB: larger values are typing errors, not memory


@dataclass(frozen=True)
class SlurmStep:
    """What one Slurm step looks like, validated; identical whether it came from Slurm, mpi4py or the
    local launcher."""

    job_id: str
    step_id: str
    nodes: tuple  # node names in Slurm's order (duplicates kept)
    tasks_per_node: tuple  # one count per entry of `nodes`
    procid: Optional[int] = None  # this task's global rank (SLURM_PROCID)
    localid: Optional[int] = None  # this task's rank on its node (SLURM_LOCALID)
    nodeid: Optional[int] = None  # index of this task's node in `nodes` (SLURM_NODEID)
    node_name: Optional[str] = None  # SLURMD_NODENAME
    resv_ports: tuple = ()  # SLURM_STEP_RESV_PORTS, expanded
    cpus_per_task: Optional[int] = None
    mem_per_cpu_mb: Optional[int] = None
    mem_per_node_mb: Optional[int] = None
    gpus: tuple = ()  # GPU ids Slurm gave this node's step (SLURM_STEP_GPUS / SLURM_JOB_GPUS)
    source: str = "slurm"  # 'slurm-step', 'slurm-job' (batch script), 'mpi', 'offline'
    # heterogeneous job: the component index of each entry of `nodes` (then `nodes` is in component
    # order, see plan.hetjob); empty for a plain step
    components: tuple = ()

    @property
    def ntasks(self) -> int:
        return sum(self.tasks_per_node)

    @property
    def task_components(self) -> tuple:
        """The component index of each slot (node by node, as `my_slot` counts), or () for a plain step."""
        return tuple(c for c, count in zip(self.components, self.tasks_per_node) for _ in range(count))

    @property
    def my_slot(self) -> Optional[int]:
        """This task's slot: node by node in node order, local id within the node.

        Found from (node, localid), never from procid, so it is right for --distribution=cyclic.
        """
        if self.localid is None:
            return None
        node = self.my_node_index
        if node is None:
            return None
        return sum(self.tasks_per_node[:node]) + self.localid

    @property
    def my_node_index(self) -> Optional[int]:
        if self.nodeid is not None:
            return self.nodeid
        if self.node_name is not None:
            return self.nodes.index(self.node_name)
        return None


def parse_tasks_per_node(spec: str, name: str = "tasks per node") -> tuple:
    """'2(x3),1' -> (2, 2, 2, 1): Slurm's compressed per-node task counts (python-hostlist's parser,
    with blanks allowed and every count and repeat at least 1)."""
    expected = "a task count list like '4' or '2(x3),1'"
    if not isinstance(spec, str) or not spec.strip():
        raise SlurmEnvError(bad_value(name, spec, expected))
    compact = re.sub(r"\s+", "", spec)
    try:
        counts = hostlist.parse_slurm_tasks_per_node(compact)
    except hostlist.BadHostlist as exc:
        raise SlurmEnvError(bad_value(name, spec, f"{expected} ({exc})")) from None
    if not counts or min(counts) < 1 or re.search(r"\(x0+\)", compact):
        raise SlurmEnvError(bad_value(name, spec, "task counts and repeats of at least 1"))
    if sum(counts) > MAX_TASKS:
        raise SlurmEnvError(bad_value(name, spec, f"at most {MAX_TASKS} tasks"))
    return tuple(counts)


def format_tasks_per_node(counts: Sequence[int]) -> str:
    """(2, 2, 2, 1) -> '2(x3),1', the inverse of parse_tasks_per_node."""
    parts = []
    i = 0
    while i < len(counts):
        j = i
        while j < len(counts) and counts[j] == counts[i]:
            j += 1
        parts.append(str(counts[i]) if j - i == 1 else f"{counts[i]}(x{j - i})")
        i = j
    return ",".join(parts)


def expand_nodelist(spec: str, name: str = "node list") -> tuple:
    """Slurm hostlist -> node names, Slurm's order and duplicates kept."""
    if not isinstance(spec, str) or not spec.strip():
        raise SlurmEnvError(bad_value(name, spec, "a Slurm hostlist like 'node[1-3],gpu05'"))
    try:
        nodes = hostlist.expand_hostlist(spec.strip(), allow_duplicates=True)
    except hostlist.BadHostlist as exc:
        raise SlurmEnvError(bad_value(name, spec, f"a Slurm hostlist like 'node[1-3],gpu05' ({exc})")) from None
    if not nodes:
        raise SlurmEnvError(bad_value(name, spec, "at least one node"))
    check_host_names(nodes, name, spec)
    return tuple(nodes)


def is_host_name(host: str) -> bool:
    """True for an RFC 1123 host name (or IPv4 address); see _HOST_RE."""
    return isinstance(host, str) and host.isascii() and _HOST_RE.fullmatch(host) is not None


def check_host_names(names: Sequence[str], name: str, spec: object = None) -> None:
    """Reject names no resolver accepts ('node 1', non-ASCII) now, with the variable named, instead of
    at getaddrinfo time on one task or inside TF_CONFIG."""
    match = _HOST_RE.fullmatch
    for host in dict.fromkeys(names):
        if not (host.isascii() and match(host)):
            shown = spec if spec is not None else host
            detail = "" if shown == host else f" (node {host!r})"
            raise SlurmEnvError(bad_value(name, shown, _HOST_EXPECTED) + detail)


def parse_port_list(spec: str, name: str = "reserved ports") -> tuple:
    """'12000-12003,12010' -> (12000, 12001, 12002, 12003, 12010)."""
    out: list = []
    expected = "ports like '12000-12003' or '12000,12005'"
    for item in spec.split(","):
        lo, sep, hi = item.strip().partition("-")
        try:
            a, b = int(lo), int(hi) if sep else int(lo)
        except ValueError:
            raise SlurmEnvError(bad_value(name, spec, expected)) from None
        if not (1 <= a <= b <= 65535):
            raise SlurmEnvError(bad_value(name, spec, expected + " within 1-65535, low before high"))
        out.extend(range(a, b + 1))
    return tuple(out)


def offline_step(nodelist: str, tasks_per_node: str, job_id: str = "0", step_id: str = "0") -> SlurmStep:
    """A step described by hand (for `tf-slurm explain --nodelist ...`): no task of its own."""
    nodes = expand_nodelist(nodelist, "--nodelist")
    counts = parse_tasks_per_node(tasks_per_node, "--tasks-per-node")
    if len(counts) == 1 and len(nodes) > 1:
        counts = counts * len(nodes)  # one number means "that many on every node"
    if len(counts) != len(nodes):
        raise SlurmEnvError(
            f"--tasks-per-node={tasks_per_node!r}: expected one count per node ({len(nodes)} nodes) "
            f"or a single count, got {len(counts)}"
        )
    return SlurmStep(job_id=str(job_id), step_id=str(step_id), nodes=nodes, tasks_per_node=counts, source="offline")
