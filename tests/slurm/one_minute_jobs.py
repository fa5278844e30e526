"""Four 1-minute-limit jobs that must requeue to finish, submitted together and waited for together
(the `one_minute_jobs` fixture, tests/slurm/conftest.py), so the suite pays the longest of them, not
the sum: TensorFlow's PreemptionCheckpointHandler through the generic template
(test_preemption_slurm.py), a `tf-slurm submit -t 1` job (test_submit_requeue_slurm.py), a
batch-step job whose first step checkpoints but never stops (test_requeue_deadline_slurm.py), and a
template job that gets the time-limit warning again and again at every run's start
(test_rough_edges_slurm.py).  The submit job's worker 1 is also killed once, in the first run where it
trained (restarted in place: `tf-slurm report`'s page of a job with a restart and a requeue,
test_report_slurm.py).  A fifth job, not time-limited, shares their wait: an MWMS fit whose worker 1
starts late (tests/slurm/slow_start_job.py, test_start_wait_slurm.py).  Together they are 10 tasks on
the 3-node cluster (2 + 3 + 1 + 2 + 2 of its 12 CPUs).

Each target is one no allocation can reach on a machine of any speed, by pacing (the examples'
--min_step_seconds): see each test module's arithmetic.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import slow_start_job
from alone import alone
from data_paths import mnist_dir
from slurm_harness import PYTHON, REPO

MNIST = Path(mnist_dir())
HAVE_MNIST = any((MNIST / f"t10k-images-idx3-ubyte{ext}").exists() for ext in ("", ".gz"))
EXAMPLES = REPO / "examples" / "mnist_distributed"
ALLOCATION_S = 60 + 5 + 0  # --time=1 + the local cluster's KillWait + OverTimeLimit
# PreemptionCheckpointHandler (MWMS, 2 workers): synchronous steps, one pacer
PCH_STEP_S, PCH_TARGET = 0.07, 1000
# tf-slurm submit of the TF1 example (1 ps + 2 async workers, each its own pacer)
SUBMIT_STEP_S, SUBMIT_WORKERS, SUBMIT_TARGET = 0.24, 2, 600


def _pch(cluster, tmp: Path) -> Dict[str, object]:
    model = tmp / "pch"
    env = {"PYTHON": PYTHON, "TF_SLURM_REPO": str(REPO), "PYTHONPATH": str(REPO), "DATA_DIR": str(MNIST),
           "WARN_MARGIN": "15", "LOG_LEVEL": "INFO", "IB": "NoIB", "TF_CPP_MIN_LOG_LEVEL": "2",
           "MODEL_DIR": str(model), "NUM_PS": "0", "TARGET": str(PCH_TARGET)}
    res = cluster.run(["sbatch", "--parsable", "--time=1", "--signal=B:URG@30", "-N2", "-n2",
                       "-o", str(tmp / "pch-%j.out"), str(REPO / "scripts" / "tf_slurm_job.sh"),
                       str(EXAMPLES / "tf2_preemption.py"), "--data_dir", str(MNIST), "--model_dir", str(model),
                       "--Iterations", str(PCH_TARGET), "--min_step_seconds", str(PCH_STEP_S)],
                      timeout=60, env=env, cwd=str(tmp))
    assert res.returncode == 0, res.stderr
    job = res.stdout.strip().split(";")[0]
    return {"job": job, "model": model, "log": tmp / f"pch-{job}.out"}


def _submit(cluster, tmp: Path) -> Dict[str, object]:
    model = tmp / "submit-model"
    res = cluster.run([
        PYTHON, "-m", "tf_for_slurm", "submit", "--python", PYTHON, "--folder", str(tmp / "jobs"),
        "-N", "3", "--ntasks-per-node", "1", "--ps", "1", "-t", "1", "--warn-margin", "15",
        "--checkpoint-dir", str(model), "--target", str(SUBMIT_TARGET), "--",
        PYTHON, str(EXAMPLES / "LaunchTFServerWithHooks.py"), "--data_dir", str(MNIST), "--model_dir", str(model),
        "--Iterations", str(SUBMIT_TARGET), "--ps", "1", "--workers", str(SUBMIT_WORKERS), "--NoIB",
        "--min_step_seconds", str(SUBMIT_STEP_S)],
        timeout=60, env={"PYTHONPATH": str(REPO)}, cwd=str(tmp))
    assert res.returncode == 0, res.stderr
    m = re.match(r"Submitted batch job (\d+)\n", res.stdout)
    assert m, res.stdout
    return {"job": m.group(1), "model": model, "folder": tmp / "jobs" / m.group(1), "stdout": res.stdout}


def _task_pid(job: str, rank: int, script: str) -> Optional[Tuple[int, int, float]]:
    """(pid, SLURM_RESTART_COUNT, start time in epoch seconds) of the command (not its supervisor) of task
    `rank` of `job`, from /proc; None when none runs."""
    boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                if line.startswith("btime "))
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            argv = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")
            if len(argv) < 2 or not argv[1].decode(errors="replace").endswith(script):
                continue
            env = dict(x.split(b"=", 1) for x in Path(f"/proc/{name}/environ").read_bytes().split(b"\0") if b"=" in x)
            ticks = int(Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[19])
        except (OSError, IndexError, ValueError):
            continue
        if env.get(b"SLURM_JOB_ID") == job.encode() and env.get(b"SLURM_PROCID") == str(rank).encode():
            restarts = int(env.get(b"SLURM_RESTART_COUNT", b"0") or b"0")
            return int(name), restarts, boot + ticks / os.sysconf("SC_CLK_TCK")
    return None


def _kill_once(entry: Dict[str, object], rank: int, stop: threading.Event) -> None:
    """SIGKILL task `rank`'s command once status.json shows it trained (a progress report made after that
    command started), in the first run where it did: on a loaded machine a run's minute can end before
    TensorFlow's start-up is over (CI), so which run is not fixed; its supervisor restarts it in place.
    `entry['killed']`: (pid, step, run) then."""
    status = Path(str(entry["folder"])) / "status.json"
    while not stop.wait(0.2):
        try:
            track = (json.loads(status.read_text()).get("progress") or {}).get(str(rank)) or {}
        except (OSError, ValueError, AttributeError):
            continue
        step, at = track.get("step"), track.get("reported_at")
        if not isinstance(step, int) or step < 3 or not isinstance(at, (int, float)):
            continue
        found = _task_pid(str(entry["job"]), rank, "LaunchTFServerWithHooks.py")  # (/proc read only now: its cost)
        if found is None or at <= found[2]:
            continue  # not yet trained in this run (a report carried from an earlier run is older)
        pid, restarts, _started = found
        os.kill(pid, signal.SIGKILL)
        entry["killed"] = (pid, step, restarts + 1)
        return


# the first run's step checkpoints when told to stop, then runs on (a task that never stops); a
# requeued run's reaches the target and ends
HUNG_STEP = """#!/bin/bash
if [ "${SLURM_RESTART_COUNT:-0}" -ge 1 ]; then
  echo 'model_checkpoint_path: "model.ckpt-10"' > "$1/checkpoint"; echo "run 2: at the target"; exit 0
fi
trap 'echo "model_checkpoint_path: \\"model.ckpt-5\\"" > "$1/checkpoint"; echo "told: checkpointed, running on"' USR1
echo "run 1: never stops"
while :; do sleep 0.5; done
"""


def _hung(cluster, tmp: Path) -> Dict[str, object]:
    """sbatch -t 1 of `batch-step -- srun step` with no --signal (so the backstop stops it), no template."""
    folder = tmp / "hung"
    folder.mkdir()
    (folder / "step.sh").write_text(HUNG_STEP)
    (folder / "job.sh").write_text(
        f"#!/bin/bash\nexec {PYTHON} -m tf_for_slurm batch-step --checkpoint-dir {folder} --target 10 "
        f"--warn-margin 15 -- srun -n1 bash {folder / 'step.sh'} {folder}\n")
    res = cluster.run(["sbatch", "--parsable", "--time=1", "--requeue", "--open-mode=append", "-n1",
                       "-o", str(folder / "job.out"), str(folder / "job.sh")],
                      timeout=60, env={"PYTHONPATH": str(REPO)}, cwd=str(folder))
    assert res.returncode == 0, res.stderr
    return {"job": res.stdout.strip().split(";")[0], "model": folder, "log": folder / "job.out"}


# the warned job's training (no TensorFlow): a first run waits at WARNED_FIRST_RUN steps, a requeued one
# reaches WARNED_TARGET (tests/slurm_tasks/paced_steps.py) at 0.05 s a step: at least 8.5 s, so the
# injector sees that run RUNNING (its 2 s were too short to see on a busy machine)
PACED_STEPS = REPO / "tests" / "slurm_tasks" / "paced_steps.py"
WARNED_TARGET, WARNED_FIRST_RUN = 200, 30


def job_state(cluster, job: str) -> Tuple[str, int]:
    """(JobState, Restarts), or ('', -1) when scontrol does not answer (a controller stopped on purpose)."""
    try:
        res = cluster.run(["scontrol", "show", "job", job], timeout=30)
    except subprocess.TimeoutExpired:
        return "", -1
    state, restarts = re.search(r"JobState=(\S+)", res.stdout), re.search(r"Restarts=(\d+)", res.stdout)
    return (state.group(1), int(restarts.group(1))) if state and restarts else ("", -1)


def _warn_every_start(cluster, job: str, stop: threading.Event, sent: List[Tuple[int, int]]) -> None:
    """Each time a run of `job` is RUNNING: the time-limit warning (SIGURG to the batch shell) every 50 ms
    for its first 3 s: before the shell's trap, during it, during srun's start."""
    seen = -1
    while not stop.is_set():
        state, restarts = job_state(cluster, job)
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


def _warned(cluster, tmp: Path) -> Dict[str, object]:
    """The generic template, `--time=1 --signal=B:URG@30`, 2 tasks on 2 nodes, warned at every run's start."""
    model = tmp / "warned"
    model.mkdir()
    env = {"PYTHON": PYTHON, "TF_SLURM_REPO": str(REPO), "PYTHONPATH": str(REPO), "LOG_LEVEL": "INFO",
           "IB": "NoIB", "MODEL_DIR": str(model), "NUM_PS": "0", "TARGET": str(WARNED_TARGET)}
    res = cluster.run(["sbatch", "--parsable", "--time=1", "--signal=B:URG@30", "-N2", "-n2",
                       "-o", str(tmp / "warned-%j.out"), str(REPO / "scripts" / "tf_slurm_job.sh"),
                       str(PACED_STEPS), str(model), str(WARNED_TARGET), str(WARNED_FIRST_RUN)],
                      timeout=60, env=env, cwd=str(tmp))
    assert res.returncode == 0, res.stderr
    job = res.stdout.strip().split(";")[0]
    stop, sent = threading.Event(), []  # type: ignore[var-annotated]
    injector = threading.Thread(target=_warn_every_start, args=(cluster, job, stop, sent), daemon=True)
    injector.start()
    return {"job": job, "model": model, "log": tmp / f"warned-{job}.out", "sent": sent, "stop": stop,
            "injector": injector}


def run_together(cluster, tmp: Path, timeout: float = 600) -> Dict[str, Dict[str, object]]:
    """Submit the jobs, wait until all ended (each entry gains `info`: scontrol's view), and never
    leave one requeueing itself under the next tests."""
    assert math.floor(ALLOCATION_S / PCH_STEP_S) + 1 < PCH_TARGET  # by construction, not this machine's speed
    assert SUBMIT_WORKERS * (math.floor(ALLOCATION_S / SUBMIT_STEP_S) + 1) < SUBMIT_TARGET
    jobs: Dict[str, Dict[str, object]] = {}
    deadline = time.monotonic() + timeout
    stop_killer = threading.Event()
    with alone("one_minute_jobs"):  # no other test beside them (tests/alone.py)
        _submit_and_wait(cluster, tmp, jobs, deadline, stop_killer)
    return jobs


def _submit_and_wait(cluster, tmp: Path, jobs: Dict[str, Dict[str, object]], deadline: float,
                     stop_killer: threading.Event) -> None:
    try:
        if HAVE_MNIST:  # their tests skip without the digits
            jobs["pch"] = _pch(cluster, tmp)
            jobs["submit"] = _submit(cluster, tmp)
            killer = threading.Thread(target=_kill_once, args=(jobs["submit"], 2, stop_killer), daemon=True)
            killer.start()
        jobs["hung"] = _hung(cluster, tmp)
        jobs["warned"] = _warned(cluster, tmp)
        jobs["slow_start"] = slow_start_job.submit(cluster, tmp)
        for entry in jobs.values():
            entry["info"] = cluster.wait_job(str(entry["job"]), max(10.0, deadline - time.monotonic()))
    finally:
        stop_killer.set()
        for entry in jobs.values():
            if "info" not in entry:
                cluster.run(["scancel", str(entry["job"])], timeout=30)
        if "warned" in jobs:
            jobs["warned"]["stop"].set()  # type: ignore[union-attr]
            jobs["warned"]["injector"].join(timeout=60)  # type: ignore[union-attr]
