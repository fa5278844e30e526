"""What `tf-slurm submit` can tell before submitting, from plain values.  Pure: text and numbers in,
one line (or None) out; host/submit_checks.py asks Slurm and the file system and calls these.

- `python_target`: what a Python command line runs (a file, code, a module), for "the script does not
  exist" and for reading the script's text;
- `closest_name`: the file a misspelt name most likely meant;
- `never_starts`: a job that asks a partition for more nodes, CPUs or GPUs than it has (Slurm would
  keep it pending forever, "PartitionNodeLimit" and the like), the message naming the partition's size;
- `plan_misfit`: a plan the script's own text says it cannot run (the same cases exec's shim stops at
  run time, _shim/tf_slurm_plan_hints.py, told before the job waits in the queue).
"""

from __future__ import annotations

import difflib
import os
import re
from typing import Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from tf_for_slurm.plan.keras import script_strategy
from tf_for_slurm.plan.memory import parse_scontrol_records

_UNLIMITED = ("UNLIMITED", "INFINITE", "N/A", "(NULL)", "NONE", "")
_GPU = re.compile(r"gpu(?::([^:,()]+))?:(\d+)")
_FIX = "ask for less, or another partition (-p)"


def is_python(word: str) -> bool:
    """Whether a command's program is a Python interpreter (python, python3.11, .venv/bin/python, ...)."""
    return "python" in os.path.basename(word).lower()


def python_target(args: Sequence[str]) -> Tuple[str, Optional[str]]:
    """What `python ARGS` runs: ('file', PATH), ('code', TEXT), ('module', NAME), or ('none', None)
    (standard input, or only options).  Options are skipped as CPython reads them: -W and -X take a
    value (joined or the next word), -c and -m end the options, '--' ends them before the file."""
    words = iter(args)
    for word in words:
        if word == "-":
            return "none", None
        if word == "--":
            after = next(words, None)
            return ("file", after) if after is not None else ("none", None)
        if word.startswith("--"):
            if word == "--check-hash-based-pycs":
                next(words, None)
            continue
        if word.startswith("-"):
            for i, letter in enumerate(word[1:], 2):
                if letter in "cm":
                    value = word[i:] or next(words, None)
                    return ("code" if letter == "c" else "module"), value
                if letter in "WX":
                    if not word[i:]:
                        next(words, None)
                    break
            continue
        return "file", word
    return "none", None


def closest_name(name: str, names: Sequence[str]) -> Optional[str]:
    """The name in `names` a misspelt `name` most likely meant (difflib, ratio >= 0.6), or None."""
    found = difflib.get_close_matches(name, sorted(names), n=1, cutoff=0.6)
    return found[0] if found else None


class Ask(NamedTuple):
    """What one job (or one component of a heterogeneous job) asks of its partition."""

    nodes: Optional[int]  # nodes it needs (None: Slurm decides, at least 1)
    ntasks: int
    cpus_per_task: int = 1
    gpus_per_node: Optional[str] = None  # [TYPE:]N, as --gpus-per-node
    overcommit: bool = False  # sbatch -O/--overcommit: more tasks than CPUs are allowed
    label: str = ""  # '' or 'component 1: ', the message's first words


def option_value(words: Sequence[str], long: str, short: str = "") -> Optional[str]:
    """The value sbatch would take from one-word options (`--long=V`, or `-sV` for a short `short`):
    the last one given, None when none is."""
    found = None
    for word in words:
        if word.startswith(long + "="):
            found = word[len(long) + 1:]
        elif short and word.startswith(short) and len(word) > len(short):
            found = word[len(short):].lstrip("=")
    return found


def ask_of(words: Sequence[str], tasks_per_node: Sequence[int], label: str = "") -> Tuple[Optional[str], Ask]:
    """(the partitions asked for or None, what is asked of them) from one component's sbatch words
    (`--nodes=3`, `--partition=a,b`, --sbatch-arg's words...) and its tasks per node as submit lays them out."""
    fixed = option_value(words, "--nodes", "-N") or option_value(words, "--ntasks-per-node")
    cpus = option_value(words, "--cpus-per-task", "-c") or ""
    return option_value(words, "--partition", "-p"), Ask(
        nodes=len(tasks_per_node) if fixed else None, ntasks=sum(tasks_per_node),
        cpus_per_task=int(cpus) if cpus.isdigit() and int(cpus) > 0 else 1,
        gpus_per_node=option_value(words, "--gpus-per-node"),
        overcommit=any(w in ("-O", "--overcommit") for w in words), label=label)


def _number(value: Optional[str]) -> Optional[int]:
    """A count of scontrol's ('4', '4+'), None for UNLIMITED, absent or anything else."""
    text = (value or "").strip().rstrip("+")
    return int(text) if text.isdigit() else None


def partition_records(text: str, names: Optional[str]) -> List[Dict[str, str]]:
    """The partitions a job asks for, from `scontrol show partition` text: those named in `names`
    ('a,b', as -p takes them), else the default one (Default=YES; the only one when there is one)."""
    parts = [r for r in parse_scontrol_records(text, "scontrol show partition") if "PartitionName" in r]
    if names:
        wanted = names.split(",")
        return [r for r in parts if r["PartitionName"] in wanted]
    defaults = [r for r in parts if r.get("Default", "").upper() == "YES"]
    return defaults or (parts if len(parts) == 1 else [])


def node_records(text: str, partition: str) -> List[Dict[str, str]]:
    """The nodes of `partition` (their Partitions= lists it), from `scontrol show node` text."""
    nodes = [r for r in parse_scontrol_records(text, "scontrol show node") if "NodeName" in r]
    return [r for r in nodes if partition in r.get("Partitions", "").split(",")]


def node_gpus(gres: str, gpu_type: Optional[str]) -> int:
    """A node's GPUs (of `gpu_type`, or any) from its Gres= ('gpu:a100:4(S:0-1),gpu:2', '(null)')."""
    return sum(int(n) for t, n in _GPU.findall(gres or "") if gpu_type is None or t == gpu_type)


def never_starts(partition: Mapping[str, str], nodes: Sequence[Mapping[str, str]], ask: Ask) -> Optional[str]:
    """One line when `ask` can never start in `partition` (its nodes: `nodes`, possibly none known),
    naming the option, the partition and its size; None when it may start (or cannot be told)."""
    name = partition.get("PartitionName", "?")
    total_nodes, max_nodes = _number(partition.get("TotalNodes")), _number(partition.get("MaxNodes"))
    if ask.nodes is not None and total_nodes is not None and ask.nodes > total_nodes:
        return (f"{ask.label}-N/--nodes={ask.nodes}: expected at most {total_nodes}: partition {name!r} has "
                f"{total_nodes} node(s), so the job would pend forever; {_FIX}")
    if ask.nodes is not None and max_nodes is not None and ask.nodes > max_nodes:
        return (f"{ask.label}-N/--nodes={ask.nodes}: expected at most {max_nodes}: partition {name!r} allows "
                f"{max_nodes} node(s) per job (MaxNodes), so the job would pend forever; {_FIX}")
    if ask.overcommit:
        return _gpus_never_fit(name, nodes, ask)
    cpus, total_cpus = ask.ntasks * ask.cpus_per_task, _number(partition.get("TotalCPUs"))
    if total_cpus is not None and cpus > total_cpus:
        return (f"{ask.label}-n/--ntasks={ask.ntasks} x -c/--cpus-per-task={ask.cpus_per_task}: expected at most "
                f"{total_cpus} CPUs: partition {name!r} has {total_cpus} CPUs on {total_nodes or '?'} node(s), so "
                f"the job would pend forever; {_FIX}")
    return _node_never_fits(name, partition, nodes, ask) or _gpus_never_fit(name, nodes, ask)


def _tasks_on_one_node(ask: Ask) -> Optional[int]:
    """The tasks some node must hold at least: an even share over the nodes asked for (None: Slurm
    may spread them over as many nodes as it likes)."""
    return -(-ask.ntasks // ask.nodes) if ask.nodes else None


def _node_never_fits(name: str, partition: Mapping[str, str], nodes: Sequence[Mapping[str, str]],
                     ask: Ask) -> Optional[str]:
    """A node's share of the tasks needs more CPUs than any node of the partition has."""
    tasks = _tasks_on_one_node(ask)
    sizes = [n for n in (_number(r.get("CPUEfctv") or r.get("CPUTot")) for r in nodes) if n is not None]
    if tasks is None or not sizes:
        return None
    largest = max(sizes)
    cap = _number(partition.get("MaxCPUsPerNode"))
    limit = min(largest, cap) if cap is not None else largest
    if tasks * ask.cpus_per_task <= limit:
        return None
    return (f"{ask.label}{tasks} task(s) on one node x -c/--cpus-per-task={ask.cpus_per_task}: expected at most "
            f"{limit} CPUs per node: partition {name!r}'s largest node has {largest} CPUs"
            + (f" (MaxCPUsPerNode={cap})" if cap is not None else "") + f", so the job would pend forever; {_FIX}")


def _gpus_never_fit(name: str, nodes: Sequence[Mapping[str, str]], ask: Ask) -> Optional[str]:
    """--gpus-per-node asks for more GPUs (of its type) than any node of the partition has."""
    if not ask.gpus_per_node or not nodes:
        return None
    gpu_type, _, count = ask.gpus_per_node.rpartition(":")
    most = max(node_gpus(r.get("Gres", ""), gpu_type or None) for r in nodes)
    if not count.isdigit() or int(count) <= most:
        return None
    kind = f"{gpu_type} GPUs" if gpu_type else "GPUs"
    return (f"{ask.label}--gpus-per-node={ask.gpus_per_node}: expected at most {most}: no node of partition "
            f"{name!r} has more than {most} {kind}, so the job would pend forever; {_FIX}")


def plan_misfit(text: str, roles: Sequence[str], script: str) -> Optional[str]:
    """The one line when the script's text names what the plan's roles cannot run: a
    MultiWorkerMirroredStrategy with ps tasks, a ParameterServerStrategy without a chief task (its
    coordinator), a TF1 replica_device_setter without ps; else None (a script that names no
    strategy, or names both, is left to the run)."""
    strategy = script_strategy(text)
    both = "MultiWorkerMirroredStrategy" in text and "ParameterServerStrategy" in text
    num_ps = sum(1 for r in roles if r == "ps")
    if strategy == "mwms" and not both and num_ps:
        return (f"{script} uses MultiWorkerMirroredStrategy, which cannot run with ps tasks (the plan has "
                f"{num_ps} ps{', the default' if num_ps == 1 else ''}); fix: --ps 0")
    if strategy == "pss" and not both and num_ps and "chief" not in roles:
        return (f"{script} uses ParameterServerStrategy, whose coordinator is the chief task, and the plan has no "
                "chief; fix: --chief (or --tasks chief,ps,worker,...)")
    if strategy is None and "replica_device_setter" in text and not num_ps:
        return (f"{script} places variables with replica_device_setter, which needs ps tasks, and the plan has "
                "none; fix: --ps N (N >= 1)")
    return None
