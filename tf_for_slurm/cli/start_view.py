"""`tf-slurm status`'s start-up part: while no step was made, where each task is on its way to it.

Why here: the hub's status file carries each running task's start-up phase and the wait it named
(`start`: supervise.start_wait, plan.start_watch); this only puts them in words: one column, and the
named line as the step's state.
"""

from __future__ import annotations

import time
from typing import Any, Dict, List, Mapping

from tf_for_slurm.plan.start_phase import WAITS, WORDS

COLUMN = "start-up"


def _start(step: Mapping[str, Any]) -> Mapping[str, Any]:
    start = step.get("start")
    return start if isinstance(start, Mapping) else {}


def _for(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 120 else f"{max(0.0, seconds):.0f} s"


def start_line(step: Mapping[str, Any]) -> str:
    """The wait the hub named ('' when none): what status shows as the step's state from then on."""
    line = _start(step).get("line")
    return f"start-up: {line}" if isinstance(line, str) and line else ""


def cell(phase: Mapping[str, Any], laggards: List[str], now: float) -> str:
    """One task's start-up cell: its phase and for how long, what it waits for, or where it is."""
    name = phase.get("phase")
    if not isinstance(name, str) or name not in WORDS:
        return "-"
    since = phase.get("since")
    took = f" for {_for(now - since)}" if isinstance(since, (int, float)) else ""
    if name in WAITS and laggards:
        shown = ", ".join(laggards[:2]) + (" ..." if len(laggards) > 2 else "")
        return f"waiting for {shown}{took}"
    where = phase.get("where")
    text = f"{WORDS[name]}{took}"
    return f"{text}, at {where}" if isinstance(where, str) and where else text


def table_rows(step: Mapping[str, Any], rows: List[Dict[str, Any]], now: float = 0.0) -> List[str]:
    """The column to add to the task table while no step was made and the step runs (none otherwise)."""
    start = _start(step)
    phases = start.get("phases")
    if not isinstance(phases, Mapping) or not phases or step.get("state") == "ended":
        return []
    now = now or time.time()
    names = {row["rank"]: f"{row['role']} {row['index']}" for row in rows}
    laggards = [names[r] for r in start.get("laggards") or [] if isinstance(r, int) and r in names]
    for row in rows:
        phase = phases.get(str(row["rank"]))
        row[COLUMN] = cell(phase, laggards, now) if isinstance(phase, Mapping) else "-"
    return [COLUMN]
