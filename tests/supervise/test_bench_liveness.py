"""bench/bench_liveness.py runs end to end at a tiny size (so it cannot rot): no TensorFlow."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tf_for_slurm.plan.requeue import LOST_STATUS

pytestmark = pytest.mark.procs  # real processes on real timers: left out of the fast subset (tests/conftest.py)

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "bench_liveness.py"


@pytest.mark.timeout(120)
def test_bench_liveness_tiny(tmp_path):
    # the hub ends the chief's `sleep` at once; it waits its end grace (kill grace + min(2 s, silence))
    # for the unreachable task in each of its two runs: a small kill grace and silence keep that short.
    # Silence 0.6 s is still 6 heartbeats of 0.1 s (3 of 0.2 s in the 201-task reports step, where the
    # hub asks for one per tasks/1000 s): a simulator would have to stall 0.4 s to look dead
    env = {**os.environ, "TF_SLURM_HEARTBEAT": "0.1", "TF_SLURM_SILENCE": "0.6", "TF_SLURM_KILL_GRACE": "0.1",
           "PYTHONPATH": str(ROOT)}
    figures = tmp_path / "figures.json"
    proc = subprocess.run([sys.executable, str(BENCH), "--sizes", "20", "--reports", "200", "--wait", "0.3",
                           "--unreachable", "0.1", "--sims", "2", "--report-sims", "2", "--report-timeout", "20",
                           "--settle", "0.1",
                           "--json", str(figures)],
                          env=env, capture_output=True, text=True, timeout=110)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    for label in ("waiting: hub CPU, % of one core", "waiting: hub connects/s", "killed task: first `end` after",
                  "dead node: first `end` after last heartbeat", "200 simultaneous done reports", "all taken"):
        assert label in out, out
    assert "import tensorflow" not in BENCH.read_text()

    data = json.loads(figures.read_text())
    size = data["sizes"][0]
    assert size["join"]["joined"] == 19 - size["absent"] and size["absent"] == 1
    assert size["connects_per_s"] == 0  # nobody reconnects while waiting
    assert size["killed"]["ok"] and size["killed"]["first"] < 5  # every other task told `end 69`
    assert size["killed"]["status"] == [str(LOST_STATUS)]  # lost, not failed: batch-step requeues it
    assert size["silent"]["ok"] and size["silent"]["first"] < 5  # silence 0.6 s: noticed by the 0.5 s tick
    for case in ("killed", "silent"):  # the chief's own task ends too: the hub exits with the failure
        assert size[case]["hub_exit"] is not None and size[case]["hub_exit"][0] == LOST_STATUS, size[case]
    for rep in data["reports"]:
        assert rep["acked"] == rep["of"] == 200, rep
