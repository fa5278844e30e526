"""A window in which the Slurm tests' time-limited jobs run with no other test beside them.

Why: the full test command runs the `tf` and the `slurm` tests at once (two pytest-xdist workers,
tests/side_by_side.py): the Slurm tests mostly wait on Slurm, the TensorFlow tests keep a core busy.
But a 1-minute job that must checkpoint, requeue and resume (one_minute_jobs, test_requeue_slurm)
needs its TensorFlow start-ups to end well inside each allocation; beside another test's
TensorFlow processes they took longer (a fresh-clone run: the 1-minute jobs 140 s instead of 93, the
TensorFlow test beside them 84 s instead of 12: on 2 cores, a dozen TensorFlow processes thrash),
and a run that trains nothing is a failed job.  So:

- those fixtures hold the window (`alone()`) while their jobs run;
- their tests go first in the Slurm group (tests/conftest.py), and the worker that runs them says so
  once the last of them ended (`first_part_done`);
- a worker about to start any other test waits while the window is held and, when the run has such
  tests, until they are done (`wait_for_the_window`, tests/conftest.py's runtest hook): the
  TensorFlow tests start after the time-limited jobs, not beside their first runs.
  At most MAX_WAIT s (a worker that crashed: go on, say so, and mark the first part done so that no
  later test waits again).

The full command (scripts/test.sh) runs the same rule across two pytest processes, its lanes
(LANE_ENV): the `slurm` lane runs the Slurm tests, the time-limited jobs first, and says when they
are done; the `tf` lane (the TensorFlow tests, then the old-TF pass) waits for that before each test.
The script names the shared window in WINDOW_ENV and marks the first part done itself once the
Slurm lane ended, however it ended.

The window's folder is made private (0700) by the run's controller (tests/conftest.py), named in
WINDOW_ENV for its workers: no other user can open or hold it.  Outside xdist nothing waits.
"""

from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager
from typing import Iterator

WINDOW_ENV = "TFS_TESTS_WINDOW"
LANE_ENV = "TFS_TESTS_LANE"  # scripts/test.sh's lanes: "slurm" or "tf" (see above)
MAX_WAIT = 900.0  # s a test waits for the window (its holder crashed: go on, say so)
HOLD = "hold."  # a holder's mark: hold.NAME.PID
DONE = "first-part-done"  # the time-limited jobs' tests all ended


@contextmanager
def alone(name: str) -> Iterator[None]:
    """Hold the window for the block (no-op outside a side-by-side run)."""
    folder = os.environ.get(WINDOW_ENV)
    if not folder:
        yield
        return
    mark = os.path.join(folder, f"{HOLD}{name}.{os.getpid()}")
    with open(mark, "x"):
        pass
    try:
        yield
    finally:
        os.unlink(mark)


def lane() -> str:
    """This process's lane of the full command ("slurm", "tf"), or "" outside one."""
    return os.environ.get(LANE_ENV, "")


def first_part_done() -> None:
    """The time-limited jobs' tests all ended: the other tests may start."""
    folder = os.environ.get(WINDOW_ENV)
    if folder:
        with open(os.path.join(folder, DONE), "a"):
            pass


def _blocked(folder: str, first_part: bool) -> bool:
    names = os.listdir(folder)
    return any(n.startswith(HOLD) for n in names) or (first_part and DONE not in names)


def wait_for_the_window(what: str, first_part: bool = False) -> float:
    """Wait while the window is held (and, with `first_part`, until the time-limited jobs' tests are
    done); the seconds waited."""
    folder = os.environ.get(WINDOW_ENV)
    if not folder:
        return 0.0
    start = time.monotonic()
    while _blocked(folder, first_part):
        if time.monotonic() - start > MAX_WAIT:
            sys.stderr.write(f"alone: {what} waited {MAX_WAIT:.0f} s for {os.listdir(folder)}: going on\n")
            if first_part:
                first_part_done()
            break
        time.sleep(0.5)
    return time.monotonic() - start
