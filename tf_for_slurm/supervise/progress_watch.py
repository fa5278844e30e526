"""Carries out plan.progress for one task's command: looks at its process state and progress file.

Why here: the rule is pure (plan/progress.py); this is the part that reads /proc and stats a file,
twice a second at most, from the supervisor's loop (hub or spoke).  The hang rule is off without a
deadline; the file's report (plan.train_progress: what the shim or the script wrote there) is read
whenever the command has a progress file, for the hub's view of the training.  The file lives in
the task's private folder (exec's `_private_dir`); still, no symlink is followed and only a regular
file of ours counts: a file another user made must not fake progress.
"""

from __future__ import annotations

import logging
import os
import stat
from typing import Optional

from tf_for_slurm.plan.progress import hung
from tf_for_slurm.plan.train_progress import MAX_REPORT_BYTES, Report, parse_report
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


def ours(st: os.stat_result) -> bool:
    """Whether a file a task writes for its supervisor counts: a regular file (not a symlink) of this user."""
    return stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid()


def read_own(path: str, limit: int) -> Optional[bytes]:
    """At most limit + 1 bytes of `path` if it is a regular file of ours (no symlink followed), else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return os.read(fd, limit + 1) if ours(os.fstat(fd)) else None
    except OSError:
        return None
    finally:
        os.close(fd)


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
        self.report: Optional[Report] = None  # the command's newest report, until taken

    @property
    def on(self) -> bool:
        """The hang rule applies (a deadline)."""
        return self.deadline > 0

    @property
    def watching(self) -> bool:
        """The command has a progress file to look at (for its reports, with or without a deadline)."""
        return self.path is not None

    @property
    def next_look(self) -> float:
        """When `check` looks again (monotonic seconds)."""
        return self._next_look

    def started(self, now: float) -> None:
        """The command (re)started: its clock starts again; the file exists, untouched by it."""
        if self.path is None:
            return
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
            try:
                if not ours(os.fstat(fd)):
                    raise OSError(0, "not a regular file of ours")
                # an mtime no touch can give: a report in the same clock tick as this start still shows
                os.utime(fd, ns=(0, 0))
                self._baseline = self._seen = os.fstat(fd).st_mtime_ns
            finally:
                os.close(fd)
        except OSError as exc:
            log.warning("cannot create the progress file %s (%s): only a stopped command is noticed", self.path,
                        exc.strerror)
            self._baseline = self._seen = None
        self._started, self._reported, self._stopped_since, self._fired = now, None, None, False

    def check(self, child: Optional[Child], now: float) -> Optional[str]:
        """Why the running command is hung (once per start), else None; a new report in `report`."""
        if not self.watching or child is None or child.status is not None or self._fired or now < self._next_look:
            return None
        self._next_look = now + LOOK_EVERY
        if self.on and process_state(child.proc.pid) == "T":
            self._stopped_since = self._stopped_since if self._stopped_since is not None else now
        else:
            self._stopped_since = None
        if self._baseline is not None and self.path is not None:
            mtime: Optional[int]
            try:
                st = os.lstat(self.path)
                mtime = st.st_mtime_ns if ours(st) else self._seen
            except OSError:
                mtime = self._seen
            if mtime != self._seen:
                self._seen, self._reported = mtime, now
                self.report = self._read() or self.report
        if not self.on:
            return None
        why = hung(now, self.deadline, started=self._started, reported=self._reported,
                   stopped_since=self._stopped_since)
        self._fired = why is not None
        return why

    def _read(self) -> Optional[Report]:
        """The file's report (one JSON line), None when it holds none: `report_progress()` only
        touches it.  No symlink followed, only a regular file of ours, at most MAX_REPORT_BYTES."""
        assert self.path is not None
        data = read_own(self.path, MAX_REPORT_BYTES)
        return parse_report(data.decode("utf-8", "replace")) if data else None

    def last_look(self) -> None:
        """The command ended: read what it wrote last, however soon after the previous look, whatever its mtime
        says (a coarse clock gives a write just after a look the mtime that look saw), if it wrote since it started."""
        if self.path is None:
            return
        try:
            st = os.lstat(self.path)
        except OSError:
            return
        if ours(st) and st.st_mtime_ns != self._baseline:
            self._seen = st.st_mtime_ns
            self.report = self._read() or self.report

    def take(self) -> Optional[Report]:
        """The newest report once (None when there is no new one)."""
        report, self.report = self.report, None
        return report

    def close(self) -> None:
        if self.path is not None:
            try:
                os.unlink(self.path)
            except OSError:
                pass
