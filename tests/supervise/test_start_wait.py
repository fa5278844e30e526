"""A step whose tasks wait for a peer before any step: the hub names the task they wait for (its phase,
its node, the line of its code), then, past the fault bound, ends it as a hung task; a slow start that
ends is named but not ended and trains to its end.  Under `tf-slurm local`, no TensorFlow: each task
writes its own start-up phase to TF_SLURM_PHASE_FILE (the shim, which writes it for TensorFlow
scripts, is off with TF_SLURM_PROGRESS_CAPTURE=0)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable

# rank 1 is the laggard: it stays in load_data until the gate file holds "go" (the test opens it),
# the others wait for their peers at once; then every task reports 3 steps and ends
TASK = """import json, os, sys, time
from tf_for_slurm import report_progress
rank, gate = int(os.environ["SLURM_PROCID"]), sys.argv[1]
def phase(name, **more):
    line = json.dumps({"v": 1, "phase": name, "t": time.time(), "since": time.time(), **more})
    with open(os.environ["TF_SLURM_PHASE_FILE"], "r+") as fh:
        fh.write(line); fh.truncate()
def load_data():
    phase("starting", where="task.py:10 in load_data")
    while open(gate).read() != "go":
        time.sleep(0.1)
if rank == 1:
    load_data()
phase("waiting", detail="the test's barrier")
while open(gate).read() != "go":
    time.sleep(0.1)
for step in range(1, 4):
    time.sleep(0.6)
    report_progress(step=step)
"""


def _run(tmp_path: Path, gate: Path, **env: str) -> subprocess.Popen:
    gate.write_text("")
    return subprocess.Popen(
        [PY, "-m", "tf_for_slurm", "local", "-n", "3", "-N", "3", "--ps", "0", "--folder", str(tmp_path), "--job-id", "77",
         "--", PY, "-c", TASK, str(gate)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), "TF_SLURM_PROGRESS_CAPTURE": "0", "TF_SLURM_STRATEGY": "mwms",
             **env})


def _status(folder: Path) -> dict:
    try:
        return json.loads((folder / "status.json").read_text())
    except (OSError, ValueError):
        return {}


def _wait_for(folder: Path, what, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = _status(folder)
        if status and what(status):
            return status
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout} s: {_status(folder)}")


pytestmark = pytest.mark.procs


@pytest.mark.timeout(120)
def test_a_slow_start_is_named_with_its_line_of_code_and_not_ended_then_trains_to_the_end(tmp_path):
    gate = tmp_path / "gate"
    proc = _run(tmp_path, gate, TF_SLURM_START_WAIT="1", TF_SLURM_START_FAULT="0")
    folder = tmp_path / "77"
    try:
        status = _wait_for(folder, lambda s: (s.get("start") or {}).get("line"), 60)
        line = status["start"]["line"]
        assert "worker 0 (rank 0, node1), worker 2 (rank 2, node3) have waited" in line, line
        assert "in the test's barrier; waiting for worker 1 (rank 1, node2): starting (TensorFlow not imported), " \
               "at task.py:10 in load_data" in line, line
        assert status["start"]["laggards"] == [1] and status["start"]["phases"]["0"]["phase"] == "waiting"
        shown = subprocess.run([PY, "-m", "tf_for_slurm", "status", str(folder)], cwd=ROOT, capture_output=True,
                               text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert "start-up: no training step: " in shown.stdout, shown.stdout + shown.stderr
        assert "start-up" in next(x for x in shown.stdout.splitlines() if "rank" in x and "role" in x)
        assert "waiting for worker 1" in shown.stdout and "at task.py:10 in load_data" in shown.stdout, shown.stdout
    finally:
        gate.write_text("go")
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-3000:]
    assert "start-up: no training step" in err and "start-up fault" not in err, err[-3000:]
    final = _status(folder)
    assert "start" not in final and final["progress"]["1"]["step"] == 3, final  # it trained: the rule is over
    # its Python stacks, from the shim's faulthandler on SIGQUIT, went to its log (here: local's stderr)
    assert re.search(r'File "<string>", line \d+ in load_data', err), err[-3000:]


@pytest.mark.timeout(120)
def test_past_the_fault_bound_the_task_waited_for_is_ended_and_the_step_says_why(tmp_path):
    gate = tmp_path / "gate"
    proc = _run(tmp_path, gate, TF_SLURM_START_WAIT="1", TF_SLURM_START_FAULT="3", TF_SLURM_MAX_RESTARTS="0")
    try:
        out, err = proc.communicate(timeout=90)  # the fault ends it: the gate is never opened
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode != 0, err[-3000:]
    assert "start-up fault: no training step: " in err and "ending worker 1 (rank 1, node2)" in err, err[-3000:]
    final = _status(tmp_path / "77")
    assert [h["detail"].split(":")[0] for h in final["hangs"]] == ["start-up", "start-up fault"], final["hangs"]
    timeline = (tmp_path / "77" / "timeline.jsonl").read_text()
    assert '"event":"hang"' in timeline.replace(" ", "") and "start-up fault: no training step" in timeline
    failure = final["first_failure"]
    assert failure["rank"] == 1 and failure["detail"].startswith("start-up: no training step: "), failure
    assert "at task.py:10 in load_data" in failure["detail"], failure
