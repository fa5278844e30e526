"""`tf-slurm status`'s training part: per task its step, rate, loss and last step; for the job, how far
the training is and whether it ends before the time limit.

Why here: the figures come from the hub's status file (`progress`: plan.train_progress's tracks)
and Slurm's view of the job (EndTime, TimeLimit); the rules (ETA, runs needed) are pure
(plan.train_progress); this only puts them in words.
"""

from __future__ import annotations

import time
from typing import Any, Dict, List, Mapping, Optional

from tf_for_slurm.host.batch_script import time_limit_seconds
from tf_for_slurm.plan.train_progress import against_limit, eta

COLUMNS = ["step", "rate", "loss", "last step"]


def _progress(step: Mapping[str, Any]) -> Dict[int, Mapping[str, Any]]:
    out: Dict[int, Mapping[str, Any]] = {}
    for key, value in (step.get("progress") or {}).items():
        if isinstance(key, str) and key.isdigit() and isinstance(value, Mapping):
            out[int(key)] = value
    return out


def cells(step: Mapping[str, Any], rank: int, now: float) -> Dict[str, str]:
    """The task's training columns ('-' where it reported nothing)."""
    p = _progress(step).get(rank)
    if not p or p.get("step") is None:
        return {c: "-" for c in COLUMNS}
    rate, loss, last = p.get("rate"), p.get("loss"), p.get("last_step_at")
    return {"step": str(p["step"]),
            "rate": "-" if not isinstance(rate, (int, float)) else f"{rate:.3g}/s",
            "loss": "-" if not isinstance(loss, (int, float)) else f"{loss:.4g}",
            "last step": "-" if not isinstance(last, (int, float)) else f"{max(0.0, now - last):.0f}s ago"}


def _clock(when: float) -> str:
    return time.strftime("%H:%M", time.localtime(when))


def end_time(slurm: Optional[Mapping[str, str]]) -> Optional[float]:
    """The job's EndTime from Slurm's view (local time, as scontrol prints it), else None."""
    text = (slurm or {}).get("EndTime", "")
    try:
        return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))
    except (ValueError, OverflowError):
        return None


def training_line(step: Mapping[str, Any], slurm: Optional[Mapping[str, str]], batch: Optional[Mapping[str, Any]],
                  now: float) -> Optional[str]:
    """One line: the leading task's step (of the target), its rate, the ETA against the time limit;
    None when no task reported progress."""
    progress = _progress(step)
    reporting = {r: p for r, p in progress.items() if isinstance(p.get("step"), int)}
    if not reporting:
        return None
    chief = step.get("chief")
    rank = chief if chief in reporting else max(reporting, key=lambda r: reporting[r]["step"])
    lead = reporting[rank]
    targets = [p["target"] for p in reporting.values() if isinstance(p.get("target"), int)]
    target = (batch or {}).get("target") if isinstance((batch or {}).get("target"), int) else None
    if target is None:  # batch-step's --target, else the leading task's own, else the largest any task said
        target = lead["target"] if isinstance(lead.get("target"), int) else (max(targets) if targets else None)
    rate = lead.get("rate") if isinstance(lead.get("rate"), (int, float)) else None
    text = f"training: step {lead['step']}" + (f" of {target}" if target is not None else "")
    text += f", {rate:.3g} steps/s" if rate else ", no rate yet"
    if step.get("state") != "running":
        return text
    at = eta(lead["step"], rate, target, now)
    if at is None:
        return text + ("" if target is not None else " (no target known: Keras fit's epochs x steps, --target)")
    end = end_time(slurm)
    try:
        limit = time_limit_seconds((slurm or {}).get("TimeLimit", ""))
    except (ValueError, KeyError):  # Slurm's words where a time was expected: no run length
        limit = None
    fit = against_limit(at, end, now, limit)
    text += f"; ETA {_clock(at)} ({max(0.0, at - now) / 60:.0f} min)"
    if end is None:
        return text
    if fit.finishes:
        return text + f"; time limit {_clock(end)}"
    text += f"; will not finish before the time limit {_clock(end)}"
    if batch is not None:
        runs = f", about {fit.runs_needed} runs" if fit.runs_needed else ""
        text += f": it will checkpoint and requeue{runs}"
    return text


def slow_line(step: Mapping[str, Any], names: Mapping[int, str]) -> Optional[str]:
    """The workers the hub found slow (asynchronous training: 1.5x below the median rate for a minute)."""
    ranks = [rank for rank, p in sorted(_progress(step).items()) if p.get("slow") is True]
    if not ranks:
        return None
    shown = ", ".join(f"{names.get(r, f'rank {r}')} at {cells(step, r, 0.0)['rate']}" for r in ranks[:8])
    return f"slow (under 1/1.5 of the median rate for a minute): {shown}" + (" ..." if len(ranks) > 8 else "")


def table_rows(step: Mapping[str, Any], rows: List[Dict[str, Any]], now: float) -> List[str]:
    """The columns to add to the task table (none when no task reported progress)."""
    if not _progress(step):
        return []
    for row in rows:
        row.update(cells(step, row["rank"], now))
    return list(COLUMNS)
