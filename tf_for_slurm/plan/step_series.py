"""Each task's training step over time, for `tf-slurm report`'s step chart, as plain data.

status.json's progress histories (a hub carries them across runs) checked and bounded, thinned to
MAX_POINTS, and cut into segments wherever they cross one of the job's runs' start or end: between
two runs of a requeued job it waited in Slurm's queue and nothing trained, so no line may join a
run's last point to the next run's first (the page draws one line per segment).  plan/job_report.py
builds the rest of the model and says which run a time is in.
"""

from __future__ import annotations

import math
from itertools import groupby
from typing import Any, Callable, Hashable, List, Mapping, NamedTuple, Optional, Sequence, Tuple

MAX_POINTS = 600  # points of a step series (evenly thinned, the last kept)

Point = Tuple[float, int]  # (epoch seconds, step)


class Series(NamedTuple):
    lane: str
    label: str
    segments: Tuple[Tuple[Point, ...], ...]  # oldest first; one per run (never a line across a requeue's gap)

    @property
    def points(self) -> Tuple[Point, ...]:
        return tuple(p for segment in self.segments for p in segment)


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def progress(status: Mapping[str, Any]) -> Mapping[str, Any]:
    """status.json's `progress` (rank -> track), {} when it is not a mapping."""
    found = status.get("progress")
    return found if isinstance(found, Mapping) else {}


def points(history: Any, max_points: int = MAX_POINTS) -> List[Point]:
    """A track's step history ([[time, step], ...]) checked, sorted and evenly thinned (the last kept)."""
    found = sorted((float(p[0]), int(p[1])) for p in (history if isinstance(history, list) else [])
                   if isinstance(p, list) and len(p) == 2 and _number(p[0]) and _number(p[1]))
    if len(found) > max_points:
        every = len(found) / (max_points - 1)
        found = [found[int(i * every)] for i in range(max_points - 1)] + [found[-1]]
    return found


def segments(found: Sequence[Point], part: Callable[[float], Hashable]) -> Tuple[Tuple[Point, ...], ...]:
    """The points cut wherever `part` (the run a time is in, and whether after that run's end) changes."""
    return tuple(tuple(segment) for _, segment in groupby(found, key=lambda p: part(p[0])))


def series(status: Mapping[str, Any], lane_of: Callable[[int], Tuple[str, str]], part: Callable[[float], Hashable],
           max_lanes: int) -> List[Series]:
    """Each task's step over time, in rank order: `lane_of(rank)` is its (lane, label), at most
    `max_lanes` series."""
    out: List[Series] = []
    for rank_text, track in sorted(progress(status).items(), key=lambda kv: str(kv[0]).zfill(12)):
        if not isinstance(track, Mapping) or not str(rank_text).isdigit() or len(str(rank_text)) > 9:
            continue
        found = points(track.get("history"))
        if found and len(out) < max_lanes:
            out.append(Series(*lane_of(int(rank_text)), segments(found, part)))
    return out


def target(status: Mapping[str, Any], batch: Optional[Mapping[str, Any]]) -> Optional[int]:
    """The training's target step: the largest a task said, else batch-step's --target."""
    found = [t for x in progress(status).values()
             if isinstance(x, Mapping) and isinstance(t := x.get("target"), int) and not isinstance(t, bool)]
    if found:
        return max(found)
    told = batch.get("target") if batch else None
    return told if isinstance(told, int) and not isinstance(told, bool) else None
