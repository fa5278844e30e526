"""Per-task memory (MB) from the Slurm allocation, for `srun --mem-per-cpu` in sbatch templates.

Why this exists: TensorFlow needs a lot of RAM per process, and the seed's batch script computed
"memory per task" from the partition by hand. Getting it wrong either kills tasks (too little) or
makes `srun` ask for more than the node has (the step pends or fails). The answer is always
handed to `srun --mem-per-cpu` (per CPU), never to `--mem`, which Slurm reads as per NODE.

Sources, in order:
1. the allocation: ``SLURM_MEM_PER_CPU`` (per CPU) or ``SLURM_MEM_PER_NODE`` (÷ tasks on the node);
2. the partition's ``DefMemPerCPU`` / ``DefMemPerNode`` from ``scontrol show partition`` text;
3. the nodes' ``RealMemory`` (minus ``MemSpecLimit``) ÷ CPUs from ``scontrol show node`` text.

Everything here is pure: text and mappings in, integers out. `scontrol` output is parsed as
``Key=Value`` tokens (never evaluated). Numbers may carry a ``+`` ("at least", as `sinfo` prints for
mixed partitions) and memory may carry a K/M/G/T suffix; results are whole MB, rounded down.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence

from tf_for_slurm.errors import SlurmEnvError, UsageError, bad_value
from tf_for_slurm.plan.step import MAX_MEMORY_MB

log = logging.getLogger(__name__)

__all__ = [
    "MemoryAnswer", "add_arguments", "main", "memory_per_task", "parse_memory_mb", "parse_count",
    "parse_scontrol_records",
]

_UNITS = {"": 1, "M": 1, "K": 1.0 / 1024, "G": 1024, "T": 1024 * 1024}
_MEM_RE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)B?\s*(\+?)\s*", re.IGNORECASE)
_COUNT_RE = re.compile(r"\s*(\d+)\s*(\+?)\s*")
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
    m = _COUNT_RE.fullmatch(value) if isinstance(value, str) else None
    if not m or int(m.group(1)) < minimum:
        raise UsageError(bad_value(name, value, f"an integer >= {minimum} (a trailing '+' is allowed)"))
    return int(m.group(1))


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


def _tasks_per_node(spec: str, name: str) -> List[int]:
    from tf_for_slurm.plan.step import parse_tasks_per_node

    try:
        return list(parse_tasks_per_node(spec, name))
    except SlurmEnvError as exc:
        raise UsageError(str(exc)) from None


# -- the choice of partition / node ----------------------------------------------------------
def _pick_partition(records: List[Dict[str, str]], partition: Optional[str], name: str) -> Dict[str, str]:
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
    raise UsageError(bad_value("partition", None, "a partition name (SLURM_JOB_PARTITION or --partition): "
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
def memory_per_task(
    env: Optional[Mapping[str, str]] = None,
    *,
    cpus_per_task: Optional[int] = None,
    tasks_on_node: Optional[int] = None,
    partition_info: Optional[str] = None,
    node_info: Optional[str] = None,
    partition: Optional[str] = None,
) -> MemoryAnswer:
    """Memory per CPU and per task (MB) from the allocation, else the partition, else the nodes.

    `env` defaults to os.environ. `tasks_on_node` defaults to SLURM_NTASKS_PER_NODE, else the
    busiest node of SLURM_STEP_TASKS_PER_NODE/SLURM_TASKS_PER_NODE (one --mem-per-cpu must fit
    every node), else 1. `cpus_per_task` defaults to SLURM_CPUS_PER_TASK, else 1.
    """
    env = os.environ if env is None else env
    # empty text (e.g. `scontrol show partition` failed in a template) counts as "not given"
    partition_info = partition_info if partition_info and partition_info.strip() else None
    node_info = node_info if node_info and node_info.strip() else None

    if cpus_per_task is None:
        raw = env.get("SLURM_CPUS_PER_TASK")
        cpus_per_task = parse_count(raw, "SLURM_CPUS_PER_TASK") if raw else 1
    elif not isinstance(cpus_per_task, int) or isinstance(cpus_per_task, bool) or cpus_per_task < 1:
        raise UsageError(bad_value("cpus_per_task", cpus_per_task, "an integer >= 1"))

    if tasks_on_node is None:
        tasks_on_node = _tasks_on_node_from_env(env)
    elif not isinstance(tasks_on_node, int) or isinstance(tasks_on_node, bool) or tasks_on_node < 1:
        raise UsageError(bad_value("tasks_on_node", tasks_on_node, "an integer >= 1"))

    def answer(per_cpu: int, source: str) -> MemoryAnswer:
        if per_cpu < 1:
            raise UsageError(bad_value("memory per CPU", per_cpu, f"at least 1 MB (from {source})"))
        return MemoryAnswer(per_cpu, per_cpu * cpus_per_task, cpus_per_task, source)

    def from_node_total(total: int, source: str) -> MemoryAnswer:
        per_task = total // tasks_on_node
        if per_task < cpus_per_task:
            raise UsageError(bad_value("memory per task", per_task,
                                       f"at least 1 MB per CPU ({source} ÷ {tasks_on_node} tasks on the node)"))
        return answer(per_task // cpus_per_task, f"{source} ÷ {tasks_on_node} tasks")

    # 1. the allocation
    raw = env.get("SLURM_MEM_PER_CPU")
    if raw:
        mb = parse_memory_mb(raw, "SLURM_MEM_PER_CPU")
        if mb is None or mb < 1:
            raise UsageError(bad_value("SLURM_MEM_PER_CPU", raw, "memory in MB >= 1"))
        return answer(mb, "SLURM_MEM_PER_CPU")
    raw = env.get("SLURM_MEM_PER_NODE")
    if raw:
        mb = parse_memory_mb(raw, "SLURM_MEM_PER_NODE")
        if mb is None:
            raise UsageError(bad_value("SLURM_MEM_PER_NODE", raw, "memory in MB"))
        if mb > 0:
            return from_node_total(mb, "SLURM_MEM_PER_NODE")
        log.info("SLURM_MEM_PER_NODE=0 (the whole node): using the partition/node information")

    # 2. the partition's defaults
    if partition_info is not None:
        records = parse_scontrol_records(partition_info, "partition info")
        part = _pick_partition(records, partition or env.get("SLURM_JOB_PARTITION"), "partition info")
        pname = part["PartitionName"]
        if "DefMemPerCPU" in part:
            mb = parse_memory_mb(part["DefMemPerCPU"], f"partition {pname} DefMemPerCPU")
            if mb:
                return answer(mb, f"partition {pname} DefMemPerCPU")
        if "DefMemPerNode" in part:
            mb = parse_memory_mb(part["DefMemPerNode"], f"partition {pname} DefMemPerNode")
            if mb:
                return from_node_total(mb, f"partition {pname} DefMemPerNode")
        log.info("partition %s has no memory default (UNLIMITED): using the node information", pname)

    # 3. the nodes themselves
    if node_info is not None:
        records = parse_scontrol_records(node_info, "node info")
        if not records:
            records = _sinfo_records(node_info, "node info")
        per_cpu, node = _node_mem_per_cpu(records, env.get("SLURMD_NODENAME"), "node info")
        return answer(per_cpu, f"node {node} RealMemory ÷ CPUs")

    raise UsageError(bad_value(
        "memory information", None,
        "SLURM_MEM_PER_CPU or SLURM_MEM_PER_NODE in the environment, or a partition default "
        "(--partition-info) or node sizes (--node-info) from scontrol"))


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


def _tasks_on_node_from_env(env: Mapping[str, str]) -> int:
    raw = env.get("SLURM_NTASKS_PER_NODE")
    if raw:
        return parse_count(raw, "SLURM_NTASKS_PER_NODE")
    for name in ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"):
        raw = env.get(name)
        if raw:
            return max(_tasks_per_node(raw, name))
    return 1


# -- `tf-slurm mem` --------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `tf-slurm mem`; SLURM_* from the environment fill what is not given."""
    parser.add_argument("--cpus-per-task", type=int, help="CPUs per task (default SLURM_CPUS_PER_TASK, else 1)")
    parser.add_argument("--tasks-on-node", type=int,
                        help="tasks sharing one node's memory (default: the busiest node of SLURM_TASKS_PER_NODE)")
    parser.add_argument("--partition", help="partition to read from --partition-info (default SLURM_JOB_PARTITION)")
    parser.add_argument("--partition-info", metavar="FILE|-",
                        help="`scontrol show partition` output (file, or - for stdin)")
    parser.add_argument("--node-info", metavar="FILE|-", help="`scontrol show node` output (file, or - for stdin)")
    parser.add_argument("--per", choices=["cpu", "task"], default="task",
                        help="print MB per task (default) or per CPU (for srun --mem-per-cpu, as the templates do)")
    parser.add_argument("--explain", action="store_true", help="also say where the number came from (stderr)")


def _read_source(value: Optional[str], option: str, stdin_used: List[str]) -> Optional[str]:
    if value is None:
        return None
    if value == "-":
        if stdin_used:
            raise UsageError(bad_value(option, value, f"a file: stdin is already read by {stdin_used[0]}"))
        stdin_used.append(option)
        return sys.stdin.read()
    try:
        with open(value, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError as exc:
        raise UsageError(bad_value(option, value, f"a readable file ({exc.strerror})")) from None


def main(args: argparse.Namespace) -> int:
    """Print the memory (MB, an integer) on stdout: per task by default, per CPU with --per cpu."""
    stdin_used: List[str] = []
    if args.cpus_per_task is not None and args.cpus_per_task < 1:
        raise UsageError(bad_value("--cpus-per-task", args.cpus_per_task, "an integer >= 1"))
    if args.tasks_on_node is not None and args.tasks_on_node < 1:
        raise UsageError(bad_value("--tasks-on-node", args.tasks_on_node, "an integer >= 1"))
    ans = memory_per_task(
        cpus_per_task=args.cpus_per_task,
        tasks_on_node=args.tasks_on_node,
        partition_info=_read_source(args.partition_info, "--partition-info", stdin_used),
        node_info=_read_source(args.node_info, "--node-info", stdin_used),
        partition=args.partition,
    )
    if getattr(args, "explain", False):
        sys.stderr.write(f"{ans.per_cpu} MB per CPU x {ans.cpus_per_task} CPUs = {ans.per_task} MB per task "
                         f"(from {ans.source})\n")
    print(ans.per_cpu if args.per == "cpu" else ans.per_task)
    return 0


def _standalone(argv: Optional[Sequence[str]] = None) -> int:
    """`python -m tf_for_slurm.memory ...`: the same as `tf-slurm mem ...`."""
    from tf_for_slurm.errors import TfSlurmError

    parser = argparse.ArgumentParser(prog="tf-slurm mem", description=__doc__.splitlines()[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="tf-slurm mem: %(levelname)s: %(message)s")
    try:
        return main(args)
    except TfSlurmError as exc:
        sys.stderr.write(f"tf-slurm mem: error: {exc}\n")
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(_standalone())
