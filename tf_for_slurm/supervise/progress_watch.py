"""Carries out plan.progress for one task's command: looks at its process state and progress file.

Why here: the rule is pure (plan/progress.py); this is the part that reads /proc and stats a file,
twice a second at most, from the supervisor's loop (hub or spoke).  Off (does nothing) without a
deadline.
"""

from __future__ import annotations

import logging
import os
from typing import Optional

from tf_for_slurm.plan.progress import hung
from tf_for_slurm.supervise.child_process import LOGGER, Child

log = logging.getLogger(LOGGER)

LOOK_EVERY = 0.5  # seconds between looks


def process_state(pid: int) -> str:
    """The kernel's one-letter state of `pid` ('R', 'S', 'T' stopped ...), '' when unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0].decode()
    except (OSError, IndexError):
        return ""


class ProgressWatch:
    """Whether one command is hung; `started` at each (re)start of the command, `check` in the loop."""

    def __init__(self, deadline: float, path: Optional[str]):
        self.deadline = deadline if path else 0.0
        self.path = path
        self._baseline: Optional[int] = None  # the file's mtime when the command started
        self._seen: Optional[int] = None
        self._started = 0.0
        self._reported: Optional[float] = None
        self._stopped_since: Optional[float] = None
        self._next_look = 0.0
        self._fired = False

    @property
    def on(self) -> bool:
        return self.deadline > 0

    @property
    def next_look(self) -> float:
        """When `check` looks again (monotonic seconds)."""
        return self._next_look

    def started(self, now: float) -> None:
        """The command (re)started: its clock starts again; the file exists, untouched by it."""
        if not self.on or self.path is None:
            return
        try:
            with open(self.path, "a"):
                pass
            # an mtime no touch can give: a report in the same clock tick as this start still shows
            os.utime(self.path, ns=(0, 0))
            self._baseline = self._seen = os.stat(self.path).st_mtime_ns
        except OSError as exc:
            log.warning("cannot create the progress file %s (%s): only a stopped command is noticed", self.path,
                        exc.strerror)
            self._baseline = self._seen = None
        self._started, self._reported, self._stopped_since, self._fired = now, None, None, False

    def check(self, child: Optional[Child], now: float) -> Optional[str]:
        """Why the running command is hung (once per start), else None."""
        if not self.on or child is None or child.status is not None or self._fired or now < self._next_look:
            return None
        self._next_look = now + LOOK_EVERY
        if process_state(child.proc.pid) == "T":
            self._stopped_since = self._stopped_since if self._stopped_since is not None else now
        else:
            self._stopped_since = None
        if self._baseline is not None and self.path is not None:
            mtime: Optional[int]
            try:
                mtime = os.stat(self.path).st_mtime_ns
            except OSError:
                mtime = self._seen
            if mtime != self._seen:
                self._seen, self._reported = mtime, now
        why = hung(now, self.deadline, started=self._started, reported=self._reported,
                   stopped_since=self._stopped_since)
        self._fired = why is not None
        return why

    def close(self) -> None:
        if self.on and self.path is not None:
            try:
                os.unlink(self.path)
            except OSError:
                pass
