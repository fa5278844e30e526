"""A job's goodput account as a value: the parts its seconds fall into, each run's figures, the Account
record and its JSON.  Pure data: plan.goodput fills it, plan.goodput_words says it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Mapping, NamedTuple, Optional, Tuple

PARTS = ("queued", "start_up", "training", "saves", "redone", "faults", "end_wait", "other")
CSV_FIELDS = ("job", "total_s", "node_s", "goodput") + PARTS


class RunFigures(NamedTuple):
    run: int
    start: float
    end: float
    nodes: int  # the most nodes of its steps
    workers: int  # tasks that train (ps and evaluator left out)
    step: Optional[int]  # the furthest step it reached
    resumed_from: Optional[int] = None  # the first step of its lead (a resumed run's checkpoint); None without points


@dataclass(frozen=True)
class Account:
    """A job's seconds by cause: `parts` add up to total_s, `node_parts` to node_s (queued: 0)."""

    job: str
    total_s: float
    node_s: float
    goodput: Optional[float]  # training node-seconds / node_s; None when nothing trained
    parts: Mapping[str, float]
    node_parts: Mapping[str, float]
    runs: Tuple[RunFigures, ...]
    notes: Tuple[str, ...]  # how each figure was measured, which are estimates, what was skipped
    advice: Tuple[str, ...]
    queued_between_s: float = 0.0  # of parts["queued"]: between runs and since a requeue
    # each time the lead went back, or a run or relaunched step resumed, below the furthest step reached before:
    # that furthest step minus the step it resumed from, summed (a requeue: the run's step minus its checkpoint)
    redone_steps: int = 0

    def to_json(self) -> Dict[str, Any]:
        """JSON-ready: seconds to 0.1, goodput to 4 decimals."""
        rounded = {name: {part: round(seconds, 1) for part, seconds in getattr(self, name).items()}
                   for name in ("parts", "node_parts")}
        runs = [{**run._asdict(), "start": round(run.start, 1), "end": round(run.end, 1)} for run in self.runs]
        return {"job": self.job, "total_s": round(self.total_s, 1), "node_s": round(self.node_s, 1),
                "goodput": None if self.goodput is None else round(self.goodput, 4), **rounded,
                "queued_between_s": round(self.queued_between_s, 1), "redone_steps": self.redone_steps,
                "runs": runs, "notes": list(self.notes),
                "advice": list(self.advice)}


__all__ = ["CSV_FIELDS", "PARTS", "Account", "RunFigures"]
