"""Shared test set-up: the real local Slurm cluster fixture (tests/slurm_harness.py)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

try:
    from slurm_harness import slurm_cluster  # noqa: F401  (session fixture: starts scripts/local_slurm.sh)
except ImportError:  # the harness module is optional for partial checkouts
    pass
