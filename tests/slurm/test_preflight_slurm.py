"""Under real Slurm: a job whose task's planned port another process holds ends at once with the check's
one line, before any command started.

The job is the template (`sbatch scripts/tf_slurm_job.sh`: batch-step, `srun ... tf-slurm exec`), 3 tasks
on 3 emulated nodes, TF_SLURM_BASE_PORT fixed to a block whose second port the test holds with a plain
listening socket of its own (every emulated node is this machine): worker 1's supervisor cannot listen
there.  Without the check the job would wait in TensorFlow until its time limit.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import time
from pathlib import Path

import pytest
from ports import free_base_port

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(240)]

REPO = Path(__file__).resolve().parents[2]
JOB_TEMPLATE = REPO / "scripts" / "tf_slurm_job.sh"
PYTHON = str(REPO / ".venv" / "bin" / "python")
TRAIN = """import os, sys
open(os.path.join(sys.argv[1], "ran." + os.environ.get("SLURM_PROCID", "?")), "w").close()
"""


def test_a_job_whose_planned_port_is_taken_ends_at_once_with_the_line(slurm_cluster, tmp_path):
    os.chmod(tmp_path, 0o755)
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    base = free_base_port(3)
    with socket.create_server(("0.0.0.0", base + 1)):  # worker 1's planned port, on every emulated node
        t0 = time.monotonic()
        job, info = slurm_cluster.sbatch_poll(
            ["-N3", "-n3", "-t", "3", "-o", str(tmp_path / "job-%j.out"), str(JOB_TEMPLATE), str(script),
             str(tmp_path)],
            timeout=150, cwd=str(tmp_path),
            env={"PYTHON": PYTHON, "IB": "NoIB", "NUM_PS": "0", "TF_SLURM_REPO": str(REPO), "LOG_LEVEL": "INFO",
                 "MODEL_DIR": str(tmp_path / "model"), "TF_SLURM_BASE_PORT": str(base),
                 "TF_SLURM_JOBS_ROOT": str(tmp_path / "jobs")})
        took = time.monotonic() - t0
    log = (tmp_path / f"job-{job}.out").read_text(errors="replace")
    assert info["JobState"] == "FAILED" and info["ExitCode"].startswith("2:"), (info, log[-3000:])
    assert took < 60, (took, log[-3000:])  # its time limit is 3 minutes; the check's own bound: 10 s + grace
    assert not list(tmp_path.glob("ran.*")), log[-3000:]  # no command started: no TensorFlow either
    ours = re.findall(r"tf-slurm: ERROR: preflight: .*", log)
    assert len(ours) == 1, log[-3000:]
    assert (f"worker 1 (rank 1, node2) cannot listen on its planned address node2:{base + 1}: port {base + 1} on "
            "node2 is held by a process that is not this step's supervisor (another job?); fix: a port range free on "
            "every node (TF_SLURM_BASE_PORT) or srun --resv-ports") in ours[0], ours
    shown = subprocess.run([PYTHON, "-m", "tf_for_slurm", "status", str(tmp_path / "jobs" / job)],
                           capture_output=True, text=True, timeout=60, env=slurm_cluster.env)
    shown = shown.stdout + shown.stderr
    assert "first failure: worker 1 on node2 failed (exit 2): preflight: worker 1 (rank 1, node2) cannot listen" \
        in shown, shown
