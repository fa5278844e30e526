"""Per-task memory (MB) from the Slurm allocation, for `srun --mem-per-cpu` in sbatch templates.

Why this exists: TensorFlow needs a lot of RAM per process, and the seed's batch script computed
"memory per task" from the partition by hand. Getting it wrong either kills tasks (too little) or
makes `srun` ask for more than the node has (the step pends or fails). The answer is always
handed to `srun --mem-per-cpu` (per CPU), never to `--mem`, which Slurm reads as per NODE.

Sources, in order:
1. the allocation: ``SLURM_MEM_PER_CPU`` (per CPU) or ``SLURM_MEM_PER_NODE`` (÷ tasks on the node);
2. the partition's ``DefMemPerCPU`` / ``DefMemPerNode`` from ``scontrol show partition`` text;
3. the nodes' ``RealMemory`` (minus ``MemSpecLimit``) ÷ CPUs from ``scontrol show node`` text.

Everything here is pure: text and numbers in, integers out (`tf_for_slurm.host.allocation` reads
the variables and the files, `tf_for_slurm.cli.mem` is the command). `scontrol` output is parsed as
``Key=Value`` tokens (never evaluated). Numbers may carry a ``+`` ("at least", as `sinfo` prints for
mixed partitions) and memory may carry a K/M/G/T suffix; results are whole MB, rounded down.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional

from tf_for_slurm.errors import SlurmEnvError, UsageError, bad_value
from tf_for_slurm.plan.numbers import parse_int
from tf_for_slurm.plan.step import MAX_MEMORY_MB, parse_tasks_per_node

log = logging.getLogger(__name__)

__all__ = [
    "MemoryAnswer", "busiest_node", "memory_from", "parse_count", "parse_memory_mb", "parse_scontrol_records",
    "positive_int",
]

_UNITS = {"": 1, "M": 1, "K": 1.0 / 1024, "G": 1024, "T": 1024 * 1024}
_MEM_RE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)B?\s*(\+?)\s*", re.IGNORECASE)
# A key starts a token: at the start of the text or after whitespace. Values run to the next key,
# so values with spaces (OS=Linux 6.1 #1 SMP ...) and with '=' inside (CfgTRES=cpu=4,mem=2G) survive.
_KEY_RE = re.compile(r"(?:(?<=\s)|^)([A-Za-z][A-Za-z0-9_:/.-]*)=")
_RECORD_KEYS = ("PartitionName", "NodeName")


@dataclass(frozen=True)
class MemoryAnswer:
    """Memory for one task: `per_cpu` goes to `srun --mem-per-cpu`; `source` says where it came from."""

    per_cpu: int  # MB per CPU
    per_task: int  # MB per task (per_cpu x cpus_per_task)
    cpus_per_task: int
    source: str


# -- small parsers ---------------------------------------------------------------------------
def parse_memory_mb(value: str, name: str) -> Optional[int]:
    """'4096', '4G', '2048+', '1.5G' -> MB (int, rounded down); 'UNLIMITED'/'0'-like absent -> None.

    Returns None for UNLIMITED, (null) and N/A, which mean "no limit given".
    """
    if not isinstance(value, str):
        raise UsageError(bad_value(name, value, "memory in MB like '4096' or '4G'"))
    text = value.strip()
    if text.upper() in ("UNLIMITED", "(NULL)", "N/A", "NONE"):
        return None
    m = _MEM_RE.fullmatch(text)
    if not m:
        raise UsageError(bad_value(name, value, "memory in MB like '4096', '4G' or 'UNLIMITED'"))
    mb = int(float(m.group(1)) * _UNITS[m.group(2).upper()])
    if mb > MAX_MEMORY_MB:
        raise UsageError(bad_value(name, value, f"memory of at most {MAX_MEMORY_MB} MB (1 EiB)"))
    return mb


def parse_count(value: str, name: str, minimum: int = 1) -> int:
    """'4' or '4+' (sinfo's "at least 4" on mixed partitions) -> 4; below `minimum` is an error."""
    return parse_int(value, name, minimum, plus_ok=True)


def parse_scontrol_records(text: str, name: str = "scontrol output") -> List[Dict[str, str]]:
    """`scontrol show partition|node` text (multi-line or `-o` one-line) -> one dict per record.

    A record starts at each PartitionName= or NodeName= key. Parsed as tokens, never evaluated.
    """
    if not isinstance(text, str):
        raise UsageError(bad_value(name, text, "the text of `scontrol show partition` or `scontrol show node`"))
    matches = list(_KEY_RE.finditer(text))
    records: List[Dict[str, str]] = []
    for i, m in enumerate(matches):
        key = m.group(1)
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        value = text[m.end():end].strip()
        if key in _RECORD_KEYS:
            records.append({})
        if not records:
            continue  # text before the first record (e.g. a banner): ignored
        records[-1][key] = value
    return records


# -- the choice of partition / node ----------------------------------------------------------
def _pick_partition(records: List[Dict[str, str]], partition: Optional[str], name: str,
                    partition_from: str) -> Dict[str, str]:
    parts = [r for r in records if "PartitionName" in r]
    if not parts:
        raise UsageError(bad_value(name, _head(records), "`scontrol show partition` text with PartitionName="))
    if partition:
        for r in parts:
            if r["PartitionName"] == partition:
                return r
        raise UsageError(bad_value("partition", partition,
                                   "one of " + ", ".join(r["PartitionName"] for r in parts) + f" (from {name})"))
    if len(parts) == 1:
        return parts[0]
    defaults = [r for r in parts if r.get("Default", "").upper() == "YES"]
    if len(defaults) == 1:
        return defaults[0]
    raise UsageError(bad_value("partition", None, f"a partition name ({partition_from}): "
                               f"{name} holds {len(parts)} partitions and no single default"))


def _head(records: List[Dict[str, str]]) -> str:
    return "(no records)" if not records else ",".join(list(records[0])[:3])


def _node_mem_per_cpu(records: List[Dict[str, str]], node: Optional[str], name: str) -> tuple:
    """(MB per CPU, which node) from `scontrol show node`: this node if listed, else the poorest node."""
    nodes = [r for r in records if "NodeName" in r]
    if not nodes:
        raise UsageError(bad_value(name, _head(records), "`scontrol show node` text with NodeName= "
                                   "or `sinfo -N -o '%N %c %m'` lines"))
    if node:
        mine = [r for r in nodes if r["NodeName"] == node]
        if mine:
            nodes = mine
    best: Optional[tuple] = None
    for r in nodes:
        nn = r["NodeName"]
        cpus_key = "CPUTot" if "CPUTot" in r else "CPUs"
        if cpus_key not in r:
            raise UsageError(bad_value(f"{name}: NodeName={nn} CPUTot", None, "a CPU count"))
        cpus = parse_count(r[cpus_key], f"{name}: NodeName={nn} {cpus_key}")
        if "RealMemory" not in r:
            raise UsageError(bad_value(f"{name}: NodeName={nn} RealMemory", None, "memory in MB"))
        real = parse_memory_mb(r["RealMemory"], f"{name}: NodeName={nn} RealMemory")
        if real is None or real < 1:
            raise UsageError(bad_value(f"{name}: NodeName={nn} RealMemory", r["RealMemory"], "memory in MB >= 1"))
        spec = parse_memory_mb(r.get("MemSpecLimit", "0"), f"{name}: NodeName={nn} MemSpecLimit") or 0
        usable = real - spec if 0 < spec < real else real
        per_cpu = usable // cpus
        # One --mem-per-cpu applies to every node of the step: the poorest node decides.
        if best is None or per_cpu < best[0]:
            best = (per_cpu, nn)
    assert best is not None
    return best


# -- the arithmetic --------------------------------------------------------------------------
def positive_int(value: object, name: str) -> int:
    """An argument that must be an integer >= 1 (bool refused), else one UsageError naming it."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise UsageError(bad_value(name, value, "an integer >= 1"))
    return value


def busiest_node(spec: str, name: str) -> int:
    """The most tasks on one node of a Slurm task count like '4,1(x2)' (one --mem-per-cpu fits all)."""
    try:
        return max(parse_tasks_per_node(spec, name))
    except SlurmEnvError as exc:
        raise UsageError(str(exc)) from None


@dataclass(frozen=True)
class _Sizes:
    """The task's CPUs and the tasks on its node: what turns a memory figure into an answer."""

    cpus_per_task: int
    tasks_on_node: int

    def answer(self, per_cpu: int, source: str) -> MemoryAnswer:
        if per_cpu < 1:
            raise UsageError(bad_value("memory per CPU", per_cpu, f"at least 1 MB (from {source})"))
        return MemoryAnswer(per_cpu, per_cpu * self.cpus_per_task, self.cpus_per_task, source)

    def from_node_total(self, total: int, source: str) -> MemoryAnswer:
        """A node's memory shared by the tasks on it (the busiest node's count: one --mem-per-cpu fits all)."""
        per_task = total // self.tasks_on_node
        if per_task < self.cpus_per_task:
            raise UsageError(bad_value("memory per task", per_task,
                                       f"at least 1 MB per CPU ({source} ÷ {self.tasks_on_node} tasks on the node)"))
        return self.answer(per_task // self.cpus_per_task, f"{source} ÷ {self.tasks_on_node} tasks")


def memory_from(
    *,
    cpus_per_task: int,
    tasks_on_node: int,
    mem_per_cpu: Optional[str] = None,
    mem_per_node: Optional[str] = None,
    partition_info: Optional[str] = None,
    node_info: Optional[str] = None,
    partition: Optional[str] = None,
    node_name: Optional[str] = None,
    names: Optional[Mapping[str, str]] = None,
) -> MemoryAnswer:
    """Memory per CPU and per task (MB) from the allocation, else the partition, else the nodes.

    Plain values in: the allocation's memory as Slurm wrote it (`mem_per_cpu`, `mem_per_node`), the
    partition to use, this node's name.  `names` says where they came from, for the messages
    ({'mem_per_cpu': ..., 'mem_per_node': ..., 'partition': ...}; the host passes its variables).
    """
    names = names or {}
    per_cpu_name = names.get("mem_per_cpu", "mem_per_cpu")
    per_node_name = names.get("mem_per_node", "mem_per_node")
    sizes = _Sizes(positive_int(cpus_per_task, "cpus_per_task"), positive_int(tasks_on_node, "tasks_on_node"))
    found = _from_allocation(sizes, mem_per_cpu, mem_per_node, per_cpu_name, per_node_name)
    # empty text (e.g. `scontrol show partition` failed in a template) counts as "not given"
    if found is None and partition_info and partition_info.strip():
        found = _from_partition(sizes, partition_info, partition, names.get("partition", "partition"))
    if found is None and node_info and node_info.strip():
        found = _from_nodes(sizes, node_info, node_name)
    if found is None:
        raise UsageError(bad_value(
            "memory information", None,
            f"{per_cpu_name} or {per_node_name} in the environment, or a partition default "
            "(--partition-info) or node sizes (--node-info) from scontrol"))
    return found


def _from_allocation(sizes: _Sizes, mem_per_cpu: Optional[str], mem_per_node: Optional[str],
                     per_cpu_name: str, per_node_name: str) -> Optional[MemoryAnswer]:
    """1. the allocation (None: it gives no figure, or the whole node: look further)."""
    if mem_per_cpu:
        mb = parse_memory_mb(mem_per_cpu, per_cpu_name)
        if mb is None or mb < 1:
            raise UsageError(bad_value(per_cpu_name, mem_per_cpu, "memory in MB >= 1"))
        return sizes.answer(mb, per_cpu_name)
    if mem_per_node:
        mb = parse_memory_mb(mem_per_node, per_node_name)
        if mb is None:
            raise UsageError(bad_value(per_node_name, mem_per_node, "memory in MB"))
        if mb > 0:
            return sizes.from_node_total(mb, per_node_name)
        log.info("%s=0 (the whole node): using the partition/node information", per_node_name)
    return None


def _from_partition(sizes: _Sizes, partition_info: str, partition: Optional[str],
                    partition_from: str) -> Optional[MemoryAnswer]:
    """2. the partition's defaults (None: UNLIMITED, look at the nodes)."""
    records = parse_scontrol_records(partition_info, "partition info")
    part = _pick_partition(records, partition, "partition info", partition_from)
    pname = part["PartitionName"]
    if "DefMemPerCPU" in part:
        mb = parse_memory_mb(part["DefMemPerCPU"], f"partition {pname} DefMemPerCPU")
        if mb:
            return sizes.answer(mb, f"partition {pname} DefMemPerCPU")
    if "DefMemPerNode" in part:
        mb = parse_memory_mb(part["DefMemPerNode"], f"partition {pname} DefMemPerNode")
        if mb:
            return sizes.from_node_total(mb, f"partition {pname} DefMemPerNode")
    log.info("partition %s has no memory default (UNLIMITED): using the node information", pname)
    return None


def _from_nodes(sizes: _Sizes, node_info: str, node_name: Optional[str]) -> MemoryAnswer:
    """3. the nodes themselves: `scontrol show node` records, else sinfo lines."""
    records = parse_scontrol_records(node_info, "node info")
    if not records:
        records = _sinfo_records(node_info, "node info")
    per_cpu, node = _node_mem_per_cpu(records, node_name, "node info")
    return sizes.answer(per_cpu, f"node {node} RealMemory ÷ CPUs")


def _sinfo_records(text: str, name: str) -> List[Dict[str, str]]:
    """`sinfo -N -h -o '%N %c %m'` (or `-o '%c %m'`) lines -> node-like records.

    A '+' (sinfo's "this or more" on mixed partitions) is read as its lower bound; with per-partition
    lines that is only an estimate, so prefer per-node (`-N`) lines or `scontrol show node`.
    """
    records: List[Dict[str, str]] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        words = line.split()
        if not words or words[-1].upper() in ("MEMORY", "MEM"):
            continue  # blank or header
        if len(words) < 2:
            raise UsageError(bad_value(f"{name} line {lineno}", line, "'[NODE] CPUS MEMORY' as sinfo prints it"))
        node = words[0] if len(words) >= 3 else f"line{lineno}"
        if "+" in words[-1] or "+" in words[-2]:
            log.warning("%s line %d %r: '+' means mixed node sizes; using the lower bounds", name, lineno, line)
        records.append({"NodeName": node, "CPUs": words[-2], "RealMemory": words[-1]})
    return records
