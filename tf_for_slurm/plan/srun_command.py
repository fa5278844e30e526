"""srun's own options in a step command (`srun [OPTIONS] PROGRAM ...`): where they end, and the
node options batch-step adds to them.  Pure: a list of words in, a list out.

Why: batch-step runs the command the batch script wrote and changes it in two cases only: a first
step that leaves spare nodes free (`-N`), and a relaunch after a lost node (`--overlap --mem=0 -N
--nodelist --exclude`, and `--ntasks` when it goes on with fewer workers: plan.relaunch).  Its
options go last among srun's (srun takes the last of a repeated option), before the program, whose
arguments are never touched; the script's memory options go, since srun refuses `--mem` with
`--mem-per-cpu`.
"""

from __future__ import annotations

import os
from typing import List, Optional, Sequence

# srun options that take their value as the next word (`-n 4`, `--ntasks 4`); `--opt=value` and `-n4`
# need no table
_SHORT_WITH_VALUE = set("AbcCdDeGiJLmMnNopqrStTwWx")
_LONG_WITH_VALUE = {
    "account", "begin", "chdir", "clusters", "comment", "constraint", "core-spec", "cpu-bind", "cpus-per-gpu",
    "cpus-per-task", "dependency", "distribution", "error", "exclude", "export", "gpus", "gpus-per-node",
    "gpus-per-task", "gres", "input", "job-name", "licenses", "mem", "mem-per-cpu", "mem-per-gpu", "mpi",
    "nodefile", "nodelist", "nodes", "ntasks", "ntasks-per-core", "ntasks-per-gpu", "ntasks-per-node",
    "ntasks-per-socket", "output", "partition", "qos", "relative", "reservation", "signal", "threads",
    "time", "wait", "wckey",
}
_MEMORY = {"--mem", "--mem-per-cpu", "--mem-per-gpu"}


def is_srun(command: Sequence[str]) -> bool:
    """Whether the step command runs srun (batch-step adds options to srun only)."""
    return bool(command) and os.path.basename(command[0]) == "srun"


def options_end(command: Sequence[str]) -> int:
    """The index of the program srun runs (len(command) when there is none)."""
    i = 1
    while i < len(command):
        word = command[i]
        if word == "--":
            return i + 1
        if not word.startswith("-") or word == "-":
            return i
        if word.startswith("--"):
            name = word[2:]
            i += 2 if ("=" not in name and name in _LONG_WITH_VALUE) else 1
        else:
            i += 2 if (len(word) == 2 and word[1] in _SHORT_WITH_VALUE) else 1
    return i


def _without_memory(options: Sequence[str]) -> List[str]:
    out: List[str] = []
    skip = False
    for word in options:
        if skip:
            skip = False
            continue
        name = word.split("=", 1)[0]
        if name in _MEMORY:
            skip = "=" not in word
            continue
        out.append(word)
    return out


def with_nodes(command: Sequence[str], nodes: int, nodelist: Sequence[str] = (), exclude: Sequence[str] = (),
               overlap: bool = False, ntasks: Optional[int] = None) -> List[str]:
    """`command` with `--nodes=N` (and `--nodelist`, `--exclude`; for a relaunch `--overlap --mem=0`; for
    one with fewer workers `--ntasks`) last among srun's options.  ValueError when the command is not srun."""
    if not is_srun(command):
        raise ValueError(f"the step command runs {command[0] if command else 'nothing'}, not srun")
    end = options_end(command)
    options = list(command[1:end])
    separator = [options.pop()] if options and options[-1] == "--" else []
    added = [f"--nodes={nodes}"]
    if overlap:
        options = _without_memory(options)
        added = ["--overlap", "--mem=0", *added]
    if nodelist:
        added.append("--nodelist=" + ",".join(nodelist))
    if exclude:
        added.append("--exclude=" + ",".join(exclude))
    if ntasks is not None:
        added.append(f"--ntasks={ntasks}")
    return [command[0], *options, *added, *separator, *command[end:]]


__all__ = ["is_srun", "options_end", "with_nodes"]
