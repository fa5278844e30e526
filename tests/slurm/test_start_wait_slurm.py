"""Real Slurm: a MultiWorkerMirroredStrategy fit whose worker 1 starts late (its data load, before its
`import tensorflow`) is named by the hub past TF_SLURM_START_WAIT, with its phase, node and line of
code, in status.json and `tf-slurm status`; once its data comes the job trains to its end, COMPLETED,
not ended (a slow but healthy start).  The job runs in the one_minute_jobs batch
(tests/slurm/slow_start_job.py), sharing its wait."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm


@pytest.mark.timeout(900)
def test_a_late_worker_is_named_and_the_job_completes(one_minute_jobs):
    entry = one_minute_jobs["slow_start"]
    info = entry["info"]
    folder = Path(str(entry["folder"]))
    logs = "\n".join(p.read_text(errors="replace")[-2000:] for p in sorted(folder.glob("*.out")))
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", (info, logs)
    start = entry.get("start")
    assert start, f"the wait was never named: {logs}"
    line = start["line"]
    assert re.search(r"worker 0 \(rank 0, node\d\) has waited \d+ s for its peers in MultiWorkerMirroredStrategy's "
                     r"start barrier; waiting for worker 1 \(rank 1, node\d\): starting \(TensorFlow not imported\), "
                     r"at mwms_slow_start\.py:\d+ in load_data$", line), line
    assert start["phases"]["0"]["phase"] == "waiting" and start["laggards"] == [1], start
    assert 5 <= start["waited"] < 60, start  # named once past the bound (a look a second, a status write in 5 s)
    shown = str(entry["shown"])
    assert "start-up: no training step: worker 0 (rank 0, node" in shown, shown
    assert "waiting for worker 1" in shown, shown
    final = json.loads((folder / "status.json").read_text())
    assert final["status"] == 0 and "start" not in final, final
    assert "start-up fault" not in logs, logs
    assert "worker 0 done" in logs and "worker 1 done" in logs, logs
