"""Shared test set-up: the real local Slurm cluster fixture (tests/slurm_harness.py)."""

import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# `tf-slurm local` and `submit` make a job folder per job: the tests' go to a temporary folder,
# never into the checkout (a test that needs its own sets TF_SLURM_JOBS_ROOT or --folder).
os.environ.setdefault("TF_SLURM_JOBS_ROOT", tempfile.mkdtemp(prefix="tf_slurm_jobs."))

try:
    from slurm_harness import slurm_cluster  # noqa: F401  (session fixture: starts scripts/local_slurm.sh)
except ImportError:  # the harness module is optional for partial checkouts
    pass
