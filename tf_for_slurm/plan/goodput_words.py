"""A job's goodput account in words: the status line, the CSV row, the notes (how each figure was
measured, which are estimates, what was skipped) and the advice (one line per cause that dominates).
Pure: plan.goodput's figures in, text out.
"""

from __future__ import annotations

from typing import List, Mapping, Tuple

from tf_for_slurm.plan.goodput_figures import PARTS, Account
from tf_for_slurm.plan.goodput_read import JobRead
from tf_for_slurm.plan.train_progress import MAX_HISTORY

ADVICE_SAVES, ADVICE_START_UP = 0.10, 0.25  # saves / training; start-up / a run's time
ADVICE_REDONE = ADVICE_FAULTS = 0.10  # redone, faults / node_s
SHOWN = 0.005  # status_line names a part above this share of node_s


def wall(seconds: float) -> str:
    """'1.1 h', '12 min', '40 s'."""
    if seconds >= 3570:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.0f} min" if seconds >= 59.5 else f"{seconds:.0f} s"


def status_line(acc: Account) -> str:
    """'goodput 81% of 6.2 node-hours (start-up 4%, saves 2%, redone 9%, faults 3%, queue between runs 1.1 h)':
    the parts over SHOWN of node_s, the queue between runs in wall time."""
    node_s = acc.node_s
    size = f"{node_s / 3600:.1f} node-hours" if node_s >= 3570 else f"{node_s / 60:.0f} node-minutes"
    head = f"goodput {'unknown' if acc.goodput is None else f'{acc.goodput:.0%}'} of {size}"
    said = [f"{part.replace('start_', 'start-').replace('_', ' ')} {acc.node_parts[part] / node_s:.0%}"
            for part in PARTS[1:] if part != "training" and node_s > 0 and acc.node_parts[part] / node_s > SHOWN]
    said += [f"queue between runs {wall(acc.queued_between_s)}"] if acc.queued_between_s >= 0.5 else []
    return head + (f" ({', '.join(said)})" if said else "")


def csv_row(acc: Account) -> List[str]:
    """One row under CSV_FIELDS."""
    return [acc.job, f"{acc.total_s:.1f}", f"{acc.node_s:.1f}", "" if acc.goodput is None else f"{acc.goodput:.4f}",
            *(f"{acc.parts[part]:.1f}" for part in PARTS)]


def notes(read: JobRead, saves_taken: float, queued_before: float, waiting: float) -> Tuple[str, ...]:
    """How each figure was measured, which are estimates, what was skipped.  saves_taken: the save seconds the
    account holds; queued_before: the queue before run 1 (0: unknown); waiting: the queue since a requeue."""
    stall, requeue_tail = (sum(step.seconds[bucket] for step in read.steps) for bucket in ("stall", "requeue_tail"))
    recorded = read.save_s or 0.0
    said = [
        (queued_before <= 0, "queued: the wait before run 1 is unknown (no Slurm submit time)"),
        (not all(run.start_is_slurms for run in read.runs[1:]),
         "queued: to batch-step's start where Slurm's is unknown"),
        (waiting > 0, f"queued: {wall(waiting)} since run {read.runs[-1].number} was requeued, up to now"),
        (True, "redone, training, stalls: from the step curve; faults: from each restart, failed exit or relaunch, "
         "and from the lead's last rise before each hang or lost task, to training again (a relaunched step's "
         "start-up too)"),
        (read.longest_history >= MAX_HISTORY // 2 or read.stride > 1, "thinned history: where points are sparse, "
         "an estimate (" + ("every point of each task merged" if read.stride == 1 else
                            f"every {_ordinal(read.stride)} point of each task merged, and its first and last") + ")"),
        (read.save_s is None, "saves: not recorded (older job folder)"),
        (recorded > saves_taken + 0.05, f"saves: {recorded:.1f} s recorded, {saves_taken:.1f} s in"),
        (any(not step.lead for step in read.steps), "a step that never progressed: start-up (or faults)"),
        (any(not step.nodes for step in read.steps), "nodes: of status.json's tasks where the timeline has none"),
        (stall + requeue_tail > 0.05, f"other: {wall(stall)} stalls without a fault (evaluation, slow steps), "
         f"{wall(requeue_tail)} checkpoint and requeue at the time limit"),
        (any(read.skipped.values()),
         "skipped: " + ", ".join(f"{count} {what}" for what, count in read.skipped.items() if count))]
    return tuple(text for show, text in said if show)


def advice(read: JobRead, parts: Mapping[str, float], share: Mapping[str, float], between: float) -> Tuple[str, ...]:
    """One line per cause that dominates, from the figures (parts: wall seconds; share: node_parts / node_s;
    between: the queue between runs and since a requeue)."""
    out = []
    training, saves, count = parts["training"], parts["saves"], read.save_count
    if training > 0 and saves / training > ADVICE_SAVES:
        how = (f"a checkpoint every {wall((training + saves) / count)} at {saves / count:.1f} s a save" if count
               else "fewer")
        out.append(f"saves took {saves / training:.0%} of training: {how}")
    if share["redone"] > ADVICE_REDONE:
        out.append(f"redone steps {share['redone']:.0%}: the checkpoint interval is longer than the time "
                   "between faults (or requeues)")
    out += _start_up_advice(read)
    if share["faults"] > ADVICE_FAULTS:
        kinds = {**{kind: sum(e.event == kind for e in read.events) for kind in ("restart", "hang", "lost")},
                 "relaunch": sum(len(run.relaunches) for run in read.runs)}
        said = ", ".join(f"{n} {kind}" for kind, n in kinds.items() if n) or "a failed step"
        out.append(f"faults took {share['faults']:.0%}: {said} (tf-slurm report shows when)")
    if between > 0 and between > training:
        out.append(f"queue between runs {wall(between)}: more than the training time ({wall(training)}); "
                   "a longer time limit means fewer requeues")
    return tuple(out)


def _ordinal(n: int) -> str:
    """'2nd', '3rd', '11th', '16th', '21st'."""
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def _start_up_advice(read: JobRead) -> List[str]:
    """The run whose start-up took the largest share of it, when over ADVICE_START_UP."""
    spans = [(sum(step.seconds["start_up"] for step in read.steps if step.run is run), run.end - run.start)
             for run in read.runs]
    start_up, length = max(spans, key=lambda span: span[0] / span[1] if span[1] > 0 else 0.0)
    if length <= 0 or start_up / length <= ADVICE_START_UP:
        return []
    run = wall(length).replace(" h", "-hour").replace(" min", "-minute").replace(" s", "-second")
    fix = "a longer time limit would pay" if len(read.runs) > 1 else "longer runs would pay"
    return [f"start-up took {start_up / length:.0%} of a {run} run: {fix}"]


__all__ = ["ADVICE_FAULTS", "ADVICE_REDONE", "ADVICE_SAVES", "ADVICE_START_UP", "SHOWN", "advice", "csv_row",
           "notes", "status_line", "wall"]
