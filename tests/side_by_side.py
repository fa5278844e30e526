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

    TEST_WORKERS=N says N (1: one process, in order). Otherwise side by side when -m leaves out
    both `tf` and `slurm` tests (the fast subset, the first part of the full command). TensorFlow
    tests keep a core busy and bound how soon a step reacts ("ends within 5 s"), so they run one at
    a time; but `-m "tf or slurm"` (the full command's second part) gets two workers, one TensorFlow
    test beside the Slurm group, which mostly waits on Slurm (tests/conftest.py keeps the group on
    one worker, and its time-limited jobs alone: tests/alone.py). Any other run that may pick
    `tf` or `slurm` tests runs one at a time."""
    raw = env.get("TEST_WORKERS", "").strip()
    if raw:
        if not raw.isdigit() or int(raw) < 1:
            raise pytest.UsageError(f"TEST_WORKERS={raw!r}: expected a number of workers >= 1")
        n = int(raw)
    elif re.search(r"\bnot\s+tf\b", markexpr) and re.search(r"\bnot\s+slurm\b", markexpr):
        n = default_workers(cores)
    elif re.fullmatch(r"\s*(tf\s+or\s+slurm|slurm\s+or\s+tf)\s*", markexpr):
        n = min(2, cores)
    else:
        n = 1
    return n if n > 1 else 0
