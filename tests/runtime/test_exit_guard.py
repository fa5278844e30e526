"""The coordinator's end when a shutdown enqueue is still inside TensorFlow at exit: the process ends
with the coordinator's status, not with TensorFlow's teardown abort (SIGABRT, "FATAL: exception not
rethrown", seen once in CI when a wedged task held the enqueue past its bound).  A plain thread
stands in for the blocked one: no TensorFlow needed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CODE = """
import threading
from tf_for_slurm.runtime import pss_exit
release = threading.Event()
stuck = threading.Thread(target=release.wait, args=({hold},), daemon=True, name="tf-slurm-enqueue-worker0")
stuck.start()
pss_exit._exit_without_teardown_if_stuck([stuck], {status}, wait=0.5)
print("program done", flush=True)
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("hold,status,expected", [
    (30, 3, 3),  # still blocked after the bounded wait: ends with the coordinator's status
    (30, 0, 0),
    (0.1, 3, 0),  # it finished within the wait: the normal exit (the program's own status, 0)
])
def test_a_thread_stuck_at_exit_ends_the_process_with_the_coordinators_status(hold, status, expected):
    res = subprocess.run([sys.executable, "-c", CODE.format(hold=hold, status=status)], cwd=ROOT,
                         capture_output=True, text=True, timeout=30)
    assert res.returncode == expected, res.stderr
    assert "program done" in res.stdout  # flushed before the process ended
    assert ("without TensorFlow's teardown" in res.stderr) == (hold > 1), res.stderr
    assert "import tensorflow" not in res.stderr
