"""A task's progress reports reach the hub and `tf-slurm status`: under `tf-slurm local` each task
writes its step with `report_progress(step=..., loss=..., target=...)` (the shim writes the same
file for unmodified TensorFlow scripts); the step's status.json keeps per task its step, rate, loss
and last step, and `tf-slurm status` shows them with the training's line.  No TensorFlow."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable

# each report 0.6 s after the last (report_progress writes at most one a 0.5 s): every one is written,
# the last (step 5 of 5) included, by construction
TASK = """import os, sys, time
from tf_for_slurm import report_progress
rank = int(os.environ["SLURM_PROCID"])
for step in range(1, 6):
    time.sleep(0.6)
    assert report_progress(step=step * (rank + 1), loss=1.0 / step, target=5 * (rank + 1)), "no supervisor"
"""

pytestmark = pytest.mark.procs


def _status_json(folder: Path) -> dict:
    found = list(folder.glob("*/status.json"))
    assert len(found) == 1, found
    return json.loads(found[0].read_text())


@pytest.mark.timeout(90)
def test_reports_reach_the_status_file_and_the_status_command(tmp_path):
    r = subprocess.run([PY, "-m", "tf_for_slurm", "local", "-n", "3", "--ps", "0", "--folder", str(tmp_path),
                        "--", PY, "-c", TASK], cwd=ROOT, capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr[-3000:]
    status = _status_json(tmp_path)
    progress = status["progress"]
    assert sorted(progress) == ["0", "1", "2"], progress
    for rank, p in progress.items():
        n = int(rank) + 1
        assert p["step"] == 5 * n and p["target"] == 5 * n and p["loss"] == pytest.approx(0.2), p
        assert p["kind"] == "user" and p["rate"] > 0 and isinstance(p["last_step_at"], float), p
    folder = next(tmp_path.glob("*/status.json")).parent
    shown = subprocess.run([PY, "-m", "tf_for_slurm", "status", str(folder)], cwd=ROOT, capture_output=True,
                           text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert "training: step 5 of 5" in shown.stdout, shown.stdout + shown.stderr  # the chief's
    header = next(line for line in shown.stdout.splitlines() if "rank" in line and "role" in line)
    assert all(word in header for word in ("step", "rate", "loss", "last step")), shown.stdout
    rows = [line[1:].split() for line in shown.stdout.splitlines() if line[2:3].isdigit()]
    assert [row[8] for row in rows] == ["5", "10", "15"], shown.stdout  # after the 8 columns of the table


@pytest.mark.timeout(90)
def test_a_task_without_reports_has_no_training_columns(tmp_path):
    r = subprocess.run([PY, "-m", "tf_for_slurm", "local", "-n", "2", "--ps", "0", "--folder", str(tmp_path),
                        "--", PY, "-c", "pass"], cwd=ROOT, capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr[-3000:]
    assert _status_json(tmp_path)["progress"] == {}
    folder = next(tmp_path.glob("*/status.json")).parent
    shown = subprocess.run([PY, "-m", "tf_for_slurm", "status", str(folder)], cwd=ROOT, capture_output=True,
                           text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert "training:" not in shown.stdout and "last step" not in shown.stdout, shown.stdout
