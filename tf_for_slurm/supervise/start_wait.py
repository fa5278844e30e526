"""The hub's start-up rule, carried out: tasks that wait for their peers before any step are named, then ended.

Why: a run that never starts training burns its allocation on every node, every process alive
(plan.start_watch says why the hang rule cannot see it).  Past TF_SLURM_START_WAIT the hub writes one
line naming the tasks everyone waits for, their phase, node and the line of the user's code they are
at, and has their Python stacks written to their logs (SIGQUIT, as for a hang); the line is what
`tf-slurm status` shows from then on.  Past TF_SLURM_START_FAULT it is a fault: the tasks waited for
(or, when every task is at the meeting point, the waiters) are ended as hung tasks are
(plan.restart_policy.hang_victims), the restart policy decides what starts again, within its budget,
and the waits are counted again from then.  Any training step ends the rule for the run.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from tf_for_slurm.host import settings
from tf_for_slurm.plan.restart_policy import hang_victims
from tf_for_slurm.plan.start_phase import Phase
from tf_for_slurm.plan.start_watch import StartWait, TaskStart, start_wait, verdict
from tf_for_slurm.plan.step_status import task_state
from tf_for_slurm.plan.step_timeline import MAX_HANGS
from tf_for_slurm.plan.step_watch import StepWatch
from tf_for_slurm.plan.train_progress import Track
from tf_for_slurm.supervise.child_process import LOGGER

log = logging.getLogger(LOGGER)

LOOK_EVERY = 1.0  # seconds between looks, one more a 4,000 tasks (16,000: a look of 27 ms every 5 s)
PHASES_UP_TO = 256  # tasks: a larger step's status file keeps the laggards' phases and the counts only


class StartWaitWatch:
    """Looks at the phases every LOOK_EVERY (`look`); the tasks to end or to have write their stacks."""

    def __init__(self, name_after: float, fault_after: float, tasks: Sequence[Any], strategy: str, chief: int,
                 names: Mapping[int, str], record: Optional[List[Dict[str, Any]]] = None):
        self.name_after, self.fault_after = name_after, fault_after
        self.strategy, self.chief, self.names = strategy, chief, names
        self.role = {t.rank: t.role for t in tasks}
        self.ranks = [t.rank for t in tasks]
        self._next = 0.0
        self._start: Optional[float] = None  # wall time of the first look's step start
        self.trained = False  # a step was made in this run: the rule is over
        self.floor = 0.0  # waits count from here (the last fault)
        self.named: Optional[float] = None  # wall time the current wait was named
        self.line: Optional[str] = None  # the named line (status.json's `start`), until a step is made
        self.faults = 0
        self.victims: List[int] = []  # the ranks the last fault ended
        self._ending: Dict[int, Optional[float]] = {}  # ... and their runs' starts, until they are gone
        self.wait: Optional[StartWait] = None
        self._tasks: List[TaskStart] = []
        # where a named wait and a fault are recorded: the hub's hangs (status.json's `hangs`, the timeline's
        # `hang` events), with the line as their detail
        self.record: List[Dict[str, Any]] = [] if record is None else record

    def look(self, phases: Mapping[int, Phase], tracks: Mapping[int, Track], watch: StepWatch, wall: float,
             mono: float) -> List[Tuple[int, bool]]:
        """The tasks to act on now: (rank, end it) — end: a fault's victim; else only its stacks."""
        if self.trained or (self.name_after <= 0 and self.fault_after <= 0) or watch.decided:
            return []
        # a step made: the rule is over at once, not at the next look (status.json's `start` would
        # outlive the first step of a step that ends within one look)
        start = self._start = self._start if self._start is not None else wall - (mono - watch.start)
        again = {rank: wall - (mono - t) for rank, t in watch.running_again.items()}
        if any((track.last_progress_at or 0.0) > again.get(r, start) for r, track in tracks.items()):
            self.trained, self.line, self.wait = True, None, None
            return []
        if mono < self._next:
            return []
        self._next = mono + min(5.0, LOOK_EVERY + len(self.ranks) / 4000)
        running = [r for r in self.ranks if task_state(watch, r) == "running"]
        if any(r in running and again.get(r) == t for r, t in self._ending.items()):
            return []  # a fault's victim not yet gone: the wait it caused is not a new one
        self._ending = {}
        self._tasks = [TaskStart(rank=r, name=self.names.get(r, str(r)), phase=phases.get(r),
                                 started=again.get(r, start)) for r in running]
        wait = self.wait = start_wait(self._tasks, wall, self.floor)
        what = verdict(wait, self.name_after, self.fault_after)
        if wait is None or not what:
            if wait is None:
                self.named = self.line = None
            return []
        line = wait.line(self._tasks)
        if what == "name":
            if self.named is not None:
                self.line = line  # kept current (the wait grows), said once
                return []
            self.named, self.line = wall, line
            self._note(wait, wall, f"start-up: {line}")
            log.error("start-up: %s; their Python stacks go to their logs (%s)", line, settings.START_WAIT)
            return [(r, False) for r in (wait.laggards or wait.waiters)]
        self.faults += 1
        culprits = list(wait.laggards or wait.waiters)
        victims = hang_victims(self.strategy, [(r, self.role.get(r, "worker"), r == self.chief) for r in culprits])
        self.victims, self.line = victims, line
        self._ending = {r: again.get(r) for r in victims}
        self.floor, self.named = wall, None
        self._note(wait, wall, f"start-up fault: {line}")
        log.error("start-up fault: %s; ending %s (%s; the restart policy decides what starts again)", line,
                  ", ".join(self.names.get(r, str(r)) for r in victims[:8]), settings.START_FAULT)
        return [(r, True) for r in victims] + [(r, False) for r in culprits if r not in victims]

    def _note(self, wait: StartWait, wall: float, detail: str) -> None:
        self.record.append({"rank": (wait.laggards or wait.waiters)[0], "at": round(wall, 3), "detail": detail})
        del self.record[:-MAX_HANGS]

    def to_json(self) -> Optional[Dict[str, Any]]:
        """status.json's `start`: each running task's phase while no step was made, and the named wait."""
        if self.trained or not any(t.phase is not None for t in self._tasks):  # no shim said a word: not Python
            return None
        shown = self._tasks
        if len(shown) > PHASES_UP_TO:  # the file stays small at thousands of tasks: who lags, and how many where
            lagging = set(self.wait.laggards[:100]) if self.wait is not None else set()
            shown = [t for t in shown if t.rank in lagging]
        out: Dict[str, Any] = {"phases": {str(t.rank): _phase_json(t) for t in shown}}
        if len(self._tasks) > PHASES_UP_TO:
            counts: Dict[str, int] = {}
            for t in self._tasks:
                name = "starting" if t.phase is None else t.phase.phase
                counts[name] = counts.get(name, 0) + 1
            out["counts"] = counts
        if self.wait is not None:
            out.update(since=round(self.wait.since, 3), waited=round(self.wait.waited, 1),
                       laggards=list(self.wait.laggards[:100]))
        if self.line is not None:
            out["line"] = self.line
        if self.faults:
            out["faults"] = self.faults
        return out


def _phase_json(task: TaskStart) -> Dict[str, Any]:
    phase = task.phase
    if phase is None:
        return {"phase": "starting", "since": round(task.started, 3)}
    out: Dict[str, Any] = {"phase": phase.phase, "since": round(phase.since, 3)}
    if phase.where:
        out["where"] = phase.where
    if phase.detail:
        out["detail"] = phase.detail
    return out
