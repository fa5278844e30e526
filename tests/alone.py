"""A window in which the Slurm tests' time-limited jobs run with no other test beside them.

Why: the full test command runs the `tf` and the `slurm` tests at once (two pytest-xdist workers,
tests/side_by_side.py): the Slurm tests mostly wait on Slurm, the TensorFlow tests keep a core busy.
But a 1-minute job that must checkpoint, requeue and resume (one_minute_jobs, test_requeue_slurm)
needs its TensorFlow start-ups to end well inside each allocation; beside another test's
TensorFlow processes they took longer, and a run that trains nothing is a failed job.  So those
fixtures hold the window (`alone()`), and a worker about to start any other test waits while a
window is held (`wait_for_the_window`, tests/conftest.py's runtest hook), at most MAX_WAIT s.

The window's folder is made private (0700) by the run's controller (tests/conftest.py), named in
WINDOW_ENV for its workers: no other user can open or hold it.  Outside xdist it is not set and
nothing waits.
"""

from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager
from typing import Iterator

WINDOW_ENV = "TF_SLURM_TESTS_WINDOW"
MAX_WAIT = 900.0  # s a test waits for a window to close (its holder crashed: go on, say so)


@contextmanager
def alone(name: str) -> Iterator[None]:
    """Hold the window for the block (no-op outside a side-by-side run)."""
    folder = os.environ.get(WINDOW_ENV)
    if not folder:
        yield
        return
    mark = os.path.join(folder, f"{name}.{os.getpid()}")
    with open(mark, "x"):
        pass
    try:
        yield
    finally:
        os.unlink(mark)


def wait_for_the_window(what: str) -> float:
    """Wait while a window is held; the seconds waited."""
    folder = os.environ.get(WINDOW_ENV)
    if not folder:
        return 0.0
    start = time.monotonic()
    while os.listdir(folder):
        if time.monotonic() - start > MAX_WAIT:
            sys.stderr.write(f"alone: {what} waited {MAX_WAIT:.0f} s for {os.listdir(folder)}: going on\n")
            break
        time.sleep(0.5)
    return time.monotonic() - start
