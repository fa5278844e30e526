"""The rough-edges scenario of a node's slurmd restarted under a running task, then the controller away
at the requeue (test_rough_edges_slurm.py's `away`): a `tf-slurm submit` job of paced_steps.py (no
TensorFlow) whose first run waits at FIRST_RUN steps; its node's slurmd is restarted, it is told to
stop (`scancel --batch --signal=USR2`), its task takes 5 s to checkpoint while slurmctld is stopped,
`tf-slurm status` is asked then, and once the controller is back the job requeues and completes.

A module of its own so that a one-process test run can run it beside the TensorFlow tests, from the
run's start (tests/background_slurm.py): it mostly waits on Slurm, and it stops the controller, so
no other Slurm test may run while it does.
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path
from typing import Dict

from one_minute_jobs import PACED_STEPS, job_state
from slurm_harness import PYTHON, REPO, SCRIPT, wait_for_log

TARGET, FIRST_RUN = 60, 30


def _local_slurm(cluster, *args: str) -> None:
    res = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=60,
                         env={**cluster.env, "TF_SLURM_LOCAL_DIR": str(cluster.dir)})
    assert res.returncode == 0, res.stderr


def _wait_end(cluster, job: str, timeout: float) -> tuple:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state, restarts = job_state(cluster, job)
        if state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"):
            return state, restarts
        time.sleep(0.5)
    cluster.run(["scancel", job], timeout=30)
    raise AssertionError(f"job {job} not ended within {timeout} s")


def run(cluster, tmp: Path) -> Dict[str, object]:
    """The scenario; what the tests read: the job's end, its log and task log, `tf-slurm status` then."""
    model = tmp / "model"
    model.mkdir()
    res = cluster.run(
        [PYTHON, "-m", "tf_for_slurm", "submit", "--python", PYTHON, "--folder", str(tmp / "jobs"), "-N", "1",
         "-n", "1", "--ps", "0", "-t", "5", "--checkpoint-dir", str(model), "--target", str(TARGET), "--",
         PYTHON, str(PACED_STEPS), str(model), str(TARGET), str(FIRST_RUN), "5"],
        timeout=60, env={"PYTHONPATH": str(REPO)}, cwd=str(tmp))
    assert res.returncode == 0, res.stderr
    m = re.match(r"Submitted batch job (\d+)", res.stdout)
    assert m, res.stdout
    job = m.group(1)
    log = tmp / "jobs" / job / "job.out"
    out: Dict[str, object] = {"job": job, "model": model, "log": log}
    try:
        # the first run waits at FIRST_RUN: its node's slurmd restarted under it, then it is told to stop;
        # its task checkpoints 5 s later, while the controller is stopped
        wait_for_log(log.parent / "task-0.out", rf"task 0: step {FIRST_RUN}", timeout=180)
        node = re.search(r"NodeList=(node\d+)", cluster.run(["scontrol", "show", "job", job], timeout=30).stdout)
        assert node, "no NodeList"
        _local_slurm(cluster, "restart-slurmd", node.group(1))
        assert cluster.run(["scancel", "--batch", "--signal=USR2", job], timeout=30).returncode == 0
        wait_for_log(log, r"passed SIGUSR2 on to the step", timeout=60)
        _local_slurm(cluster, "controller", "stop")
        try:
            wait_for_log(log, r"Slurm's controller does not answer", timeout=60)
            out["status"] = subprocess.run(
                [PYTHON, "-m", "tf_for_slurm", "status", job, "--folder", str(tmp / "jobs")], capture_output=True,
                text=True, timeout=60, env={**cluster.env, "PYTHONPATH": str(REPO)})
        finally:
            _local_slurm(cluster, "controller", "start")
        out["end"] = _wait_end(cluster, job, 300)
    finally:
        if "end" not in out:
            cluster.run(["scancel", job], timeout=30)
    out["text"] = log.read_text(errors="replace")
    out["task"] = (log.parent / "task-0.out").read_text(errors="replace")
    return out
