"""An unmodified MultiWorkerMirroredStrategy `fit` whose worker 1 stalls after building the strategy
(its data load waits on a slow file system): worker 0 waits in the first step's all-reduce, the hub
names worker 1 within the bound, with its phase and the line of its code; once its data comes it
trains to the end, not ended (TF_SLURM_START_FAULT=0).  Under `tf-slurm local`; the phases come from
the shim (tf_slurm_start_phase), nothing in the script says them.  The stall before the strategy
(the start barrier) is the real-Slurm test's (tests/slurm/one_minute_jobs.py)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "unmodified" / "mwms_slow_start.py"
PY = sys.executable

pytestmark = [pytest.mark.tf,
              pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="needs TensorFlow")]

ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1", "TF_SLURM_START_WAIT": "3",
       "TF_SLURM_START_FAULT": "0"}
for _name in ("TF_USE_LEGACY_KERAS", "TF_CONFIG", "TF_SLURM_PS", "TF_SLURM_PROGRESS_CAPTURE"):
    ENV.pop(_name, None)


@pytest.mark.timeout(240)
def test_a_worker_that_stalls_after_the_strategy_is_named_and_the_fit_completes(tmp_path):
    (tmp_path / "data-0").write_text("ready")
    folder = tmp_path / "jobs" / "4343"
    proc = subprocess.Popen([PY, "-m", "tf_for_slurm", "local", "-n", "2", "-N", "2", "--ps", "0", "--job-id", "4343",
                             "--folder", str(tmp_path / "jobs"), "--", PY, str(SCRIPT), "--data",
                             str(tmp_path / "data-{index}"), "--load", "after"],
                            env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    start = None
    try:
        deadline = time.monotonic() + 180
        while start is None or not start.get("line"):
            assert time.monotonic() < deadline, f"never named: {start}"
            time.sleep(0.3)
            try:
                start = json.loads((folder / "status.json").read_text()).get("start")
            except (OSError, ValueError):
                pass
        phases = start["phases"]
        assert phases["0"]["phase"] == "stepping" and phases["1"]["phase"] == "ready", start
        assert phases["0"]["detail"] == "its first collective (its variables)", start
        assert phases["1"]["where"].startswith("mwms_slow_start.py:") and phases["1"]["where"].endswith(
            " in load_data"), start
        assert start["laggards"] == [1], start
        assert "worker 0 (rank 0, node1) has waited" in start["line"], start
        assert "waiting for worker 1 (rank 1, node2): ready, at mwms_slow_start.py:" in start["line"], start
    finally:
        (tmp_path / "data-1").write_text("ready")  # the slow load ends
        out, _ = proc.communicate(timeout=180)
    assert proc.returncode == 0, out[-4000:]
    assert "worker 0 done" in out and "worker 1 done" in out, out[-4000:]
    assert "start-up fault" not in out, out[-4000:]
    final = json.loads((folder / "status.json").read_text())
    assert "start" not in final and final["progress"]["0"]["step"] == 10, final.get("progress")
