"""The job folder's `timeline.jsonl`: each hub of the job appends what happened to its tasks.

Why append, never rewrite: a job's runs (requeues, relaunches) each have a hub of their own, and
`tf-slurm report` draws them all; appending one line per event costs nothing at steady state
and keeps the earlier runs'.  The events come from the status snapshots the hub writes anyway
(plan.step_timeline.changes).  Bounded: at most MAX_EVENTS lines per hub (a step of 10,000
tasks starting is 10,000 events), each under plan.step_timeline.MAX_LINE bytes.  The file is
the owner's alone (0600, opened without following a symlink another user could plant, and only
written when it is a regular file of ours); one that cannot be written costs one warning, never
the step.
"""

from __future__ import annotations

import logging
import os
import stat
from typing import Any, Mapping, Optional

from tf_for_slurm.host.job_folder import TIMELINE
from tf_for_slurm.plan.step_timeline import changes, event_line
from tf_for_slurm.supervise.child_process import LOGGER

log = logging.getLogger(LOGGER)

MAX_EVENTS = 50_000  # lines one hub appends


def timeline_path(status_path: str) -> str:
    """The timeline beside the step's status file (the job folder's)."""
    return os.path.join(os.path.dirname(os.path.abspath(status_path)), TIMELINE)


class TimelineFile:
    """`see(snapshot)` after each status write appends the events since the last one seen."""

    def __init__(self, path: str, max_events: int = MAX_EVENTS):
        self.path, self.max_events = path, max_events
        self.last: Optional[Mapping[str, Any]] = None
        self.written = 0
        self.broken = False

    def see(self, snap: Mapping[str, Any]) -> None:
        if self.broken:
            return
        events, self.last = changes(self.last, snap), snap
        if not events:
            return
        room = self.max_events - self.written
        if room <= 0:
            return
        data = "".join(event_line(e) for e in events[:room]).encode()
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
                         | os.O_CLOEXEC, 0o600)
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():  # planted by another user
                    raise OSError(f"not a regular file of ours (owner uid {st.st_uid})")
                os.write(fd, data)
            finally:
                os.close(fd)
        except OSError as exc:
            self.broken = True
            log.warning("cannot append to %s: %s (timeline off)", self.path, exc.strerror or exc)
            return
        self.written += min(len(events), room)
        if self.written >= self.max_events:
            log.warning("%s: %d events written, the step's later ones are not", self.path, self.written)


__all__ = ["MAX_EVENTS", "TimelineFile", "timeline_path"]
