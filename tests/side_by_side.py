"""How many pytest-xdist workers a test run gets (tests/conftest.py's `pytest_xdist_auto_num_workers`,
through setup.cfg's `-n auto`): a plain function, tested in tests/house/test_side_by_side.py."""

from __future__ import annotations

import re
from typing import Mapping

import pytest


def default_workers(cores: int) -> int:
    """Side-by-side workers when nothing says otherwise: two per core (the tests mostly wait on the
    processes they start), at most 4."""
    return max(1, min(2 * cores, 4))


def workers_for(markexpr: str, env: Mapping[str, str], cores: int) -> int:
    """How many pytest-xdist workers a run gets (`-n auto`, setup.cfg's addopts); 0 runs it in this one process.

    TEST_WORKERS=N says N (1: one process, in order). Otherwise side by side only when -m leaves out
    both `tf` and `slurm` tests (the fast subset, the first part of the full command): TensorFlow and
    Slurm tests keep a core busy each and bound how soon a step reacts ("ends within 5 s"), so any
    run that may pick them runs them one at a time.  (TEST_WORKERS=2 runs the full command's `-m "tf
    or slurm"` part as two lanes, the Slurm group beside one TensorFlow test at a time, after the
    time-limited jobs: tests/alone.py. Measured on fresh clones: 1110 and 1212 s against about 1320
    s one at a time, but one TensorFlow test's 5 s bound was missed beside the Slurm jobs, 6.5 s:
    not the default.)"""
    raw = env.get("TEST_WORKERS", "").strip()
    if raw:
        if not raw.isdigit() or int(raw) < 1:
            raise pytest.UsageError(f"TEST_WORKERS={raw!r}: expected a number of workers >= 1")
        n = int(raw)
    elif re.search(r"\bnot\s+tf\b", markexpr) and re.search(r"\bnot\s+slurm\b", markexpr):
        n = default_workers(cores)
    else:
        n = 1
    return n if n > 1 else 0
