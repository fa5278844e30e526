"""Under real Slurm: another Unix user attacks a running template job's supervision channel.

The job is `sbatch scripts/tf_slurm_job.sh` (batch-step, a fresh secret, `srun ... tf-slurm exec`)
with NUM_PS=0 and 3 tasks; the attacker (`nobody`, tests/attacker.py) finds the hub's port the
way any user can (`ss -ltn` on the node; here the test points it at the chief's supervisor) and
sends fake hellos, exits and ends for as long as the chief's program waits for the test's `go`.
The job must COMPLETE with every task's status 0 and no requeue, as it does without the attacker.
"""

from __future__ import annotations

import os
import re
import select
import shutil
import subprocess
import time
from pathlib import Path
from typing import Dict, Optional

import pytest

from tf_for_slurm.host.environment import plan_from_env
from attacker import SYSTEM_PY, attacker

pytestmark = [
    pytest.mark.slurm,
    pytest.mark.timeout(240),
    pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv") or not os.path.exists(SYSTEM_PY),
                       reason="needs root, setpriv and /usr/bin/python3 to run the attacker as nobody"),
]

REPO = Path(__file__).resolve().parents[2]
JOB_TEMPLATE = REPO / "scripts" / "tf_slurm_job.sh"
# the chief (rank 0) trains until the test says go; the others end at once: they wait in exec
TRAIN = """import os, sys, time
go = sys.argv[1]
if os.environ.get("SLURM_PROCID") == "0":
    end = time.time() + 120
    while not os.path.exists(go) and time.time() < end:
        time.sleep(0.05)
print("task", os.environ.get("SLURM_PROCID"), "done", flush=True)
"""


def _hub(job: str) -> Optional[Dict[str, str]]:
    """The chief's supervisor of `job`: its pid and environment (every emulated node is this machine)."""
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().split(b"\0")
            if b"tf_for_slurm" not in cmd or b"exec" not in cmd:
                continue
            env = dict(item.split("=", 1) for item in
                       (d / "environ").read_bytes().decode(errors="replace").split("\0") if "=" in item)
        except OSError:
            continue
        if env.get("SLURM_JOB_ID") == job and env.get("SLURM_PROCID") == "0" and env.get("SLURM_STEP_ID"):
            return {"pid": d.name, **env}
    return None


def _listening_port(pid: str, port: int) -> Optional[int]:
    """`port` once the process `pid` listens on it (before the hub, its check before the command holds the
    chief's planned TensorFlow port: supervise/preflight.py)."""
    out = subprocess.run(["ss", "-Hltnp"], capture_output=True, text=True, timeout=10).stdout
    for line in out.splitlines():
        if f"pid={pid}," in line and int(line.split()[3].rsplit(":", 1)[1]) == port:
            return port
    return None


def _wait(predicate, timeout: float, what: str):
    end = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"no {what} within {timeout} s")
        time.sleep(0.1)


def test_another_user_cannot_end_or_fake_complete_a_template_job(slurm_cluster, tmp_path):
    os.chmod(tmp_path, 0o755)
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    go = tmp_path / "go"
    out = tmp_path / "job-%j.out"
    res = slurm_cluster.run(
        ["sbatch", "--parsable", "-N3", "-n3", "-t", "3", "-o", str(out), str(JOB_TEMPLATE), str(script), str(go)],
        timeout=60, cwd=str(tmp_path),
        env={"PYTHON": str(REPO / ".venv" / "bin" / "python"), "IB": "NoIB", "NUM_PS": "0",
             "TF_SLURM_REPO": str(REPO), "MODEL_DIR": str(tmp_path / "model"), "LOG_LEVEL": "INFO"})
    assert res.returncode == 0, res.stderr
    job = res.stdout.strip().split(";")[0]
    evil = None
    try:
        hub = _wait(lambda: _hub(job), 90, "chief's supervisor")
        aux = plan_from_env(hub, check=False).me.aux_port
        port = _wait(lambda: _listening_port(hub["pid"], aux), 30, "listening port of the chief's supervisor")
        log = tmp_path / f"job-{job}.out"
        evil = attacker(port, f"{job}.{hub['SLURM_STEP_ID']}", "lines")
        # the chief is held by the test: every attack line goes out twice before it may end
        assert evil.stdout is not None
        end = time.monotonic() + 60
        rounds = 0
        while rounds < 3:
            ready, _, _ = select.select([evil.stdout], [], [], max(0.0, end - time.monotonic()))
            assert ready, "the attacker did not get through its lines within 60 s"
            rounds += evil.stdout.readline().strip() == "cycle"
    finally:
        if evil is not None:
            evil.kill()
            evil.wait()
        go.write_text("go")
    info = slurm_cluster.wait_job(job, 120)
    text = log.read_text(errors="replace")
    assert info["JobState"] == "COMPLETED" and info.get("Restarts") == "0", (info, text[-4000:])
    assert "srun exit status 0" in text, text[-4000:]
    assert len(re.findall(r"task \d done", text)) == 3, text[-4000:]
    assert "refused a connection from 127.0.0.1" in text  # the attack reached the hub
    for word in ("Traceback", "started again", "restarts every task", "requeued"):
        assert word not in text, text[-4000:]
    secret = [line for line in text.splitlines() if "TF_SLURM_SECRET=" in line]
    assert not secret, secret
