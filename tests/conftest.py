"""Shared test set-up: the real local Slurm cluster fixture (tests/slurm_harness.py), the wheel of
this tree, forked CLI runs (tests/cli_runs.py), the `install` and `hostile` markers' rule, and a bytecode cache."""

import os
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# PYTHONDONTWRITEBYTECODE (this machine sets it) made pytest rewrite and compile every test module on
# every run (~3 s of the fast subset): keep the checkout free of bytecode, as it intends, but cache
# it in the temporary folder (Python and pytest check each cached file against its source).
if sys.dont_write_bytecode:
    sys.pycache_prefix = os.path.join(tempfile.gettempdir(), f"tf_slurm_pycache.{os.getuid()}")
    sys.dont_write_bytecode = False

# `tf-slurm local` and `submit` make a job folder per job: the tests' go to a temporary folder,
# never into the checkout (a test that needs its own sets TF_SLURM_JOBS_ROOT or --folder).
os.environ.setdefault("TF_SLURM_JOBS_ROOT", tempfile.mkdtemp(prefix="tf_slurm_jobs."))

try:
    from slurm_harness import slurm_cluster  # noqa: F401  (session fixture: starts scripts/local_slurm.sh)
except ImportError:  # the harness module is optional for partial checkouts
    pass


FULL_ONLY = ("install", "hostile")  # markers whose tests run only in the full command, or when -m names them


def pytest_collection_modifyitems(config, items):
    """`install` tests (a wheel built and installed into a fresh virtualenv: ~10 s) and `hostile`
    tests (an attacker run as another user, property tests of the supervision channel: ~1.5 min) run
    in the full command (no -m) and when -m names them; a run that picks tests by marker without
    naming them, such as the fast subset `-m "not slurm and not tf"`, leaves them out."""
    expr = config.getoption("markexpr") or ""
    if not expr:
        return
    skipped = [m for m in FULL_ONLY if m not in expr]
    if not skipped:
        return
    leave = [item for item in items if any(item.get_closest_marker(m) is not None for m in skipped)]
    if leave:
        config.hook.pytest_deselected(items=leave)
        items[:] = [item for item in items if item not in leave]


@pytest.fixture(scope="session")
def cli_runs():
    """`python -m tf_for_slurm` runs forked from one server that imported the CLI (tests/cli_runs.py)."""
    from cli_runs import CliRuns

    runs = CliRuns()
    yield runs
    runs.close()


@pytest.fixture(scope="session")
def built_wheel(tmp_path_factory) -> Path:
    """The wheel of this tree, built once per run (tests/wheel_build.py)."""
    from wheel_build import build_wheel

    return build_wheel(tmp_path_factory.mktemp("wheel"))
