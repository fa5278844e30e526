"""Read a Slurm step from an environment mapping: the only module that knows Slurm's variable names.

STEP variables win; JOB variables are the fallback, so a batch script (outside any step) can plan
the step it is about to launch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

import hostlist

from .errors import SlurmEnvError, UsageError, bad_value

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

    @property
    def ntasks(self) -> int:
        return sum(self.tasks_per_node)

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


def parse_tasks_per_node(spec: str, name: str = "SLURM_TASKS_PER_NODE") -> tuple:
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


def expand_nodelist(spec: str, name: str = "SLURM_JOB_NODELIST") -> tuple:
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


def parse_port_list(spec: str, name: str = "SLURM_STEP_RESV_PORTS") -> tuple:
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


def check_env(env: object, name: str = "env") -> Mapping[str, str]:
    """The environment argument of a public function: a mapping whose Slurm/tf_for_slurm values are
    strings (as in os.environ), so a wrong type is one error naming it, not a TypeError inside."""
    if not isinstance(env, Mapping):
        raise UsageError(bad_value(name, env, "a mapping of variable names to strings, like os.environ"))
    for key, value in env.items():
        if isinstance(key, str) and key.startswith(("SLURM", "TF_SLURM_")) and not isinstance(value, str):
            raise UsageError(bad_value(f"{name}[{key!r}]", value, "a string, as in os.environ"))
    return env


def _first(env: Mapping[str, str], *names: str) -> tuple:
    for n in names:
        v = env.get(n)
        if v is not None and v != "":
            return n, v
    return names[0], None


def _int(env: Mapping[str, str], *names: str, minimum: int = 0) -> Optional[int]:
    name, value = _first(env, *names)
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        raise SlurmEnvError(bad_value(name, value, f"an integer >= {minimum}")) from None
    if number < minimum:
        raise SlurmEnvError(bad_value(name, value, f"an integer >= {minimum}"))
    return number


def _mem_mb(env: Mapping[str, str], name: str) -> Optional[int]:
    value = env.get(name)
    if not value:
        return None
    m = re.fullmatch(r"\s*(\d+)\s*([MGT]?)\s*", value)
    if not m:
        raise SlurmEnvError(bad_value(name, value, "memory in MB like '4000' (or '4G')"))
    mb = int(m.group(1)) * {"": 1, "M": 1, "G": 1024, "T": 1024 * 1024}[m.group(2)]
    if mb > MAX_MEMORY_MB:
        raise SlurmEnvError(bad_value(name, value, f"memory of at most {MAX_MEMORY_MB} MB (1 EiB)"))
    return mb


def _gpu_list(value: Optional[str]) -> tuple:
    if not value or value.strip().lower() in ("", "none", "nodevfiles"):
        return ()
    return tuple(g.strip() for g in value.split(",") if g.strip())


def step_from_env(env: Mapping[str, str]) -> SlurmStep:
    """Build and validate the SlurmStep from a mapping like os.environ."""
    check_env(env)
    in_step = bool(env.get("SLURM_STEP_NODELIST") or env.get("SLURM_STEP_ID") or env.get("SLURM_STEPID"))
    job_name, job_id = _first(env, "SLURM_JOB_ID", "SLURM_JOBID")
    if job_id is None:
        raise SlurmEnvError(
            "SLURM_JOB_ID is not set: expected to run inside a Slurm job (sbatch/salloc/srun), "
            "under `tf-slurm local`, or with offline options (--nodelist ...)"
        )
    if not re.fullmatch(r"[A-Za-z0-9_.+-]+", job_id):
        raise SlurmEnvError(bad_value(job_name, job_id, "a job id like '12345'"))
    step_name, step_id = _first(env, "SLURM_STEP_ID", "SLURM_STEPID")
    nl_name, nl = _first(env, "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST")
    if nl is None:
        raise SlurmEnvError("SLURM_JOB_NODELIST is not set: expected a Slurm hostlist like 'node[1-3]'")
    nodes = expand_nodelist(nl, nl_name)
    tpn_name, tpn = _first(env, "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE")
    if tpn is None:
        raise SlurmEnvError("SLURM_TASKS_PER_NODE is not set: expected task counts like '2(x3),1'")
    counts = parse_tasks_per_node(tpn, tpn_name)
    if len(counts) != len(nodes):
        raise SlurmEnvError(
            f"{tpn_name}={tpn!r}: expected one count per node of {nl_name}={nl!r} "
            f"({len(nodes)} nodes), got {len(counts)}"
        )
    nt_name, ntasks = _first(env, "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS")
    if ntasks is not None:
        try:
            n = int(ntasks)
        except ValueError:
            raise SlurmEnvError(bad_value(nt_name, ntasks, "an integer")) from None
        if n != sum(counts):
            raise SlurmEnvError(
                f"{nt_name}={ntasks!r}: expected {sum(counts)}, the sum of {tpn_name}={tpn!r}"
            )
    resv_name, resv = _first(env, "SLURM_STEP_RESV_PORTS")
    step = SlurmStep(
        job_id=job_id,
        step_id=step_id if step_id is not None else "0",
        nodes=nodes,
        tasks_per_node=counts,
        procid=_int(env, "SLURM_PROCID"),
        localid=_int(env, "SLURM_LOCALID"),
        nodeid=_int(env, "SLURM_NODEID"),
        node_name=env.get("SLURMD_NODENAME") or None,
        resv_ports=parse_port_list(resv, resv_name) if resv else (),
        cpus_per_task=_int(env, "SLURM_CPUS_PER_TASK", minimum=1),
        mem_per_cpu_mb=_mem_mb(env, "SLURM_MEM_PER_CPU"),
        mem_per_node_mb=_mem_mb(env, "SLURM_MEM_PER_NODE"),
        gpus=_gpu_list(_first(env, "SLURM_STEP_GPUS", "SLURM_JOB_GPUS")[1]),
        source="slurm-step" if in_step else "slurm-job",
    )
    validate_me(step)
    return step


def validate_me(step: SlurmStep) -> None:
    """Check this task's ids against the layout, so a wrong slot fails loudly instead of silently."""
    if step.procid is not None and step.procid >= step.ntasks:
        raise SlurmEnvError(bad_value("SLURM_PROCID", step.procid, f"a rank below {step.ntasks}"))
    if step.nodeid is not None and step.nodeid >= len(step.nodes):
        raise SlurmEnvError(bad_value("SLURM_NODEID", step.nodeid, f"a node index below {len(step.nodes)}"))
    if step.node_name is not None:
        check_host_names([step.node_name], "SLURMD_NODENAME")
        if step.node_name not in step.nodes:
            raise SlurmEnvError(
                bad_value("SLURMD_NODENAME", step.node_name, f"one of the step's nodes {_short(step.nodes)}")
            )
        if step.nodeid is None and step.nodes.count(step.node_name) > 1:
            raise SlurmEnvError(
                bad_value("SLURM_NODEID", None, f"a node index: {step.node_name!r} appears more than once")
            )
        if step.nodeid is not None and step.nodes[step.nodeid] != step.node_name:
            raise SlurmEnvError(
                f"SLURM_NODEID={step.nodeid} names node {step.nodes[step.nodeid]!r} but "
                f"SLURMD_NODENAME={step.node_name!r}: expected them to agree"
            )
    node = step.my_node_index
    if step.localid is not None and node is not None and step.localid >= step.tasks_per_node[node]:
        raise SlurmEnvError(
            bad_value("SLURM_LOCALID", step.localid,
                      f"a local id below {step.tasks_per_node[node]}, the task count of node {step.nodes[node]!r}")
        )


def _short(items: Sequence[str]) -> str:
    items = list(items)
    return repr(items) if len(items) <= 6 else repr(items[:6])[:-1] + ", ...]"


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


def outside_step(env: Mapping[str, str], example: str = "srun tf-slurm exec -- python train.py") -> Optional[str]:
    """A one-line reason when `env` is a job's batch script (no step) of more than one task, else None.

    Why: `tf-slurm exec` run by the batch script itself (srun forgotten) would plan the job's first
    task and wait for peers that never start.  Inside any step Slurm sets the STEP variables.
    """
    job = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
    if not job or env.get("SLURM_STEP_NODELIST") or env.get("SLURM_STEP_NUM_TASKS") or env.get("SLURM_STEP_ID"):
        return None
    ntasks = env.get("SLURM_NTASKS") or env.get("SLURM_NPROCS") or "1"
    if not ntasks.isdigit() or int(ntasks) <= 1:
        return None
    return (f"SLURM_NTASKS={ntasks} but no job step (SLURM_STEP_ID unset): this is the batch script of "
            f"job {job}, not one of its {ntasks} tasks; launch them with srun, e.g. `{example}`")
