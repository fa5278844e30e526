"""This task's command under its supervisor: started, started again in place, killed when hung, cleaned up.

Why a class of its own: the hub (the chief's supervisor) and every spoke run a command the same
way; only their side of the conversation differs.  The signals the supervisor receives reach the
command that runs now (ForwardSignals follows each start), a command found hung
(plan.progress, through ProgressWatch) is killed, and whatever the command left in its process
group is reaped before it starts again and when the supervisor ends.
"""

from __future__ import annotations

import logging
import os
import signal
from typing import List, Mapping, Optional, Sequence

from tf_for_slurm.host import settings
from tf_for_slurm.plan.start_phase import Phase
from tf_for_slurm.plan.train_progress import Report
from tf_for_slurm.supervise.child_process import LOGGER, Child, ForwardSignals, Wake, start_command
from tf_for_slurm.supervise.phase_watch import PhaseWatch
from tf_for_slurm.supervise.progress_watch import ProgressWatch

log = logging.getLogger(LOGGER)

STACKS_GRACE = 1.0  # seconds between a hung command's SIGQUIT (its stacks) and its SIGKILL
NOT_RUN = 127  # the status of a command that could not be started (as a shell says)


class TaskCommand:
    """One task's command as a child process, started as often as the supervisor says."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str], wake: Wake, sigs: ForwardSignals,
                 progress_deadline: float, kill_grace: float, who: str = ""):
        self.argv, self.env, self.wake, self.sigs = argv, env, wake, sigs
        self.kill_grace = kill_grace
        self.who = who  # for the hang line: "" or " (the chief's)"
        self.progress = ProgressWatch(progress_deadline, env.get(settings.PROGRESS_FILE))
        self.phases = PhaseWatch(env.get(settings.PHASE_FILE))  # its start-up phase (plan.start_phase)
        self.child: Optional[Child] = None
        self.starts = 0  # how often the command was started (the first start included)
        self._last_looked = False  # its progress file read once more after it ended
        self._hang_kill_at = 0.0  # found hung: its SIGKILL is due then (0: not hung)
        self._hung = False  # found hung, its stacks written: ending it waits no longer than STACKS_GRACE

    def start(self, now: float) -> bool:
        """Start the command (again: once the last one's leftovers are gone); False if it cannot run."""
        if self.child is not None:
            self.child.reap_group()
        self.progress.started(now)  # before the command: a report it makes at once counts
        self.phases.started()
        self._last_looked, self._hang_kill_at, self._hung = False, 0.0, False
        self.sigs.detach()  # not the last command's group: a signal while this one starts waits for it
        self.child = start_command(self.argv, self.env, self.wake)
        self.sigs.attach(self.child)
        self.starts += 1
        return self.child is not None

    @property
    def status(self) -> Optional[int]:
        """The command's exit status once it ended (NOT_RUN when it could not start), else None."""
        if self.child is None:
            return NOT_RUN if self.starts else None
        return self.child.status

    @property
    def settled(self) -> Optional[int]:
        """The exit status once the command's last report was taken too (take_report), else None: what a
        supervisor reports, so that a task's final progress reaches the hub before its exit."""
        return self.status if self._last_looked or (self.child is None and self.starts) else None

    @property
    def running(self) -> bool:
        return self.child is not None and self.child.status is None

    @property
    def ending(self) -> bool:
        """The command was told to end (SIGTERM sent)."""
        return self.child is not None and self.child.ending

    def end(self) -> None:
        """SIGTERM, then SIGKILL after the kill grace (tick carries that out); a hung command's after
        STACKS_GRACE at most (hung, it would not end on SIGTERM: a multi-worker TensorFlow catches it)."""
        if self.child is not None:
            self.child.end(min(self.kill_grace, STACKS_GRACE) if self._hung else self.kill_grace)

    def tick(self, now: float) -> None:
        """The kill grace's SIGKILL when due; a hung command killed (SIGKILL)."""
        if self.child is None:
            return
        self.child.tick(now)
        if self._hang_kill_at and now >= self._hang_kill_at:
            self._hang_kill_at = 0.0
            if self.child.status is None:
                self.child.signal(signal.SIGKILL)
        if self.child.status is None:
            self.phases.check(now)
        hung = self.progress.check(self.child, now)
        if hung:
            log.error("%s%s: killing it (SIGKILL)", hung, self.who)
            self.child.signal(signal.SIGKILL)

    def hang_kill(self, now: float, kill: bool = True) -> None:
        """Hung (the hub's rule, supervise.hang_watch): SIGQUIT to the command (the shim's faulthandler
        writes its Python stacks to its log), SIGKILL to its group STACKS_GRACE later (tick); without
        `kill` the stacks only (a hung task whose group's restart ends it)."""
        if self.child is None or self.child.status is not None or self.child.ending or self._hang_kill_at:
            return
        try:
            os.kill(self.child.proc.pid, signal.SIGQUIT)
        except (ProcessLookupError, PermissionError):
            pass
        self._hang_kill_at, self._hung = (now + STACKS_GRACE if kill else 0.0), True

    def deadlines(self) -> List[float]:
        """When tick has something to do next."""
        out: List[float] = []
        if self.child is not None and self.child.kill_at is not None:
            out.append(self.child.kill_at)
        if self._hang_kill_at:
            out.append(self._hang_kill_at)
        if self.progress.watching and self.running:
            out.append(self.progress.next_look)
        if self.phases.path is not None and self.running:
            out.append(self.phases.next_look)
        return out

    def take_report(self) -> Optional[Report]:
        """The command's newest progress report (plan.train_progress), once; None when none is new.
        Once the command ended, its last words too (read at once, not at the next look)."""
        if self.status is not None and not self._last_looked:
            self._last_looked = True
            self.progress.last_look()
        return self.progress.take()

    def take_phase(self) -> Optional[Phase]:
        """The command's newest start-up phase (plan.start_phase), once; None when none is new."""
        return self.phases.take()

    def close(self) -> None:
        """Reap what the command left; stop watching its progress."""
        if self.child is not None:
            self.child.reap_group()
        self.progress.close()
        self.phases.close()
