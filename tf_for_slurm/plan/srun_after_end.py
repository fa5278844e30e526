"""When srun outlives its step: the step's supervisor (the hub) has ended the step and said so in
its status file, but srun still waits.  Pure: status-file readings and the clock in, an action out.

Why: with `srun --no-kill` (the templates, so that a lost node does not end a step that can go on
without it, plan.lost_task) srun waits for the tasks of a lost node until Slurm marks the node down,
SlurmdTimeout later (300 s by default).  The hub knows the step's end long before: it writes
"ended" as it exits, once its tasks have ended, and srun returns 1-2 s later when every task could
report.  So srun gets LINGER s, then SIGTERM, then after KILL_AFTER more SIGKILL; batch-step then
takes the hub's status as the step's.  The same when the hub's own node was lost: it writes nothing,
but srun reports the other tasks' failure (they end when they lose the hub) and then waits for it:
LINGER s after that report, the first failing task's status is the step's.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from tf_for_slurm.plan.requeue import LOST_STATUS

LINGER = 10.0  # seconds srun may take to return after the hub wrote the step's end (it takes 1-2)
KILL_AFTER = 5.0  # seconds from the SIGTERM to the SIGKILL
# when the step ended because a task was lost (LOST_STATUS, or the hub counted one lost): srun waits
# for that task's node, which will not answer (after SIGTERM too: "Waiting up to 7 seconds for job
# step to finish", measured), and a relaunch waits for srun
LOST_LINGER, LOST_KILL_AFTER = 3.0, 2.0


def written_since(status: Optional[Mapping[str, Any]], started: float) -> bool:
    """Whether a reading of the hub's status file was written by this srun's step: updated at or after
    `started` (srun's start, wall clock); an older file is an earlier step's (the same job folder)."""
    updated = status.get("updated_at") if status else None
    return isinstance(updated, (int, float)) and updated >= started


class SrunAfterEnd:
    """Fed the hub's status file as it is read; says when to end srun ('TERM', then 'KILL')."""

    def __init__(self, started: float, linger: float = LINGER, kill_after: float = KILL_AFTER):
        self.started = started  # wall clock when srun started: an older file is an earlier run's
        self.linger, self.kill_after = linger, kill_after
        self.ended_at: Optional[float] = None  # when we first read the step's end (or srun's task failure)
        self.status: Optional[int] = None  # the step's status, as the hub wrote it
        self.lost = 0  # tasks the hub counted as lost
        self._sent: Optional[str] = None
        self._sent_at = 0.0

    def read(self, status: Optional[Mapping[str, Any]], now: float) -> None:
        """One reading of the status file (None: missing or unreadable)."""
        if self.status is not None or not status or status.get("state") != "ended":
            return
        code = status.get("status")
        if not written_since(status, self.started) or not isinstance(code, int):
            return
        self.status = code
        self.ended_at = now if self.ended_at is None else self.ended_at
        self.lost = len(status.get("lost") or [])
        if self.lost or code == LOST_STATUS:
            self._lost()

    def task_failed(self, now: float) -> None:
        """srun reported a task's failure (under exec, every task then ends within seconds).  The
        linger stays LINGER: a live hub ends its own command within its kill grace and then writes
        the step's end (and a lost task's shorter linger); a lost hub writes nothing."""
        if self.ended_at is None:
            self.ended_at = now

    def _lost(self) -> None:
        self.linger, self.kill_after = min(self.linger, LOST_LINGER), min(self.kill_after, LOST_KILL_AFTER)

    def action(self, now: float) -> Optional[str]:
        """'TERM' or 'KILL' when srun is to get that signal now (each once), else None."""
        if self.ended_at is None:
            return None
        if self._sent is None and now - self.ended_at >= self.linger:
            self._sent, self._sent_at = "TERM", now
            return "TERM"
        if self._sent == "TERM" and now - self._sent_at >= self.kill_after:
            self._sent = "KILL"
            return "KILL"
        return None

    @property
    def ended_srun(self) -> bool:
        """Whether srun was (or is being) ended here: its own status then says nothing of the step."""
        return self._sent is not None
