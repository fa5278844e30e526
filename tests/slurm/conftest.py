"""Fixtures shared by the Slurm test modules."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def one_minute_jobs(slurm_cluster, tmp_path_factory):
    """The PreemptionCheckpointHandler job, the `tf-slurm submit -t 1` job and the never-stopping step
    job, run together once (tests/slurm/one_minute_jobs.py)."""
    from one_minute_jobs import run_together

    return run_together(slurm_cluster, tmp_path_factory.mktemp("one_minute_jobs"))
