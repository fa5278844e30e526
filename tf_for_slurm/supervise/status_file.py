"""The hub's status file: the step's state written atomically, on change and now and then.

Why throttled: at thousands of tasks the state changes many times a second while the step starts
and ends; readers (`tf-slurm status`) need it about once a second, and a refresh every few
seconds keeps the 'last heard' times honest while nothing changes.  A file that cannot be
written costs one warning, never the step.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Dict, Optional

from tf_for_slurm.host.job_folder import write_json
from tf_for_slurm.supervise.child_process import LOGGER
from tf_for_slurm.supervise.timeline_file import TimelineFile, timeline_path

log = logging.getLogger(LOGGER)

MIN_INTERVAL = 1.0  # seconds between two writes, however often the state changes
REFRESH = 5.0  # seconds between writes while nothing changes (the 'last heard' times)


class StatusFile:
    """Writes the dict `build()` returns to `path` when due (see the module's docstring)."""

    def __init__(self, path: str, min_interval: float = MIN_INTERVAL, refresh: float = REFRESH):
        self.path, self.min_interval, self.refresh = path, min_interval, refresh
        self.timeline = TimelineFile(timeline_path(path))  # the events between two writes, appended
        self.written_at: Optional[float] = None
        self.changes = -1
        self.writes = 0
        self.broken = False

    def due(self, now: float, changes: int) -> bool:
        if self.broken:
            return False
        if self.written_at is None:
            return True
        since = now - self.written_at
        return since >= self.refresh or (changes != self.changes and since >= self.min_interval)

    def update(self, now: float, changes: int, build: Callable[[], Dict[str, Any]], force: bool = False) -> None:
        """Write `build()` when due (or `force`: the final state)."""
        if not (force and not self.broken) and not self.due(now, changes):
            return
        data = build()
        try:
            write_json(self.path, data)  # it makes the folder: the timeline goes beside it, after
        except OSError as exc:
            self.broken = True
            log.warning("cannot write the step's status to %s: %s (status file off)", self.path, exc.strerror or exc)
            return
        self.written_at, self.changes = now, changes
        self.writes += 1
        self.timeline.see(data)
