"""Training progress as data: each task's one-line report, its step over time (and its checkpoint saves, over
its processes), and the step-wide rules read from them (hung, slow workers, the ETA against the time limit).  Pure.

Why: a supervisor's beats say a task is alive, not that it trains.  A task that writes its step (a Keras callback, a
hook, the user's loop) lets the hub tell a training that stopped moving from one that is slow, name the worker that
holds an asynchronous training back, and say whether the target step fits in the job's time limit.

Times are unix seconds.  A report's `t` is the task's clock, `now` the hub's: the rules compare them, so they assume
the nodes' clocks agree to a few seconds (NTP), far below their bounds.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import deque
from dataclasses import dataclass
from typing import Any, Deque, Dict, Iterable, List, Mapping, Optional, Tuple

MAX_REPORT_BYTES = 512  # a report is one short line; anything longer is not ours
MAX_STEP = 2 ** 53  # steps (and saves, and seconds in them) are exact in a JSON reader's float
KINDS = frozenset({"keras", "optimizer", "tf1", "pss", "user"})
KEEP_SECONDS = 120.0  # recent samples kept for rate and median step time
MAX_RECENT = 512  # and at most this many, however fast a task reports
MAX_HISTORY = 240  # (t, step) points over the whole run, for a picture
MAX_LINE = 300  # Hang.line's length
MAX_NAMED = 8  # tasks Hang.line names before "and N more"

_FIELDS = {"v", "step", "t", "loss", "epoch", "target", "kind", "eval", "saves", "save_s"}


def _is_int(x: Any) -> bool:
    return type(x) is int  # bool is an int subclass: true is not step 1


def _is_number(x: Any) -> bool:
    return (type(x) is int or type(x) is float) and math.isfinite(x)


@dataclass(frozen=True)
class Report:
    """One progress report: the task's step at its time t, and what else it chose to say."""

    step: int
    t: float
    loss: Optional[float] = None
    epoch: Optional[int] = None
    target: Optional[int] = None
    kind: str = "user"
    eval: bool = False  # an evaluation pass: alive and working, but the training step did not move
    saves: Optional[int] = None  # checkpoint saves this process finished (the shim's), with save_s:
    save_s: Optional[float] = None  # the seconds spent in them; both or neither


def _no_constant(name: str) -> Any:
    raise ValueError(name)  # NaN, Infinity: json.loads accepts them, JSON does not


def _unique(pairs: List[Tuple[str, Any]]) -> Dict[str, Any]:
    d = dict(pairs)
    if len(d) != len(pairs):
        raise ValueError("duplicate key")  # two steps in one line: which one is true?
    return d


def _optional(d: Mapping[str, Any], key: str, ok: Any) -> Tuple[bool, Any]:
    """(valid, value) of an optional field: absent and null are None."""
    x = d.get(key)
    return (True, None) if x is None else (bool(ok(x)), x)


def parse_report(text: str) -> Optional[Report]:
    """The report in a task's progress file, or None when it is not a valid one (never raises).

    The file is written by the user's program, so everything is bounded and checked: at most 512 bytes, one JSON
    object on one line, v 1, only the known fields, each of its type and range (saves and save_s: both or neither)."""
    try:
        if not isinstance(text, str) or len(text) > MAX_REPORT_BYTES or len(text.encode()) > MAX_REPORT_BYTES:
            return None
        line = text.strip()
        if "\n" in line or "\r" in line:
            return None
        d = json.loads(line, parse_constant=_no_constant, object_pairs_hook=_unique)
    except (ValueError, UnicodeError, RecursionError):
        return None
    if not isinstance(d, dict) or not set(d) <= _FIELDS or not _is_int(d.get("v")) or d["v"] != 1:
        return None
    step: Any = d.get("step")
    t: Any = d.get("t")
    kind: Any = d.get("kind")
    if not (_is_int(step) and 0 <= step < MAX_STEP and _is_number(t) and kind in KINDS):
        return None
    checks = [_optional(d, "loss", _is_number),
              _optional(d, "epoch", lambda x: _is_int(x) and 0 <= x < MAX_STEP),
              _optional(d, "target", lambda x: _is_int(x) and 1 <= x < MAX_STEP),
              _optional(d, "eval", lambda x: type(x) is bool),
              _optional(d, "saves", lambda x: _is_int(x) and 0 <= x < MAX_STEP),
              _optional(d, "save_s", lambda x: _is_number(x) and 0 <= x < MAX_STEP)]
    if not all(ok for ok, _ in checks) or (checks[4][1] is None) != (checks[5][1] is None):
        return None
    loss, epoch, target, evaluating, saves, save_s = (x for _, x in checks)
    return Report(step=step, t=float(t), loss=None if loss is None else float(loss), epoch=epoch, target=target,
                  kind=kind, eval=bool(evaluating), saves=saves, save_s=None if save_s is None else float(save_s))


def report_line(report: Report) -> str:
    """The report as one compact JSON line (at most about 210 ASCII characters): how a spoke passes
    it to the hub, which reads it back with parse_report."""
    d: Dict[str, Any] = {"v": 1, "step": report.step, "t": round(report.t, 3), "kind": report.kind}
    if report.loss is not None:
        d["loss"] = float(f"{report.loss:.6g}")
    for key in ("epoch", "target"):
        if getattr(report, key) is not None:
            d[key] = getattr(report, key)
    if report.eval:
        d["eval"] = True
    if report.saves is not None and report.save_s is not None:
        d["saves"], d["save_s"] = report.saves, round(report.save_s, 3)
    return json.dumps(d, separators=(",", ":"))


def _median(values: List[float]) -> Optional[float]:
    return statistics.median(values) if values else None  # the middle one, or the mean of the middle two


class Track:
    """One task's progress over time, fed with its reports; bounded memory.

    Mutable and small: `add` changes it and returns it, so `track = track.add(report, now)` reads the same either
    way.  Kept: the last KEEP_SECONDS of step changes (rate, median step time) and at most MAX_HISTORY (t, step)
    points over the whole run, halved when full, evenly in time; the job-wide checkpoint saves and seconds in them."""

    def __init__(self) -> None:
        self.step: Optional[int] = None
        self.loss: Optional[float] = None
        self.epoch: Optional[int] = None
        self.target: Optional[int] = None
        self.kind: Optional[str] = None
        self.last_step_at: Optional[float] = None  # t of the last report that moved the step
        self.last_progress_at: Optional[float] = None  # that, or a later evaluation report
        self.reported_at: Optional[float] = None  # t of the last report taken (older ones are stale)
        self.saves: Optional[int] = None  # checkpoint saves, job-wide: those of every process of the task,
        self.save_s: Optional[float] = None  # and the seconds in them (from its reports' counters)
        self._counters = (0, 0.0, 0, 0.0)  # earlier processes' saves and seconds, then this one's, as reported
        self._recent: Deque[Tuple[float, int]] = deque(maxlen=MAX_RECENT)
        self._history: List[Tuple[float, int]] = []
        self._spacing = 0.0  # the least time between two kept history points, grows as it halves
        self._median: Tuple[Optional[float], ...] = ()  # median_step_seconds, once asked, until a step

    def add(self, report: Report, now: float) -> "Track":
        """Take a report (one not newer than the last taken, e.g. the same file read again, is ignored).  A lower
        step than before is a restart from a checkpoint: the recent samples start again, so the rate never spans it.
        Save counters lower than the last are a restarted process's (from 0 again): the last one's are carried."""
        if self.reported_at is not None and report.t <= self.reported_at:
            return self
        self.reported_at = report.t
        if report.saves is not None and report.save_s is not None:  # any report's, an evaluation's too
            done, done_s, last, last_s = self._counters
            if report.saves < last or report.save_s < last_s:  # a new process: the old one's into the totals
                done, done_s = done + last, done_s + last_s
            self._counters = (done, done_s, report.saves, report.save_s)
            self.saves, self.save_s = done + report.saves, round(done_s + report.save_s, 3)
        if report.eval:
            self.last_progress_at = report.t
            return self
        self.loss, self.kind = report.loss, report.kind
        self.epoch = report.epoch if report.epoch is not None else self.epoch
        self.target = report.target if report.target is not None else self.target
        if report.step == self.step:
            return self  # the same step said again: alive, not progress
        if self.step is not None and report.step < self.step:
            self._recent.clear()
        self.step, self.last_step_at, self.last_progress_at = report.step, report.t, report.t
        self._median = ()
        self._recent.append((report.t, report.step))
        cutoff = min(now, report.t) - KEEP_SECONDS  # the task's own last 120 s when its clock lags
        while len(self._recent) > 1 and self._recent[0][0] < cutoff:
            self._recent.popleft()
        self._remember(report.t, report.step)
        return self

    def _remember(self, t: float, step: int) -> None:
        """Add a history point: the newest always shows, and replaces the one before it while
        that one is under the spacing from the last kept point."""
        h = self._history
        if len(h) >= 2 and h[-1][0] - h[-2][0] < self._spacing:
            h[-1] = (t, step)
            return
        h.append((t, step))
        if len(h) > MAX_HISTORY:  # 241 points: every other one keeps the first and the last
            self._history = h[::2]
            self._spacing = (self._history[-1][0] - self._history[0][0]) / (len(self._history) - 1)

    def rate(self, now: float, window: float = 60.0) -> Optional[float]:
        """Steps per second over the last `window` seconds (at most KEEP_SECONDS), None with fewer
        than 2 step changes in it: a task silent for the window has no rate (that is `hung`'s)."""
        inside = [s for s in self._recent if s[0] >= now - window]
        if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
            return None
        return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])

    def median_step_seconds(self) -> Optional[float]:
        """The median of seconds per step between consecutive recent step changes (a report may
        cover several steps), None before two; robust to one slow step (a checkpoint, an eval)."""
        if not self._median:  # kept: `hung` asks every task, each time it looks
            r = list(self._recent)
            self._median = (_median([(b[0] - a[0]) / (b[1] - a[1])
                                     for a, b in zip(r, r[1:]) if b[1] > a[1] and b[0] >= a[0]]),)
        return self._median[0]

    def covers(self, now: float, window: float) -> bool:
        """Whether its recent samples reach back `window` seconds: not a task that just (re)started."""
        return bool(self._recent) and self._recent[0][0] <= now - window

    def history(self) -> List[List[float]]:
        """[[t, step], ...] over the run, at most MAX_HISTORY points, oldest first."""
        return [[t, step] for t, step in self._history]

    def to_json(self, now: Optional[float] = None, *, with_history: bool = True) -> Dict[str, Any]:
        """A JSON-ready dict for status.json / batch.json; rate at `now` (default: the last report).
        Without history for a large step (240 points a task adds up over thousands of tasks)."""
        at = now if now is not None else self.reported_at
        rate = None if at is None else self.rate(at)
        out: Dict[str, Any] = {
            "step": self.step, "rate": None if rate is None else round(rate, 6), "loss": self.loss, "saves": self.saves,
            "last_step_at": self.last_step_at, "last_progress_at": self.last_progress_at, "save_s": self.save_s,
            "reported_at": self.reported_at, "target": self.target, "kind": self.kind, "epoch": self.epoch}
        if with_history:
            out["history"] = self.history()
        return out

    @classmethod
    def from_json(cls, d: Any) -> "Track":
        """A Track back from `to_json`'s dict; anything malformed gives an empty Track (the file may be from another
        version, or damaged), never an exception.  The recent samples come back from the history's last
        KEEP_SECONDS, so the median step time survives a restart; the save totals go on from theirs."""
        try:
            return _from_json(d)
        except (TypeError, ValueError, KeyError, OverflowError):
            return cls()


def _opt(d: Mapping[str, Any], key: str, ok: Any) -> Any:
    x = d.get(key)
    if x is not None and not ok(x):
        raise ValueError(key)
    return x


def _from_json(d: Any) -> Track:
    if not isinstance(d, dict):
        raise TypeError("not a dict")
    count = lambda x: _is_int(x) and 0 <= x < MAX_STEP  # noqa: E731
    history = d.get("history") or []
    if not isinstance(history, list) or len(history) > MAX_HISTORY:
        raise ValueError("history")
    points: List[Tuple[float, int]] = []
    for p in history:
        if not (isinstance(p, list) and len(p) == 2 and _is_number(p[0]) and count(p[1])):
            raise ValueError("history point")
        if points and p[0] < points[-1][0]:
            raise ValueError("history out of order")
        points.append((float(p[0]), p[1]))
    track = Track()
    track.step = _opt(d, "step", count)
    track.loss = _opt(d, "loss", _is_number)
    track.epoch = _opt(d, "epoch", count)
    track.target = _opt(d, "target", lambda x: _is_int(x) and 1 <= x < MAX_STEP)
    track.kind = _opt(d, "kind", lambda x: x in KINDS)
    track.last_step_at = _opt(d, "last_step_at", _is_number)
    progress = _opt(d, "last_progress_at", _is_number)
    track.last_progress_at = track.last_step_at if progress is None else progress
    reported = _opt(d, "reported_at", _is_number)
    track.reported_at = track.last_progress_at if reported is None else reported
    track.saves = _opt(d, "saves", count)
    track.save_s = _opt(d, "save_s", lambda x: _is_number(x) and 0 <= x < MAX_STEP)
    track._counters = (track.saves or 0, float(track.save_s or 0), 0, 0.0)  # an earlier run's: this run's count from 0
    track._history = points
    if len(points) > MAX_HISTORY // 2:  # perhaps halved before: keep its spacing, not every report
        track._spacing = (points[-1][0] - points[0][0]) / (len(points) - 1)
    start = max((i for i in range(1, len(points)) if points[i][1] < points[i - 1][1]), default=0)
    track._recent.extend(p for p in points[start:] if p[0] >= points[-1][0] - KEEP_SECONDS)
    return track


def _secs(x: float) -> str:
    """'74', '0.4', '0.012': seconds short enough for a line."""
    return f"{x:.0f}" if abs(x) >= 10 else f"{x:.2g}"


@dataclass(frozen=True)
class Hang:
    """Tasks that made no training progress for `bound` seconds (the least quiet of them: `silent_for`)."""

    ranks: Tuple[int, ...]  # the hung tasks, sorted
    last_step: Mapping[int, Optional[int]]  # rank -> its last step
    silent_for: float
    bound: float
    median_step: Optional[float]  # the median of the tasks' median step times, None when unknown
    floor: float
    factor: float

    def line(self, names: Optional[Mapping[int, str]] = None) -> str:
        """One line, under MAX_LINE characters, the tasks furthest behind first: 'no training step
        for 74 s (bound: max(10 x 0.4 s median step, 60 s) = 60 s): worker 1 at step 812, ...'."""
        names = names or {}
        if self.median_step is None:
            why = f"bound: {_secs(self.bound)} s, no step time known"
        else:
            why = (f"bound: max({self.factor:g} x {_secs(self.median_step)} s median step, {_secs(self.floor)} s)"
                   f" = {_secs(self.bound)} s")
        line = f"no training step for {_secs(self.silent_for)} s ({why}):"
        order = sorted(self.ranks, key=lambda r: (self.last_step.get(r) or 0, r))
        shown = 0
        for rank in order[:MAX_NAMED]:
            who = str(names.get(rank, f"rank {rank}"))[:60]
            part = f"{',' if shown else ''} {who} at step {self.last_step.get(rank)}"
            if len(line) + len(part) + len(" and 99999 more") >= MAX_LINE:
                break
            line, shown = line + part, shown + 1
        if shown < len(order):
            line += f" and {len(order) - shown} more"
        return line


def hung(tracks: Mapping[int, Track], now: float, *, floor: float = 60.0, factor: float = 10.0,
         running: Optional[Iterable[int]] = None, since: Optional[Mapping[int, float]] = None) -> Optional[Hang]:
    """The tasks that are hung: each made progress once (a step, or an evaluation report) and none since for
    max(factor x median step time, floor) seconds.  In synchronous training (MWMS) every task stops at once; in
    asynchronous training (TF1, PSS) one worker may, while the others go on.  The median is over the tasks that
    know theirs (the floor alone when none); floor <= 0: off.  running: only these ranks are judged (a task that
    ended is not hung); since: per rank, a time that counts as progress (its restart: its start-up is not a hang)."""
    if floor <= 0:
        return None
    alive = None if running is None else set(running)
    seen = {rank: t for rank, t in tracks.items()
            if t.last_progress_at is not None and (alive is None or rank in alive)}
    if not seen:
        return None  # not started: the start-up is not a hang
    median = _median([m for m in (t.median_step_seconds() for t in seen.values()) if m is not None])
    bound = floor if median is None else max(factor * median, floor)
    since = since or {}
    quiet = {rank: now - max(t.last_progress_at or 0.0, since.get(rank, 0.0)) for rank, t in seen.items()}
    stuck = {rank: q for rank, q in quiet.items() if q >= bound}
    if not stuck:
        return None
    ranks = tuple(sorted(stuck))
    return Hang(ranks=ranks, last_step={r: seen[r].step for r in ranks}, silent_for=min(stuck.values()),
                bound=bound, median_step=median, floor=floor, factor=factor)


def slow(tracks: Mapping[int, Track], now: float, *, window: float = 60.0, ratio: float = 1.5) -> List[int]:
    """Ranks whose rate over the window is below the median rate / ratio: the workers holding an asynchronous
    training (TF1, PSS) back.  Only among tasks that have a rate and have reported for the whole window (a task
    that just started is not named), and only with 3 or more of them: with two, which one is slow?"""
    if window <= 0 or ratio <= 0:
        return []
    rates = {rank: r for rank, t in tracks.items()
             if t.covers(now, window) and (r := t.rate(now, window)) is not None}
    if len(rates) < 3:
        return []
    median = _median(list(rates.values()))
    assert median is not None
    return sorted(rank for rank, r in rates.items() if r < median / ratio)


def eta(step: Optional[int], rate: Optional[float], target: Optional[int], now: float) -> Optional[float]:
    """The unix time the target step is reached at this rate: now when it is; None without a target, a step or a
    positive rate."""
    if target is None or step is None:
        return None
    if step >= target:
        return now
    if rate is None or rate <= 0:
        return None
    return now + (target - step) / rate


@dataclass(frozen=True)
class Fit:
    """Whether the training ends in this run's time limit; the runs it needs, this one counted (None: unknown)."""

    finishes: Optional[bool]
    runs_needed: Optional[int]


def against_limit(eta_at: Optional[float], end_time: Optional[float], now: float,
                  run_seconds: Optional[float]) -> Fit:
    """The ETA against the job's end time.  Finishing: Fit(True, 1) (no end time: it finishes).  Not: this run,
    then the work left at its end, eta_at - end_time seconds, in runs of run_seconds (the time limit), rounded up:
    1 + ceil((eta_at - end_time) / run_seconds), so at least 2.  An estimate: it leaves out each run's start-up and
    the steps redone from the last checkpoint; runs_needed None without a run length."""
    if eta_at is None:
        return Fit(None, None)
    if end_time is None or eta_at <= end_time:
        return Fit(True, 1)
    if run_seconds is None or run_seconds <= 0:
        return Fit(False, None)
    return Fit(False, 1 + math.ceil((eta_at - max(end_time, now)) / run_seconds))
