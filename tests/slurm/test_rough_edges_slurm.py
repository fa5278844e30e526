"""Real Slurm: a time-limited job survives Slurm's own rough edges (issue 35), each injected at a
moment the test chooses, never waited for:

- the warning at the very start of every run, again and again (`scancel --batch --signal=URG` every
  50 ms for the run's first seconds: before the shell's trap, during it, during srun's start), plus a
  node's slurmd restarted while the tasks run: the template job checkpoints, requeues and completes;
- the controller away at the requeue: a `tf-slurm submit` job told to stop (`scancel --batch
  --signal=USR2`), whose task takes 5 s to checkpoint, while slurmctld is stopped; batch-step's
  `scontrol requeue` waits through the outage with one line, `tf-slurm status` says the controller
  does not answer (not "Slurm does not know it"), and once it is back the job requeues and completes.

The training is tests/slurm_tasks/paced_steps.py (no TensorFlow): a first run can never reach the
target, so every job needs a requeue by construction.
"""

from __future__ import annotations

import re
import subprocess
import threading
import time
from pathlib import Path

import pytest

from slurm_harness import PYTHON, REPO, SCRIPT, wait_for_log

pytestmark = pytest.mark.slurm

STEPS = REPO / "tests" / "slurm_tasks" / "paced_steps.py"
TARGET, FIRST_RUN = 60, 30


def _controller(cluster, action: str) -> None:
    res = subprocess.run(["bash", str(SCRIPT), "controller", action], capture_output=True, text=True, timeout=60,
                         env={**cluster.env, "TF_SLURM_LOCAL_DIR": str(cluster.dir)})
    assert res.returncode == 0, res.stderr


def _state(cluster, job: str) -> tuple:
    """(JobState, Restarts) or ('', -1) when scontrol does not answer (the controller stopped on purpose)."""
    try:
        res = cluster.run(["scontrol", "show", "job", job], timeout=30)
    except subprocess.TimeoutExpired:
        return "", -1
    state = re.search(r"JobState=(\S+)", res.stdout)
    restarts = re.search(r"Restarts=(\d+)", res.stdout)
    return (state.group(1), int(restarts.group(1))) if state and restarts else ("", -1)


def _warn_every_start(cluster, job: str, stop: threading.Event, sent: list) -> None:
    """Each time a run of `job` is RUNNING: the warning every 50 ms for its first 3 s."""
    seen = -1
    while not stop.is_set():
        state, restarts = _state(cluster, job)
        if state == "RUNNING" and restarts != seen:
            seen, end = restarts, time.monotonic() + 3
            while time.monotonic() < end:
                try:
                    rc = cluster.run(["scancel", "--batch", "--signal=URG", job], timeout=30).returncode
                except subprocess.TimeoutExpired:
                    rc = 124
                sent.append((restarts, rc))
                time.sleep(0.05)
        time.sleep(0.05)


def _wait_end(cluster, job: str, timeout: float) -> tuple:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state, restarts = _state(cluster, job)
        if state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"):
            return state, restarts
        time.sleep(0.5)
    cluster.run(["scancel", job], timeout=30)
    raise AssertionError(f"job {job} not ended within {timeout} s")


def _saved(model: Path) -> int:
    m = re.search(r"model\.ckpt-(\d+)", (model / "checkpoint").read_text()) if (model / "checkpoint").exists() \
        else None
    return int(m.group(1)) if m else -1


@pytest.fixture(scope="module")
def rough(slurm_cluster, tmp_path_factory):
    """Both jobs, submitted together; the faults injected as they reach their moments."""
    tmp = tmp_path_factory.mktemp("rough")
    base = {"PYTHON": PYTHON, "TF_SLURM_REPO": str(REPO), "PYTHONPATH": str(REPO), "LOG_LEVEL": "INFO",
            "IB": "NoIB"}
    warn_model, away_model = tmp / "warned", tmp / "away"
    warn_model.mkdir()
    away_model.mkdir()
    res = slurm_cluster.run(
        ["sbatch", "--parsable", "--time=1", "--signal=B:URG@30", "-N2", "-n2", "-o", str(tmp / "warned-%j.out"),
         str(REPO / "scripts" / "tf_slurm_job.sh"), str(STEPS), str(warn_model), str(TARGET), str(FIRST_RUN)],
        timeout=60, env={**base, "MODEL_DIR": str(warn_model), "NUM_PS": "0", "TARGET": str(TARGET)}, cwd=str(tmp))
    assert res.returncode == 0, res.stderr
    warned = res.stdout.strip().split(";")[0]
    stop, sent = threading.Event(), []
    injector = threading.Thread(target=_warn_every_start, args=(slurm_cluster, warned, stop, sent), daemon=True)
    injector.start()
    res = slurm_cluster.run(
        [PYTHON, "-m", "tf_for_slurm", "submit", "--python", PYTHON, "--folder", str(tmp / "jobs"), "-N", "1",
         "-n", "1", "--ps", "0", "-t", "5", "--checkpoint-dir", str(away_model), "--target", str(TARGET), "--",
         PYTHON, str(STEPS), str(away_model), str(TARGET), str(FIRST_RUN), "5"],
        timeout=60, env={"PYTHONPATH": str(REPO)}, cwd=str(tmp))
    assert res.returncode == 0, res.stderr
    away = re.match(r"Submitted batch job (\d+)", res.stdout).group(1)
    away_log = tmp / "jobs" / away / "job.out"
    out = {"warned": {"job": warned, "model": warn_model, "sent": sent},
           "away": {"job": away, "model": away_model, "log": away_log}}
    try:
        # the warned job: once its first run trains, node2's slurmd restarted under its task
        wait_for_log(tmp / f"warned-{warned}.out", r"task 1: step 10", timeout=180)
        restart = subprocess.run(["bash", str(SCRIPT), "restart-slurmd", "node2"], capture_output=True, text=True,
                                 timeout=60, env={**slurm_cluster.env, "TF_SLURM_LOCAL_DIR": str(slurm_cluster.dir)})
        assert restart.returncode == 0, restart.stderr
        # the away job: told to stop once its first run waits at FIRST_RUN; its task checkpoints 5 s later
        wait_for_log(away_log.parent / "task-0.out", rf"task 0: step {FIRST_RUN}", timeout=180)
        assert slurm_cluster.run(["scancel", "--batch", "--signal=USR2", away], timeout=30).returncode == 0
        wait_for_log(away_log, r"passed SIGUSR2 on to the step", timeout=60)
        _controller(slurm_cluster, "stop")
        try:
            text = wait_for_log(away_log, r"Slurm's controller does not answer", timeout=60)
            out["away"]["during"] = text
            status = subprocess.run([PYTHON, "-m", "tf_for_slurm", "status", away, "--folder", str(tmp / "jobs")],
                                    capture_output=True, text=True, timeout=60,
                                    env={**slurm_cluster.env, "PYTHONPATH": str(REPO)})
            out["away"]["status"] = status
            time.sleep(5)  # an outage of some seconds more: the retries go on (the test's choice of length)
        finally:
            _controller(slurm_cluster, "start")
        out["away"]["end"] = _wait_end(slurm_cluster, away, 300)
        out["warned"]["end"] = _wait_end(slurm_cluster, warned, 400)
    finally:
        stop.set()
        injector.join(timeout=60)
    out["warned"]["log"] = (tmp / f"warned-{warned}.out").read_text(errors="replace")
    out["away"]["text"] = away_log.read_text(errors="replace")
    return out


@pytest.mark.timeout(900)
def test_the_warning_at_every_runs_start_and_a_slurmd_restart_end_completed_at_the_target(rough):
    job = rough["warned"]
    log = job["log"]
    assert job["end"][0] == "COMPLETED" and job["end"][1] >= 1, (job["end"], log[-6000:])
    assert _saved(job["model"]) == TARGET, log[-4000:]
    runs = {r for r, rc in job["sent"] if rc == 0}
    assert {0, job["end"][1]} <= runs, job["sent"]  # the warning reached the first run's start and the last's
    assert "SIGUSR1 reached the batch shell" in log, log[-6000:]  # once trapped, a warning like any other
    assert "died by signal" not in log and "srun: error" not in log.partition("run 2 of job")[0], log[-6000:]


@pytest.mark.timeout(900)
def test_the_controller_away_at_the_requeue_is_waited_for_and_the_job_completes(rough):
    job = rough["away"]
    text = job["text"]
    assert job["end"][0] == "COMPLETED" and job["end"][1] == 1, (job["end"], text[-6000:])
    assert _saved(job["model"]) == TARGET, text[-4000:]
    assert len(re.findall(r"scontrol requeue \d+: Slurm's controller does not answer", text)) == 1, text[-6000:]
    assert re.search(r"scontrol requeue \d+: Slurm's controller answered again after \d+ s", text), text[-6000:]
    assert re.search(r"requeued job \d+", text) and "is the job requeueable" not in text, text[-6000:]
    status = job["status"]
    assert "controller does not answer" in status.stdout and "does not know it" not in status.stdout, \
        (status.stdout, status.stderr)
