"""What the goodput account (plan.goodput) reads of a job: status.json, batch.json and the timeline into
runs, steps and each step's lead.

Why apart: here another version's file, a cut write or a huge list is met, so here every value is
checked and bounded (a wrong type, a non-finite number, a time going backwards, a list over its
bound is skipped and counted in `JobRead.skipped`, never raised); the rules in plan.goodput see good
values only.  What is read:
- runs: batch.json's in run order (its `history`, then the current run), each starting no earlier
  than the one before ended and each with an end; without them, one run from status.json;
- steps: each run cut at its relaunched steps' starts (the timeline's step_start events, else
  batch.json's relaunch times); a step's nodes: its task events' (else status.json's tasks', the
  step before's, 1);
- the lead: every task's history points merged (at most MAX_MERGED a job, evenly over the tasks),
  the furthest step at each time, begun again where a task's step went back; each step keeps the
  points where its lead changed.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass, field
from itertools import islice
from typing import Any, Counter, Dict, List, Mapping, Optional, Set, Tuple

from tf_for_slurm.plan.goodput_figures import PARTS
from tf_for_slurm.plan.job_report import Timeline
from tf_for_slurm.plan.train_progress import MAX_HISTORY, MAX_STEP

MAX_POINTS = 4 * MAX_HISTORY  # a task's history points read (a longer list is thinned evenly, noted)
MAX_MERGED = 2048  # history points merged a job, evenly over its tasks (each one's first and last kept)
MAX_TASKS, MAX_RUNS, MAX_RELAUNCHES = 8192, 128, 256  # progress tracks, batch.json runs, a run's relaunches read
SLACK_S = 5.0  # the nodes' and Slurm's clocks agree within this
# A step's seconds: the parts a step can hold (not queued, not other), and two that end in `other`: a stall
# no fault explains ("stall": evaluation, slow steps; saves come out of it first) and a requeued run's time
# after its last point ("requeue_tail": the checkpoint and requeue at the time limit).
STEP_BUCKETS = PARTS[1:-1] + ("stall", "requeue_tail")
Point = Tuple[float, int]  # (unix time, training step)


@dataclass
class Run:
    number: int
    start: float
    end: float  # 0: not recorded
    submit: Optional[float] = None  # Slurm's submit time
    state: str = "ended"  # "running", "requeued" or "ended"
    status: Optional[int] = None
    relaunches: Tuple[float, ...] = ()  # when batch-step relaunched its step
    start_is_slurms: bool = False  # its start is Slurm's, not batch-step's
    resumed_at: Optional[int] = None  # the checkpoint's step it started from (batch.json's checkpoint_at_start)
    furthest: Optional[int] = None  # the furthest step it reached (batch.json's step: exact, the history is thinned)


@dataclass
class Step:
    """A run's step (the run cut at its relaunches): its time, nodes, lead and seconds by bucket."""

    run: Run
    start: float
    end: float
    relaunched: bool
    last_in_run: bool
    nodes: Set[str] = field(default_factory=set)
    node_count: int = 0
    lead: List[Point] = field(default_factory=list)  # where the lead changed: a rise, or a start again lower
    seconds: Dict[str, float] = field(default_factory=lambda: dict.fromkeys(STEP_BUCKETS, 0.0))


def positive(value: Any, or_zero: bool = False) -> Optional[float]:
    """A finite number above 0 (or 0 with or_zero) as a float, else None (a bool, a string, a huge int too)."""
    fine = math.isfinite(value) if type(value) is float else type(value) is int and value < 1e18
    return float(value) if fine and (value > 0 or or_zero and value == 0) else None


def _points(raw: List[Any], skipped: Counter[str]) -> Tuple[Tuple[Any, ...], ...]:
    """[[t, step], ...] as (times, steps): checked at C speed when all is well, point by point when not."""
    try:
        times, steps = zip(*raw)
        if (set(map(type, times)) <= {int, float} and set(map(type, steps)) == {int} and math.isfinite(sum(times))
                and min(times) > 0 and min(steps) >= 0 and max(steps) < MAX_STEP):
            return times, steps
    except (TypeError, ValueError, OverflowError):
        pass
    good = [(float(p[0]), p[1]) for p in raw if isinstance(p, (list, tuple)) and len(p) == 2
            and positive(p[0]) is not None and type(p[1]) is int and 0 <= p[1] < MAX_STEP]
    skipped["history points (not [time, step])"] += len(raw) - len(good)
    return tuple(zip(*good)) if good else ((), ())


class JobRead:
    """One job as the account reads it: its events, its merged history points, its runs and steps."""

    def __init__(self, status: Mapping[str, Any], timeline: Optional[Timeline]) -> None:
        """The timeline's events; every task's history points, a bounded share of each, in one pair of lists."""
        self.skipped: Counter[str] = Counter()
        self.status = status
        self.runs: List[Run] = []
        self.steps: List[Step] = []
        events = list(timeline.events) if isinstance(timeline, Timeline) else []  # parse_timeline's: in time order
        at = [positive(getattr(e, "at", None)) or 0.0 for e in events]
        self.events = [e for i, e in enumerate(events) if at[i] and (not i or at[i] >= at[i - 1])]
        self.skipped["events out of order"] += len(events) - len(self.events)
        self.point_times: List[float] = []
        self.point_steps: List[int] = []
        self.went_back: List[float] = []  # where a task's step went back: the lead begins again
        progress = status.get("progress")
        items = list(islice(progress.values() if isinstance(progress, Mapping) else (), MAX_TASKS))
        tracks = [t for t in items if isinstance(t, Mapping)]
        self.skipped["progress tracks (not a dict)"] += len(items) - len(tracks)
        histories = [history if isinstance(history := t.get("history"), list) else [] for t in tracks]
        # every stride-th point of each task (from a different offset each) keeps the merge within MAX_MERGED
        self.stride = max(1, -(-sum(min(len(history), MAX_POINTS) for history in histories) // MAX_MERGED))
        self.longest_history = max(map(len, histories), default=0)
        self.tasks_reporting = sum(map(bool, histories))
        for task, history in enumerate(histories):
            self._merge(history, task)
        self.save_s = max((seconds for t in tracks if (seconds := positive(t.get("save_s"), or_zero=True))
                           is not None), default=None)  # each task's save_s sums the job: the most of any task
        self.save_count = max((count for t in tracks if type(count := t.get("saves")) is int and count >= 0),
                              default=None)
        # the first and last time the timeline and the history points show (inf and 0.0: none)
        times = [e.at for e in self.events[:1] + self.events[-1:]]
        times += [min(self.point_times), max(self.point_times)] if self.point_times else []
        self.first_seen, self.last_seen = min(times, default=math.inf), max(times, default=0.0)

    def _merge(self, history: List[Any], task: int) -> None:
        """One task's history points into the merged lists (thinned to MAX_POINTS, then every stride-th)."""
        if len(history) > MAX_POINTS:
            self.skipped[f"history points over {MAX_POINTS} a task (thinned)"] += len(history) - MAX_POINTS
            history = history[::-(-len(history) // MAX_POINTS)][:MAX_POINTS - 1] + history[-1:]
        stride = self.stride
        sample = [history[0], *history[task % stride::stride], history[-1]] if stride > 1 and history else history
        times, steps = _points(sample, self.skipped)
        if list(times) != sorted(times):
            self.skipped["histories out of time order (sorted)"] += 1
            times, steps = zip(*sorted(zip(times, steps)))
        if list(steps) != sorted(steps):
            self.went_back.extend(times[i] for i in range(1, len(steps)) if steps[i] < steps[i - 1])
        self.point_times.extend(times)
        self.point_steps.extend(steps)

    def read_runs(self, batch: Any, now: float) -> None:
        """batch.json's runs in order (else one from status.json), each after the one before, each with an end."""
        history = batch.get("history") if isinstance(batch, Mapping) else None
        found: Dict[int, Run] = {}
        for record in [*(history[-MAX_RUNS:] if isinstance(history, list) else []), batch]:
            if (run := _run(record if isinstance(record, Mapping) else {})) is not None:
                found[run.number] = run
            else:
                self.skipped["runs (no run number or start)"] += isinstance(batch, Mapping)
        runs, status, last_seen = sorted(found.values(), key=lambda run: run.number), self.status, self.last_seen
        start = min(positive(status.get("started_at")) or math.inf, self.first_seen)
        if not runs and start < math.inf:
            last = max(positive(status.get("updated_at")) or 0.0, positive(status.get("decided_at")) or 0.0, last_seen)
            exit_status = status.get("status")
            runs.append(Run(1, start, last, state="running" if status.get("state") == "running" else "ended",
                            status=exit_status if type(exit_status) is int else None))
        for i, run in enumerate(runs):
            if i and run.start < runs[i - 1].end:
                self.skipped["times going backwards"] += 1
                run.start = runs[i - 1].end
            if run.state == "running" and i == len(runs) - 1:
                run.end = max(now, last_seen)
            run.end = max(run.end or (runs[i + 1].start if i + 1 < len(runs) else last_seen), run.start)
        self.runs = runs

    def cut_steps(self) -> None:
        """Runs cut at relaunched steps; a step's nodes: its events', else status.json's, the step before's, 1."""
        run_starts = [run.start for run in self.runs]
        step_starts: List[List[float]] = [[] for _ in self.runs]  # each run's step_start events
        for e in self.events:
            if e.event == "step_start" and self.runs:
                step_starts[max(0, bisect_right(run_starts, e.at + SLACK_S) - 1)].append(e.at)
        for run, starts in zip(self.runs, step_starts):
            cuts = sorted(min(max(t, run.start), run.end) for t in (starts[1:] or run.relaunches))
            edges = [run.start, *cuts, run.end]
            self.steps += [Step(run, begin, end, relaunched=i > 0, last_in_run=i == len(edges) - 2)
                           for i, (begin, end) in enumerate(zip(edges, edges[1:]))]
        starts = [step.start for step in self.steps]
        for e in self.events:
            i = bisect_right(starts, e.at) - 1
            if e.event not in ("step_start", "step_end") and i >= 0 and e.at <= self.steps[i].end + SLACK_S and e.node:
                self.steps[i].nodes.add(e.node)
        rows, columns = self.status.get("tasks"), self.status.get("columns")
        node_column = columns.index("node") if isinstance(columns, list) and "node" in columns else 3
        status_nodes = {row[node_column] for row in islice(rows if isinstance(rows, list) else [], MAX_TASKS)
                        if isinstance(row, list) and len(row) > node_column and isinstance(row[node_column], str)}
        nodes_before = 0
        for step in self.steps:
            step.node_count = nodes_before = len(step.nodes) or len(status_nodes) or nodes_before or 1

    def merge_leads(self) -> None:
        """Each step's lead: the merged points where the furthest step changes (begun again where a task's step
        went back)."""
        went_back, steps, starts = sorted(self.went_back), self.steps, [step.start for step in self.steps]
        current, furthest, next_back = -1, -1, 0  # the step the lead is in, the lead's step, the next go-back
        for t, reached in sorted(zip(self.point_times, self.point_steps)):
            i = bisect_right(starts, t) - 1
            if i < 0 or t > steps[i].end:
                self.skipped["history points outside every run"] += 1
                continue
            if i != current or (next_back < len(went_back) and went_back[next_back] <= t):
                current, furthest, next_back = i, -1, bisect_right(went_back, t)  # the lead begins again
            if reached > furthest:
                furthest = reached
                lead = steps[i].lead
                if not lead or lead[-1][1] != reached:
                    lead.append((t, reached))


def _run(record: Mapping[str, Any]) -> Optional[Run]:
    """One batch.json run record (its history's or the current one) as a Run; None without a number or start."""
    number = record.get("run")
    our_start, slurm_start = positive(record.get("started_at")), positive(record.get("slurm_start"))
    if type(number) is not int or number < 1 or (our_start is None and slurm_start is None):
        return None
    marks = listed[:MAX_RELAUNCHES] if isinstance(listed := record.get("relaunches"), list) else []
    relaunches = tuple(sorted(at for mark in marks if isinstance(mark, Mapping) and (at := positive(mark.get("at")))))
    start = min(t for t in (our_start, slurm_start) if t is not None)
    state, status, resumed, furthest = (record.get(k) for k in ("state", "status", "checkpoint_at_start", "step"))
    return Run(number, start, positive(record.get("ended_at")) or 0.0, positive(record.get("slurm_submit")),
               str(state) if state in ("running", "requeued") else "ended", status if type(status) is int else None,
               relaunches, slurm_start == start,
               resumed if type(resumed) is int and 0 <= resumed < MAX_STEP else None,
               furthest if type(furthest) is int and 0 <= furthest < MAX_STEP else None)


__all__ = ["MAX_MERGED", "MAX_POINTS", "SLACK_S", "STEP_BUCKETS", "JobRead", "Point", "Run", "Step", "positive"]
