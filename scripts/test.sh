#!/usr/bin/env bash
# The test command: set up what is missing, check the house (ruff, mypy, import-linter's layer
# contracts), then run every test (unit, multi-process TensorFlow, and real Slurm on a local
# 3-node cluster started by the tests' own harness). Arguments go to pytest, e.g.
#   bash scripts/test.sh -m "not slurm and not tf"      (the fast subset)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$root/scripts/setup.sh"
cd "$root"
venv=${TF_SLURM_VENV:-$root/.venv}
echo "test.sh: ruff, mypy, lint-imports" >&2
"$venv/bin/ruff" check --quiet tf_for_slurm
"$venv/bin/mypy" --no-error-summary
"$venv/bin/lint-imports" --no-cache >/dev/null || "$venv/bin/lint-imports" --no-cache
exec "$venv/bin/python" -m pytest -ra "$@"
