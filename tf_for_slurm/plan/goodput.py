"""Where every second of a job went: its goodput account, from status.json, batch.json and the timeline.

Why: the report shows what happened; this says what it cost, in parts that add up exactly (wall seconds
to total_s, node-seconds to node_s), so jobs compare and the costly cause shows.  Pure; what is read,
and how each value is checked (skipped and noted, never raised): plan.goodput_read; the account as a
value: plan.goodput_figures; in words: plan.goodput_words.  The rules:
- queued: Slurm's submit of the first run to its start (Slurm's start where batch.json has it, else
  batch-step's), each gap between runs, a requeued job's wait to `now`; no node-seconds.  A relaunch
  in a run is no queue: the run is cut at the relaunched step's start.
- a fault starts at a relaunch, a restart, a failed exit or step end (a crash: seen at once), and for
  a hang or a lost task at the lead's last rise before the event, in the event's step (the hub sees a
  hang only after the hang bound, 60 s by default, a lost node only after the heartbeat timeout: that
  silence is the fault's; no rise in that step before it: at the event).
- between two lead points the rise above `high` (the furthest step reached earlier in the job) is
  training, the rest redone; a rise STALL_FACTOR times slower than the median rate (and STALL_MIN_S
  longer) holds a stall first; no rise: all stall.  A stall is faults from the first fault since the
  last rise, else a stall without a fault.  redone_steps: each time the lead goes back or a step
  resumes below `high`, `high` minus the step it resumed from.
- start_up: a step's start to its first point; faults from a fault in it (all of a relaunched step's;
  all of a failed step that never progressed).  After a step's last point: faults from its first fault
  (all of it when relaunched away or the run failed); end_wait in a run that ended; in a requeued one
  the checkpoint and requeue at the time limit (other).
- saves: the most save_s of any task (it sums the job), out of the stalls without a fault first, then
  out of training.  other: the stalls left, the requeue tails, rounding; never negative.
  History is thinned (train_progress.MAX_HISTORY points a task): where sparse, an estimate (noted).
"""

from __future__ import annotations

import math
import statistics
from bisect import bisect_left, bisect_right
from types import MappingProxyType
from typing import Any, Dict, List, Mapping, Optional, Tuple

from tf_for_slurm.plan.goodput_figures import CSV_FIELDS, PARTS, Account, RunFigures
from tf_for_slurm.plan.goodput_read import JobRead, Point, Run, Step, positive
from tf_for_slurm.plan.goodput_words import advice, csv_row, notes, status_line
from tf_for_slurm.plan.job_report import Timeline
from tf_for_slurm.plan.requeue import CHECKPOINTED_STATUSES, EXIT_TERMINATED
from tf_for_slurm.plan.train_progress import MAX_STEP

STALL_FACTOR, STALL_MIN_S = 3.0, 10.0  # a rise this many times slower than the median rate, this much longer
OK_STATUSES = (0, EXIT_TERMINATED, -15) + CHECKPOINTED_STATUSES  # an exit or a step's end that is no fault
SILENT_FAULTS = ("hang", "lost")  # seen only after a silence: the fault starts at the lead's last rise before
ENDED_STATES = ("ended", "completed", "failed")  # status.json's states of a step that ended (without batch.json)
FAULT_EVENTS = ("restart", "exit", "step_end") + SILENT_FAULTS  # the timeline's events that may start a fault


def account(job: str, status: Optional[Mapping[str, Any]], batch: Optional[Mapping[str, Any]],
            timeline: Optional[Timeline], now: float) -> Account:
    """The job's account from its folder's files (any may be missing).  `now` ends a running job's time
    and a requeued job's queue; a finished job ends where account_end says whatever `now` says, so no
    queue grows after the end."""
    read = JobRead(status if isinstance(status, Mapping) else {}, timeline)
    now = account_end(status, batch, positive(now) or read.last_seen)
    read.read_runs(batch, now)
    if not read.runs:
        empty = MappingProxyType(dict.fromkeys(PARTS, 0.0))
        return Account(job, 0.0, 0.0, None, empty, empty, (), ("nothing to account: no run, step or progress",), ())
    read.cut_steps()
    read.merge_leads()
    rate, faults = _median_rate(read.steps), _fault_starts(read)
    high = redone_steps = 0  # the furthest step reached so far, the steps redone
    for step in read.steps:
        high, redone = _walk(step, rate, high, faults)
        redone_steps += redone
        if step.last_in_run and step.run.furthest is not None:  # exact where the thinned history is not
            high = max(high, step.run.furthest)
    saves_taken = _take_saves(read.steps, read.save_s or 0.0)
    first, last = read.runs[0], read.runs[-1]
    queued_before = first.start - first.submit if first.submit is not None and first.submit <= first.start else 0.0
    waiting = max(0.0, now - last.end) if last.state == "requeued" else 0.0
    between = sum(later.start - earlier.end for earlier, later in zip(read.runs, read.runs[1:])) + waiting
    total_s = last.end + waiting - (first.start - queued_before)
    wall = _close({"queued": queued_before + between,
                   **{part: sum(step.seconds[part] for step in read.steps) for part in PARTS[1:-1]}}, total_s)
    node_s = sum((step.end - step.start) * step.node_count for step in read.steps)
    node = _close({"queued": 0.0, **{part: sum(step.seconds[part] * step.node_count for step in read.steps)
                                     for part in PARTS[1:-1]}}, node_s)
    goodput = node["training"] / node_s if node_s > 0 and node["training"] > 0 else None
    share = {part: seconds / node_s if node_s > 0 else 0.0 for part, seconds in node.items()}
    runs = tuple(_run_figures(read, run) for run in read.runs if any(step.run is run for step in read.steps))
    return Account(job, total_s, node_s, goodput, MappingProxyType(wall), MappingProxyType(node), runs,
                   notes(read, saves_taken, queued_before, waiting), advice(read, wall, share, between), between,
                   redone_steps)


def account_end(status: Optional[Mapping[str, Any]], batch: Optional[Mapping[str, Any]], now: float) -> float:
    """Where a job's account ends: `now` while it runs or waits requeued (its queue grows), else the last
    end the folder knows (batch.json's ended_at, else status.json's updated_at), so an ended job's account
    stays as it was.  batch.json's state decides when batch-step ran the job (its status.json may be an
    ended run's while the job waits requeued); without it, status.json's."""
    state = batch.get("state") if isinstance(batch, Mapping) else None
    if state is None:
        state = status.get("state") if isinstance(status, Mapping) else None
        ended = isinstance(state, str) and state.lower() in ENDED_STATES
    else:
        ended = state == "ended"
    for source, key in ((batch, "ended_at"), (status, "updated_at")):
        at = positive(source.get(key)) if ended and isinstance(source, Mapping) else None
        if at is not None:
            return at
    return now


def _fault_starts(read: JobRead) -> List[float]:
    """When each fault started (the module's rule), in time order."""
    step_starts = [step.start for step in read.steps]
    starts = [t for run in read.runs for t in run.relaunches]
    for e in [e for e in read.events if e.event in FAULT_EVENTS]:
        if e.event == "hang" and (e.detail or "").startswith("start-up: "):
            continue  # a slow start named (supervise.start_wait), not ended: start-up still; its fault is one
        if e.event in SILENT_FAULTS:
            lead = read.steps[max(0, bisect_right(step_starts, e.at) - 1)].lead  # the event's step's
            before = bisect_right(lead, (e.at, MAX_STEP))  # its points up to the event
            starts.append(lead[before - 1][0] if before else e.at)
        elif e.event == "restart" or e.event in ("exit", "step_end") and e.status not in (None, *OK_STATUSES):
            starts.append(e.at)
    return sorted(starts)


def _median_rate(steps: List[Step]) -> float:
    """The median of the steps a second between consecutive lead points that rise (0.0: none)."""
    rates = [(after[1] - before[1]) / (after[0] - before[0]) for step in steps
             for before, after in zip(step.lead, step.lead[1:]) if after[0] > before[0] and after[1] > before[1]]
    return statistics.median(rates) if rates else 0.0


def _first_fault(faults: List[float], start: float, end: float) -> Optional[float]:
    """The first fault start in [start, end), else None."""
    i = bisect_left(faults, start)
    return faults[i] if i < len(faults) and faults[i] < end else None


def _walk(step: Step, rate: float, high: int, faults: List[float]) -> Tuple[int, int]:
    """A step's seconds into its buckets (the module's rules), given the median rate, the furthest step before
    it and the fault starts; the furthest step after it, and the steps it redid (each time it resumed below
    the furthest step before, the steps between)."""
    seconds, lead, run = step.seconds, step.lead, step.run
    resumed_at = run.resumed_at if not step.relaunched and step.start == run.start else None
    if resumed_at is not None and any(reached >= resumed_at for _, reached in lead):
        checkpoint = resumed_at
        # reports before the restore (a task's step below its run's checkpoint: TF1's chief says 0 first), also
        # after another task's restored report (the merged lead begins again there: not a going back)
        lead = step.lead = [point for point in lead if point[1] >= checkpoint]
    else:
        resumed_at = None  # not its checkpoint's (above every step it reported)
    failed = not step.last_in_run or run.status not in (None, *OK_STATUSES)
    first_point = lead[0][0] if lead else step.end
    fault = step.start if step.relaunched else _first_fault(faults, step.start, first_point)
    fault = step.start if fault is None and failed and not lead else fault
    seconds["start_up"] += (first_point if fault is None else fault) - step.start
    seconds["faults"] += 0.0 if fault is None else first_point - fault
    if not lead:
        return high, 0
    resumed = lead[0][1]  # the step it resumed from: its checkpoint's, when batch.json says (reports come later)
    if resumed_at is not None:
        resumed = resumed_at
    redone_steps = max(0, high - resumed)  # the step resumed below the furthest step before it
    high = max(high, lead[0][1])
    for before, after in zip(lead, lead[1:]):
        fault = fault if fault is not None else _first_fault(faults, before[0], after[0])
        _between(seconds, before, after, rate, high, fault)
        if after[1] < before[1]:  # the lead went back (a task's step did: a restart from a checkpoint)
            redone_steps += max(0, high - after[1])
        fault = None if after[1] > before[1] else fault  # a fault holds until the lead rises again
        high = max(high, after[1])
    last_point = lead[-1][0]
    fault = fault if fault is not None else _first_fault(faults, last_point, step.end)
    fault = last_point if fault is None and failed else fault
    fault_from = step.end if fault is None else max(last_point, fault)
    tail = ("stall" if fault is not None or run.state == "running" else
            "requeue_tail" if run.state == "requeued" else "end_wait")
    seconds[tail] += fault_from - last_point
    seconds["faults"] += step.end - fault_from
    return high, redone_steps


def _between(seconds: Dict[str, float], before: Point, after: Point, rate: float, high: int,
             fault: Optional[float]) -> None:
    """The time between two lead points: the work at its end (training above `high`, redone below) and a stall
    before it (faults from `fault` on, a stall without a fault before)."""
    span, rise = after[0] - before[0], after[1] - before[1]
    expected = rise / rate if rise > 0 and rate > 0 else span  # the rise's time at the median rate
    stalled = span - expected >= STALL_MIN_S and span >= STALL_FACTOR * expected
    work = 0.0 if rise <= 0 else expected if stalled else span
    new = max(0, after[1] - max(before[1], high)) / rise if rise > 0 else 0.0  # the share of the rise above high
    seconds["training"] += work * new
    seconds["redone"] += work * (1 - new)
    stall_end = before[0] + span - work
    fault_from = stall_end if fault is None else min(max(before[0], fault), stall_end)
    seconds["stall"] += fault_from - before[0]
    seconds["faults"] += stall_end - fault_from


def _take_saves(steps: List[Step], save_s: float) -> float:
    """The save seconds out of the stalls without a fault first, then out of training, each step its share;
    the seconds taken."""
    stall, training = (sum(step.seconds[bucket] for step in steps) for bucket in ("stall", "training"))
    from_stall = min(save_s, stall)
    from_training = min(save_s - from_stall, training)  # what the stalls could not hold
    for step in steps:
        of_stall = step.seconds["stall"] * from_stall / stall if stall else 0.0
        of_training = step.seconds["training"] * from_training / training if training else 0.0
        step.seconds.update(stall=step.seconds["stall"] - of_stall, training=step.seconds["training"] - of_training,
                            saves=of_stall + of_training)
    return from_stall + from_training


def _run_figures(read: JobRead, run: Run) -> RunFigures:
    """A run's figures: its most nodes, its training tasks (its events', else the tasks reporting), its steps."""
    steps = [step for step in read.steps if step.run is run]
    trainers = {(e.role, e.index) for e in read.events if run.start <= e.at <= run.end and e.index is not None
                and e.role not in ("ps", "evaluator")}
    points = [point for step in steps for point in step.lead]
    return RunFigures(run.number, run.start, run.end, max(step.node_count for step in steps),
                      len(trainers) or read.tasks_reporting, max((reached for _, reached in points), default=None),
                      run.resumed_at if run.resumed_at is not None and points and run.resumed_at <= points[0][1]
                      else points[0][1] if points else None)


def _close(parts: Dict[str, float], total: float) -> Dict[str, float]:
    """`other` gets what the named parts leave of the total (rounding too), never below 0."""
    rest, largest = total - math.fsum(parts.values()), max(parts, key=parts.__getitem__)
    parts[largest] = max(0.0, parts[largest] + min(0.0, rest))  # below 0 (rounding): off the largest part
    return {part: parts.get(part, max(0.0, rest)) for part in PARTS}


__all__ = ["CSV_FIELDS", "PARTS", "Account", "RunFigures", "account", "account_end", "csv_row", "status_line"]
