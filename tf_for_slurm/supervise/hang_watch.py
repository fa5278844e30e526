"""The hub's hang rule, carried out: a task whose training stopped moving is ended, its stacks in its log.

Why: the most reported failure of distributed TensorFlow is a hang, every process alive and no step
made until the time limit.  The rule is pure (plan.train_progress.hung: no progress for max(factor x
median step time, floor) seconds, once progress was seen); which hung tasks are ended is
plan.restart_policy.hang_victims; the restart policy then decides what starts again, within its
budget.  Once a task is found hung its clock starts again; once it restarts it is judged again only
after it made progress (as a task that never reported progress is never judged).  A task's command
gets SIGQUIT first (the shim's faulthandler writes its Python stacks), then SIGKILL
(task_command.TaskCommand.hang_kill).
"""

from __future__ import annotations

import logging
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from tf_for_slurm.plan.restart_policy import GROUP, hang_victims, restart_scope
from tf_for_slurm.plan.step_status import task_state
from tf_for_slurm.plan.step_timeline import MAX_HANGS
from tf_for_slurm.plan.step_watch import StepWatch
from tf_for_slurm.plan.train_progress import Track, hung
from tf_for_slurm.supervise.child_process import LOGGER

log = logging.getLogger(LOGGER)

LOOK_EVERY = (1.0, 5.0)  # seconds between looks: a twelfth of the floor, within these (60 s: 5 s)


class HangWatch:
    """Looks at the tracks every LOOK_EVERY (`look`); the hung tasks now, once per hang."""

    def __init__(self, floor: float, factor: float, tasks: Sequence[Any], strategy: str, chief: int,
                 names: Mapping[int, str]):
        self.floor, self.factor, self.strategy, self.chief, self.names = floor, factor, strategy, chief, names
        self.role = {t.rank: t.role for t in tasks}
        self.since: Dict[int, float] = {}  # rank -> the wall time its clock (re)started
        self._next = 0.0
        self._start: Optional[float] = None  # the wall time of the first look: progress before it is an earlier run's
        self.found = 0  # hangs found (for the summary and tests)
        self.record: List[Dict[str, Any]] = []  # the last MAX_HANGS hung tasks: rank, wall time, detail (status.json)

    def look(self, tracks: Mapping[int, Track], watch: StepWatch, wall: float,
             mono: float) -> List[Tuple[int, bool]]:
        """The hung tasks found now, each with whether to end it (the victims) or only have it write
        its stacks (a hung task its group's restart ends: every stuck task's stacks are in its log)."""
        if self.floor <= 0 or mono < self._next or not tracks or watch.decided:
            return []
        self._next = mono + min(max(self.floor / 12, LOOK_EVERY[0]), LOOK_EVERY[1])
        start = self._start = self._start if self._start is not None else wall - (mono - watch.start)
        # a task (re)started is judged once it made progress since (its start-up is not a hang; the
        # tracks of an earlier run of the job, restored from its status file, are not this run's)
        again = {rank: wall - (mono - t) for rank, t in watch.running_again.items()}
        running = [r for r, track in tracks.items() if task_state(watch, r) == "running"
                   and (track.last_progress_at or 0.0) > again.get(r, start)]
        hang = hung(tracks, wall, floor=self.floor, factor=self.factor, running=running, since=self.since)
        if hang is None:
            return []
        self.found += 1
        for rank in hang.ranks:
            self.since[rank] = wall
            self.record.append({"rank": rank, "at": round(wall, 3), "detail": (
                f"no training step for {round(hang.silent_for)} s at step {hang.last_step.get(rank)}")})
        del self.record[:-MAX_HANGS]
        victims = hang_victims(self.strategy, [(r, self.role.get(r, "worker"), r == self.chief) for r in hang.ranks])
        if restart_scope(self.strategy, self.role.get(victims[0], "worker"), victims[0] == self.chief)[0] == GROUP:
            for rank in running:  # the group's restart is under way: a task found a second later is the same hang
                self.since[rank] = wall
        log.error("hung: %s; ending %s (the restart policy decides what starts again); the Python stacks of "
                  "every hung task go to its log", hang.line(self.names),
                  ", ".join(self.names.get(r, str(r)) for r in victims[:8]))
        return [(r, True) for r in victims] + [(r, False) for r in hang.ranks if r not in victims]
