#!/usr/bin/env bash
# The test command: set up what is missing, then run every test (unit, multi-process TensorFlow,
# and real Slurm on a local 3-node cluster started by the tests' own harness).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$root/scripts/setup.sh"
cd "$root"
exec "${TF_SLURM_VENV:-$root/.venv}/bin/python" -m pytest -ra "$@"
