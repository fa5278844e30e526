"""Reads the start-up phase a task's shim writes (plan.start_phase), for its supervisor to pass on.

Why here: the rule over the phases is pure (plan.start_watch) and runs in the hub; this is the part
that creates the file before each start of the command and stats it, at most every LOOK_EVERY, from
the supervisor's loop.  The file lives in the task's private folder; still, no symlink is followed
and only a regular file of ours counts, as for the progress file (supervise.progress_watch).
"""

from __future__ import annotations

import logging
import os
from typing import Optional

from tf_for_slurm.plan.start_phase import MAX_PHASE_BYTES, Phase, parse_phase
from tf_for_slurm.supervise.child_process import LOGGER
from tf_for_slurm.supervise.progress_watch import ours, read_own

log = logging.getLogger(LOGGER)

LOOK_EVERY = 1.0  # seconds between looks (phases change a few times a run; `where` every 2 s at most)


class PhaseWatch:
    """One command's phase file: `started` at each (re)start, `check` in the loop, `take` the new phase."""

    def __init__(self, path: Optional[str]):
        self.path = path
        self._seen: Optional[int] = None  # the file's mtime at the last read
        self._next_look = 0.0
        self.phase: Optional[Phase] = None  # the newest phase, until taken

    @property
    def next_look(self) -> float:
        return self._next_look

    def started(self) -> None:
        """The command (re)starts: the file exists, empty, ours (the shim never creates it)."""
        self.phase, self._next_look = None, 0.0
        if self.path is None:
            return
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
            try:
                if not ours(os.fstat(fd)):
                    raise OSError(0, "not a regular file of ours")
                os.ftruncate(fd, 0)
                os.utime(fd, ns=(0, 0))  # a write in this clock tick still shows as a change
                self._seen = os.fstat(fd).st_mtime_ns
            finally:
                os.close(fd)
        except OSError as exc:
            log.warning("cannot create the phase file %s (%s): this task's start-up phase is not known",
                        self.path, exc.strerror)
            self.path = None

    def check(self, now: float) -> None:
        """A look, when due: a new phase (in `phase`) when the file changed."""
        if self.path is None or now < self._next_look:
            return
        self._next_look = now + LOOK_EVERY
        try:
            st = os.lstat(self.path)
        except OSError:
            return
        if not ours(st) or st.st_mtime_ns == self._seen:
            return
        self._seen = st.st_mtime_ns
        phase = self._read()
        if phase is not None:
            self.phase = phase

    def _read(self) -> Optional[Phase]:
        assert self.path is not None
        data = read_own(self.path, MAX_PHASE_BYTES)
        return parse_phase(data.decode("utf-8", "replace")) if data else None

    def take(self) -> Optional[Phase]:
        """The newest phase once (None when there is no new one)."""
        phase, self.phase = self.phase, None
        return phase

    def close(self) -> None:
        if self.path is not None:
            try:
                os.unlink(self.path)
            except OSError:
                pass
