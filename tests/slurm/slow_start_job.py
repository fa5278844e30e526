"""A job of the one_minute_jobs batch (tests/slurm/one_minute_jobs.py), sharing its wait: an unmodified
MultiWorkerMirroredStrategy `fit` under `tf-slurm submit -N 2 --ps 0`, whose worker 1 loads its data
before it imports TensorFlow, from a file that comes late (a slow shared file system).  Worker 0 waits
in the strategy's start barrier; with TF_SLURM_START_WAIT=5 the hub names worker 1 (its phase, node and
line of code) in status.json and `tf-slurm status`; a watcher then lets worker 1's data come, and the
job trains to its end (TF_SLURM_START_FAULT=0: named, never ended).  test_start_wait_slurm.py checks it.
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
from pathlib import Path
from typing import Dict

from slurm_harness import PYTHON, REPO

SCRIPT = REPO / "tests" / "unmodified" / "mwms_slow_start.py"
NAMED_WITHIN = 240.0  # s for the line to appear (the job's start-up on a busy machine included)


def submit(cluster, tmp: Path) -> Dict[str, object]:
    data = tmp / "slow-start-data"
    data.mkdir()
    (data / "data-0").write_text("ready")
    res = cluster.run([PYTHON, "-m", "tf_for_slurm", "submit", "--python", PYTHON, "--folder", str(tmp / "jobs"),
                       "-N", "2", "--ntasks-per-node", "1", "--ps", "0", "-t", "5", "--",
                       PYTHON, str(SCRIPT), "--data", str(data / "data-{index}"), "--load", "before"],
                      timeout=60, cwd=str(tmp),
                      env={"PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "2", "TF_SLURM_START_WAIT": "5",
                           "TF_SLURM_START_FAULT": "0"})
    assert res.returncode == 0, res.stderr
    m = re.match(r"Submitted batch job (\d+)\n", res.stdout)
    assert m, res.stdout
    entry: Dict[str, object] = {"job": m.group(1), "folder": tmp / "jobs" / m.group(1), "data": data}
    watcher = threading.Thread(target=_watch, args=(entry,), daemon=True)
    watcher.start()
    entry["watcher"] = watcher
    return entry


def _watch(entry: Dict[str, object]) -> None:
    """Once the hub named the wait: what status.json and `tf-slurm status` said then; then the data comes."""
    folder, data = Path(str(entry["folder"])), Path(str(entry["data"]))
    deadline = time.monotonic() + NAMED_WITHIN
    try:
        while time.monotonic() < deadline:
            try:
                start = json.loads((folder / "status.json").read_text()).get("start") or {}
            except (OSError, ValueError):
                start = {}
            if start.get("line"):
                entry["start"] = start
                entry["named_after"] = start.get("waited")
                shown = subprocess.run([PYTHON, "-m", "tf_for_slurm", "status", str(folder)], capture_output=True,
                                       text=True, timeout=60, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
                entry["shown"] = shown.stdout + shown.stderr
                return
            time.sleep(0.3)
    finally:
        (data / "data-1").write_text("ready")  # the slow load ends, whatever was seen
