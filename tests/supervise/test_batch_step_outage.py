"""batch-step through Slurm's hiccups, with stand-ins for srun and squeue (no cluster): srun that could
not create its step because the controller was away is started again; srun's own unbounded wait for
busy nodes is ended after TF_SLURM_CONTROLLER_WAIT with one line.  Real Slurm: tests/slurm/test_rough_edges_slurm.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.procs

REPO = Path(__file__).resolve().parents[2]
# the first call fails as srun does when the controller is away at step creation; later ones succeed
FAKE_SRUN = """#!/bin/bash
n=$(cat "$FAKE_DIR/calls" 2>/dev/null || echo 0); echo $((n + 1)) > "$FAKE_DIR/calls"
if [ "$FAKE_MODE" = away ] && [ "$n" -lt 2 ]; then
  echo "srun: error: Unable to create step for job 77: Unable to contact slurm controller (connect failure)" >&2
  exit 1
fi
if [ "$FAKE_MODE" = busy ]; then
  echo "srun: Job 77 step creation temporarily disabled, retrying (Requested nodes are busy)" >&2
  trap 'echo TERM > "$FAKE_DIR/termed"; exit 143' TERM
  while :; do sleep 0.1; done
fi
echo "trained" >&2
"""
FAKE_SQUEUE = "#!/bin/bash\ndate -d @$(( $(date +%s) + 100 )) +%Y-%m-%dT%H:%M:%S\n"


def _run(tmp_path: Path, mode: str, wait: str) -> subprocess.CompletedProcess:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("srun", FAKE_SRUN), ("squeue", FAKE_SQUEUE)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_DIR": str(tmp_path), "FAKE_MODE": mode,
           "SLURM_JOB_ID": "77", "PYTHONPATH": str(REPO), "TF_SLURM_CONTROLLER_WAIT": wait}
    env.pop("SLURM_RESTART_COUNT", None)
    return subprocess.run([sys.executable, "-m", "tf_for_slurm", "batch-step", "--no-requeue", "--", "srun", "x"],
                          env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.timeout(90)
def test_srun_that_could_not_reach_the_controller_is_started_again(tmp_path):
    res = _run(tmp_path, "away", "60")
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "calls").read_text().strip() == "3"
    said = [line for line in res.stderr.splitlines() if "Slurm's controller does not answer" in line]
    assert len(said) == 1 and "srun (creating the step)" in said[0], res.stderr  # one line per outage
    assert "srun (creating the step): Slurm's controller answered again after" in res.stderr, res.stderr
    assert "trained" in res.stderr


@pytest.mark.timeout(90)
def test_srun_that_never_reaches_the_controller_fails_after_the_wait_with_one_line(tmp_path):
    res = _run(tmp_path, "away", "0")
    assert res.returncode == 1, res.stderr
    assert "srun (creating the step): Slurm's controller did not answer for 0 s" in res.stderr, res.stderr
    assert (tmp_path / "calls").read_text().strip() == "1"


@pytest.mark.timeout(90)
def test_srun_waiting_for_busy_nodes_is_ended_after_the_controller_wait(tmp_path):
    res = _run(tmp_path, "busy", "1")
    assert (tmp_path / "termed").exists(), res.stderr
    assert "srun has waited 1 s to create the step" in res.stderr and "TF_SLURM_CONTROLLER_WAIT" in res.stderr
    assert res.returncode != 0
