"""A job's timeline as plain data: status.json, batch.json and timeline.jsonl in, a report model out.

Why pure: `tf-slurm report` must never trust what it reads (a file from another version, cut, or
carrying a task log's words): every value is checked and bounded here, so cli/report_page.py draws a
model the tests can table.  The model: lanes (one per task, role and index, kept across restarts,
runs and relaunches; first the job's own), spans (when a task ran), marks (an event in a lane),
boundaries (lines across the page: run starts, requeues, relaunches), each task's step over time
(across runs, one segment per run: plan/step_series.py) and a one-line summary.  Times are epoch seconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Dict, Iterable, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from tf_for_slurm.plan import job_state, step_series
from tf_for_slurm.plan.step_series import Series
from tf_for_slurm.plan.step_status import task_rows
from tf_for_slurm.plan.step_timeline import parse_line

KINDS = ("start", "restart", "hang", "lost", "relaunch", "requeue", "end")  # a mark's kind, the legend's order
JOB_LANE = "job"  # the lane of the job's own events (its step's start and end, requeues, relaunches)
MAX_EVENTS = 20_000  # timeline events kept (the newest)
MAX_TEXT = 300  # characters kept of any string read (a detail may be a task log's line)
MAX_LANES = 256  # tasks drawn; more are counted in a note


@dataclass(frozen=True)
class Event:
    """One checked line of timeline.jsonl."""

    at: float
    event: str
    rank: Optional[int] = None
    role: Optional[str] = None
    index: Optional[int] = None
    node: Optional[str] = None
    status: Optional[int] = None
    detail: Optional[str] = None


class Timeline(NamedTuple):
    """The events kept, the lines skipped (not an event), and the events dropped over MAX_EVENTS."""

    events: Tuple[Event, ...]
    skipped: int = 0
    dropped: int = 0


class Lane(NamedTuple):
    key: str  # "worker 0"; JOB_LANE for the job's own
    label: str  # "worker 0 (rank 1, node2)"
    rank: Optional[int] = None


class Span(NamedTuple):
    lane: str
    start: float
    end: float
    run: int
    node: Optional[str]
    why_end: str  # "exited with status 1", "restarted", "lost: ...", "still running", ...


class Mark(NamedTuple):
    kind: str  # one of KINDS
    at: float
    lane: str
    text: str  # plain text: the page escapes it


class Boundary(NamedTuple):
    kind: str  # "run", "requeue" or "relaunch"
    at: float
    text: str


class Report(NamedTuple):
    job: str
    summary: str
    lanes: Tuple[Lane, ...]
    spans: Tuple[Span, ...]
    marks: Tuple[Mark, ...]
    boundaries: Tuple[Boundary, ...]
    series: Tuple[Series, ...]
    start: Optional[float]  # the time range of everything drawn (None: nothing has a time)
    end: Optional[float]
    target: Optional[int]  # the training's target step, when known
    notes: Tuple[str, ...]  # what the page could not show, and why


def _num(x: Any) -> Optional[float]:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None


def _int(x: Any) -> Optional[int]:
    return x if isinstance(x, int) and not isinstance(x, bool) else None


def _text(x: Any) -> Optional[str]:
    return x[:MAX_TEXT] if isinstance(x, str) else None


def _event(line: str) -> Optional[Event]:
    d = parse_line(line)  # the line's rule: plan.step_timeline
    if d is None:
        return None
    return Event(d["at"], d["event"], d["rank"], _text(d["role"]), d["index"], _text(d["node"]), d["status"],
                 _text(d["detail"]))


def parse_timeline(text: str, max_events: int = MAX_EVENTS) -> Timeline:
    """The events of timeline.jsonl's text, oldest first (a line that is not one, e.g. half written
    as a node died, is skipped and counted; an unknown event is skipped too); the newest
    `max_events` kept."""
    events: List[Event] = []
    skipped = 0
    for line in text.splitlines():
        if not line.strip():
            continue
        event = _event(line)
        skipped += event is None
        events += [event] if event is not None else []
    events.sort(key=lambda e: e.at)  # stable: a relaunched hub's clock may differ a little
    dropped = max(0, len(events) - max_events)
    return Timeline(tuple(events[dropped:]), skipped, dropped)


class _Runs:
    """batch.json's runs, for 'which run was this time in'."""

    def __init__(self, batch: Optional[Mapping[str, Any]]):
        runs = [*(batch.get("history") or []), batch] if batch else []
        self.runs = [r for r in runs if isinstance(r, Mapping) and _int(r.get("run")) is not None]
        self.starts = sorted((t, r["run"]) for r in self.runs if (t := _num(r.get("started_at"))) is not None)
        ends = sorted((r["run"], t) for r in self.runs if (t := _num(r.get("ended_at"))) is not None)
        self.ends = dict(ends)  # each run's latest end (sorted: its last one wins)

    def at(self, t: float, counted: int) -> int:
        """The run `t` is in: batch.json's, else `counted` (the step starts seen so far)."""
        found = [run for start, run in self.starts if start <= t + 1.0]
        return found[-1] if found else max(counted, 1)

    def part(self, t: float) -> Tuple[int, bool]:
        """The run `t` is in, and whether after that run's end (in the gap before the next run)."""
        run = self.at(t, 1)
        return run, run in self.ends and t > self.ends[run]

    def end_before(self, after: float, before: float) -> Optional[float]:
        """The end of a run between two times (where a task whose end nobody wrote stopped)."""
        ends = [t for r in self.runs if (t := _num(r.get("ended_at"))) is not None and after <= t <= before]
        return min(ends) if ends else None


def _task_label(role: Any, index: Any, rank: Any, node: Any) -> str:
    where = ", ".join(str(x) for x in (f"rank {rank}" if rank is not None else None, node) if x not in (None, ""))
    return f"{role} {index}" + (f" ({where})" if where else "")


class _Builder:
    """Folds the events into spans and marks, lane by lane."""

    def __init__(self, rows: Sequence[Mapping[str, Any]], runs: _Runs):
        self.runs = runs
        self.lanes: Dict[str, Lane] = {}
        self.by_rank: Dict[int, str] = {}
        for row in rows:
            key, rank = f"{row['role']} {row['index']}", _int(row.get("rank"))
            self.lanes[key] = Lane(key, _task_label(row["role"], row["index"], rank, _text(row.get("node"))), rank)
            if rank is not None:
                self.by_rank[rank] = key
        self.open: Dict[str, Tuple[float, Optional[str], int]] = {}  # lane -> (start, node, run)
        self.spans: List[Span] = []
        self.marks: List[Mark] = []
        self.counted = 0  # step starts seen

    def lane(self, e: Event) -> str:
        if e.role is not None and e.index is not None:
            key = f"{e.role} {e.index}"
        elif e.rank is not None:
            key = self.by_rank.get(e.rank, f"rank {e.rank}")
        else:
            key = "task ?"
        if key not in self.lanes:
            role, _, index = key.partition(" ")
            self.lanes[key] = Lane(key, _task_label(role, index, e.rank, e.node), e.rank)
            if e.rank is not None:
                self.by_rank.setdefault(e.rank, key)
        return key

    def lane_of(self, rank: int) -> Tuple[str, str]:
        """The (lane, label) of the task of `rank` (its rank alone when no row or event named it)."""
        lane = self.by_rank.get(rank, f"rank {rank}")
        return lane, self.lanes[lane].label if lane in self.lanes else lane

    def close(self, lane: str, at: float, why: str) -> None:
        if lane in self.open:
            start, node, run = self.open.pop(lane)
            self.spans.append(Span(lane, start, max(start, at), run, node, why))

    def begin(self, lane: str, at: float, node: Optional[str], why: str) -> None:
        node = node or (self.open[lane][1] if lane in self.open else None)
        self.close(lane, at, why)
        self.open[lane] = (at, node, self.runs.at(at, self.counted))

    def close_all(self, at: float, why: str) -> None:
        for lane in list(self.open):
            start = self.open[lane][0]
            ended = self.runs.end_before(start, at)  # its run ended (a requeue) before the next began
            self.close(lane, at if ended is None else ended, why)

    def feed(self, e: Event) -> None:
        if e.event in ("step_start", "step_end"):
            self.job_event(e)
            return
        lane = self.lane(e)
        name = self.lanes[lane].label
        said = f": {e.detail}" if e.detail else ""
        if e.event == "start" and lane in self.open and e.at - self.open[lane][0] < 1.0:
            return  # the start that follows its restart (the hub writes both at once)
        if e.event == "start":
            self.begin(lane, e.at, e.node, "started again")
            self.marks.append(Mark("start", e.at, lane, f"{name}: started"))
        elif e.event == "restart":
            self.begin(lane, e.at, e.node, "restarted")
            self.marks.append(Mark("restart", e.at, lane, f"{name}: restarted in place{said}"))
        elif e.event == "hang":
            start_up = (e.detail or "").startswith("start-up")  # a run that never trained (supervise.start_wait)
            self.marks.append(Mark("hang", e.at, lane, f"{name}: {'waited for' if start_up else 'hung'}{said}"))
        elif e.event == "lost":
            self.close(lane, e.at, f"lost{said}")
            self.marks.append(Mark("lost", e.at, lane, f"{name}: lost{said}"))
        else:  # exit, end
            how = "exited" if e.event == "exit" else "ended by its supervisor"
            status = "" if e.status is None else f" with status {e.status}"
            self.close(lane, e.at, f"{how}{status}")
            self.marks.append(Mark("end", e.at, lane, f"{name}: {how}{status}{said}"))

    def job_event(self, e: Event) -> None:
        if e.event == "step_start":
            self.close_all(e.at, "its step started again (its end was not recorded)")
            self.counted += 1
            run = self.runs.at(e.at, self.counted)
            self.marks.append(Mark("start", e.at, JOB_LANE, f"run {run}: the step started"))
        else:
            status = "" if e.status is None else f" with status {e.status}"
            self.close_all(e.at, f"the step ended{status}")
            self.marks.append(Mark("end", e.at, JOB_LANE, f"the step ended{status}"))

    def finish(self, at: Optional[float], running: bool) -> None:
        """Spans still open at the report's end: running (the step is), else ended unrecorded."""
        for lane in list(self.open):
            start = self.open[lane][0]
            self.close(lane, max(start, at if at is not None else start),
                       "still running" if running else "its end was not recorded")


def _from_status(b: _Builder, status: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> None:
    """Spans and marks from status.json alone (no timeline.jsonl): this run's start, its lost tasks,
    the first exit and the final states; restarts are counted, their times unknown."""
    start = _num(status.get("started_at"))
    decided, updated = _num(status.get("decided_at")), _num(status.get("updated_at"))
    if start is None:
        return
    running = status.get("state") == "running"
    last = (updated if running else decided or updated) or start
    b.marks.append(Mark("start", start, JOB_LANE, f"run {b.runs.at(start, 1)}: the step started"))
    lost = {r: x for x in status.get("lost") or [] if isinstance(x, Mapping) and (r := _int(x.get("rank"))) is not None}
    first = status.get("first_exit")
    first = first if isinstance(first, Mapping) else {}
    for row in rows:
        rank, state = _int(row.get("rank")), row.get("state")
        e = Event(start, "start", rank, _text(row.get("role")), _int(row.get("index")), _text(row.get("node")))
        b.feed(e)
        restarts = _int(row.get("restarts")) or 0
        if restarts:
            b.marks[-1] = b.marks[-1]._replace(text=f"{b.marks[-1].text}; restarted {restarts} time(s) since")
        exited = _num(first.get("at")) if rank is not None and rank == first.get("rank") else None
        if rank in lost:
            x = lost[rank]
            b.feed(replace(e, event="lost", at=_num(x.get("at")) or last, detail=_text(x.get("reason"))))
        elif state in ("exited", "ended", "ending"):
            b.feed(replace(e, event="exit" if state == "exited" else "end", at=exited or last,
                           status=_int(row.get("status"))))
    if not running and decided is not None:
        status_text = "" if _int(status.get("status")) is None else f" with status {status['status']}"
        b.marks.append(Mark("end", decided, JOB_LANE, f"the step ended{status_text}"))
    b.finish(last, running)


def started_short(run: Mapping[str, Any]) -> Optional[Tuple[int, int]]:
    """(workers at the start, planned) of a batch.json run that started with fewer workers than its role
    list names (an allocation smaller than asked); None otherwise (`tf-slurm status` and the report)."""
    began, planned = _int(run.get("workers_at_start")), _int(run.get("workers_planned"))
    return (began, planned) if began is not None and planned is not None and began < planned else None


def _batch_marks(runs: _Runs, with_ends: bool) -> Tuple[List[Mark], List[Boundary]]:
    """Requeues, relaunches and run starts from batch.json (its history and the current run)."""
    marks: List[Mark] = []
    lines: List[Boundary] = []
    for r in runs.runs:
        run, started, ended = r["run"], _num(r.get("started_at")), _num(r.get("ended_at"))
        decision = _text(r.get("decision")) or "?"
        short = started_short(r)
        short_words = f" with {short[0]} of {short[1]} workers" if short else ""
        if started is not None and (run > 1 or short):
            lines.append(Boundary("run", started, f"run {run} started{short_words}"))
        for x in r.get("relaunches") or []:
            at = _num(x.get("at")) if isinstance(x, Mapping) else None
            if at is None:
                continue
            text = (f"run {run}: lost {_nodes(x.get('lost'))}; relaunched on {_nodes(x.get('nodes'))}"
                    + (f" ({_nodes(x.get('spares'))} in place)" if x.get("spares") else "")
                    + (f", {x['workers']} of {r.get('workers_planned', '?')} workers"
                       if _int(x.get("workers")) is not None else "")
                    + (f", from checkpoint step {x['checkpoint']}" if _int(x.get("checkpoint")) is not None else ""))
            marks.append(Mark("relaunch", at, JOB_LANE, text))
            lines.append(Boundary("relaunch", at, text))
        if ended is not None and r.get("state") == "requeued":
            marks.append(Mark("requeue", ended, JOB_LANE, f"run {run} requeued: {decision}"))
            lines.append(Boundary("requeue", ended, f"run {run} requeued: {decision}"))
        elif ended is not None and r.get("state") == "ended" and with_ends:
            marks.append(Mark("end", ended, JOB_LANE, f"run {run} ended: {decision}"))
    return marks, lines


def _nodes(x: Any) -> str:
    names = [n[:MAX_TEXT] for n in x if isinstance(n, str)][:64] if isinstance(x, list) else []
    return ",".join(names) or "?"


def summary(job: str, status: Optional[Mapping[str, Any]], runs: _Runs, marks: Sequence[Mark], tasks: int,
            series: Sequence[Series], target: Optional[int], slurm_state: Optional[str] = None) -> str:
    """The job in one line: its state (when Slurm was asked: plan.job_state's words), its step, how it
    stands, and what happened to it."""
    head = f"job {job}" + (f" {slurm_state[:2 * MAX_TEXT]}" if slurm_state else "")
    if status:
        head += f", step {_text(status.get('step')) or '?'}: {_text(status.get('strategy')) or '?'}, "
        state = _text(status.get("state")) or "?"
        head += state + ("" if _int(status.get("status")) is None else f" with status {status['status']}")
    count = {k: sum(1 for m in marks if m.kind == k) for k in KINDS}
    n_runs = len(runs.runs) or max(1, sum(1 for m in marks if m.kind == "start" and m.lane == JOB_LANE))
    parts = [f"{n_runs} run(s)", f"{count['requeue']} requeue(s)", f"{count['relaunch']} relaunch(es)",
             f"{count['restart']} restart(s)", f"{count['hang']} hang(s)", f"{count['lost']} lost", f"{tasks} tasks"]
    steps = [s.points[-1][1] for s in series]
    if steps:
        parts.append(f"step {max(steps)}" + (f" of {target}" if target is not None else ""))
    return head + "; " + ", ".join(parts)


def build(job: str, status: Optional[Mapping[str, Any]], batch: Optional[Mapping[str, Any]],
          timeline: Optional[Timeline], notes: Iterable[str] = (), slurm: Optional[Mapping[str, str]] = None) -> Report:
    """The report model of a job from what its folder holds (any of the three may be missing), and
    Slurm's view of it (`scontrol show job`'s fields; None: not asked, or Slurm does not know it)."""
    status = status if isinstance(status, Mapping) else None
    batch = batch if isinstance(batch, Mapping) else None
    rows = [r for r in task_rows(status) if isinstance(r, Mapping) and _text(r.get("role")) and
            _int(r.get("index")) is not None] if status else []
    rows.sort(key=lambda r: _int(r.get("rank")) or 0)
    runs = _Runs(batch)
    b = _Builder(rows, runs)
    events = timeline.events if timeline else ()
    if events:
        for e in events:
            b.feed(e)
        running = status is not None and status.get("state") == "running" and events[-1].event != "step_end"
        b.finish(_num(status.get("updated_at")) if status is not None else events[-1].at, running)
    elif status:
        _from_status(b, status, rows)
    marks, lines = _batch_marks(runs, with_ends=not events)
    series = step_series.series(status or {}, b.lane_of, runs.part, MAX_LANES)
    target = step_series.target(status or {}, batch)
    lanes = [Lane(JOB_LANE, "job")] + sorted(b.lanes.values(), key=lambda x: (x.rank is None, x.rank or 0, x.key))
    notes = list(notes)
    if len(lanes) > MAX_LANES + 1:
        notes.append(f"{len(lanes) - 1 - MAX_LANES} more tasks are not drawn (the first {MAX_LANES} are)")
        lanes = lanes[:MAX_LANES + 1]
    if not events:
        notes.append("no timeline.jsonl: the tasks' times are this run's from status.json and batch.json "
                     "(restarts and hangs have no times)")
    all_marks = sorted(b.marks + marks, key=lambda m: m.at)
    times = [t for s in b.spans for t in (s.start, s.end)] + [m.at for m in all_marks] + [x.at for x in lines]
    times += [p[0] for s in series for p in s.points]
    state = job_state.state_text(slurm, batch, status) if slurm else None
    return Report(job, summary(job, status, runs, all_marks, len(b.lanes), series, target, state), tuple(lanes),
                  tuple(b.spans), tuple(all_marks), tuple(sorted(lines, key=lambda x: x.at)), tuple(series),
                  min(times) if times else None, max(times) if times else None, target, tuple(notes))
