"""The templates and the CLI against the real local Slurm cluster (3 emulated nodes): the job's exit
code is the first failing task's own status, and an offline `explain --job-id` shows the ports the
job's tasks really use."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
JOB_TEMPLATE = REPO / "scripts" / "tf_slurm_job.sh"
TASKS = REPO / "tests" / "slurm_tasks"


def _python() -> str:
    from slurm_harness import PYTHON

    return PYTHON


TEMPLATES = {"mnist": REPO / "scripts" / "BASH_Distributed_MNIST.sh", "generic": JOB_TEMPLATE}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("template", sorted(TEMPLATES))
@pytest.mark.parametrize("status", ["1", "2"])
def test_job_exit_code_is_the_first_failing_tasks_status(slurm_cluster, tmp_path, template, status):
    """Task 2 exits 1 or 2, srun ends the others (SIGTERM) and returns 143: the job must say 1 or 2."""
    train = tmp_path / "train.py"  # (the generic template's script; the test python never runs it)
    train.write_text("raise SystemExit('not reached')\n")
    job, info = slurm_cluster.sbatch_poll(
        ["-N3", "-n3", "-o", str(tmp_path / "job-%j.out"), str(TEMPLATES[template])]
        + ([str(train)] if template == "generic" else []),
        timeout=240, env={"PYTHON": str(TASKS / "fail_python.sh"), "REAL_PYTHON": _python(), "IB": "NoIB",
                          "NUM_PS": "1", "TF_SLURM_REPO": str(REPO), "MODEL_DIR": str(tmp_path / "model"),
                          "DATA_DIR": str(tmp_path), "FAIL_STATUS": status, "FAIL_RANK": "2"},
        cwd=str(tmp_path))
    log = (tmp_path / f"job-{job}.out").read_text()
    assert info["JobState"] == "FAILED", (info, log[-3000:])
    assert "srun exit status 143" in log, log[-3000:]  # what the job said before
    assert info["ExitCode"] == f"{status}:0", (info["ExitCode"], log[-3000:])
    assert f"exit status {status} (the first failing task's)" in log


@pytest.mark.timeout(400)
def test_mnist_template_completes_when_a_worker_exits_0_at_start(slurm_cluster, tmp_path):
    """Worker 1's program exits 0 before starting its server (it never reports to the ps): the job
    still COMPLETES once worker 0 trained (its supervisor said it exited 0), not after a grace."""
    from data_paths import mnist_dir

    mnist = Path(mnist_dir())
    if not ((mnist / "t10k-images-idx3-ubyte.gz").exists() or (mnist / "t10k-images-idx3-ubyte").exists()):
        pytest.skip(f"real MNIST digits not found in {mnist}")
    job, info = slurm_cluster.sbatch_poll(
        ["-N3", "-n3", "-o", str(tmp_path / "job-%j.out"), str(TEMPLATES["mnist"])],
        timeout=300, env={"PYTHON": str(TASKS / "fail_python.sh"), "REAL_PYTHON": _python(), "OTHERS": "python",
                          "IB": "NoIB", "NUM_PS": "1", "TF_SLURM_REPO": str(REPO), "ITERATIONS": "100",
                          "MODEL_DIR": str(tmp_path / "model"), "DATA_DIR": str(mnist), "FAIL_STATUS": "0",
                          "FAIL_RANK": "2", "SUPERVISE": "1", "TF_SLURM_JOBS_ROOT": str(tmp_path / "jobs")},
        cwd=str(tmp_path))
    log = (tmp_path / f"job-{job}.out").read_text()
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", (info, log[-4000:])
    assert "held-out accuracy" in log, log[-4000:]  # worker 0 trained to the end
    # the job folder: the step's final state as the hub wrote it, and tf-slurm status reading it with Slurm's
    assert f"1: tf-slurm: INFO: step {job}.0 (tf1, 3 tasks) ended with status 0" in log, log[-4000:]
    res = slurm_cluster.run([_python(), "-m", "tf_for_slurm", "status", job, "--json", "--folder",
                             str(tmp_path / "jobs")], timeout=60, cwd=str(tmp_path))
    assert res.returncode == 0, res.stderr
    view = json.loads(res.stdout)
    assert view["slurm"]["JobState"] == "COMPLETED" and view["batch"]["state"] == "ended", view
    step = view["step"]
    assert (step["state"], step["status"], step["first_exit"]["rank"]) == ("ended", 0, 2), step
    assert [(t["role"], t["node"], t["state"], t["status"]) for t in step["tasks"]] == [
        ("ps", "node1", "ended", 0), ("worker", "node2", "exited", 0), ("worker", "node3", "exited", 0)], step
    from datetime import datetime

    # from the end of training (the chief's last evaluation, logged with its time), not from the job's
    # start: how fast TensorFlow starts and trains here is not what is timed
    trained = re.findall(r"^\d: (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),\d+ INFO Hooks: global step \d+: held-out accuracy",
                         log, re.M)
    assert trained, log[-4000:]
    took = (datetime.fromisoformat(info["EndTime"]) - datetime.fromisoformat(trained[-1])).total_seconds()
    assert took < 30, (took, log[-3000:])  # not after a grace (a ps's late-start grace alone is 30 s)


@pytest.mark.timeout(200)
def test_offline_explain_with_job_id_shows_the_jobs_ports(slurm_cluster):
    probe = ("import json, os; print(json.dumps({k: os.environ.get(k) for k in ('SLURM_JOB_ID', 'SLURM_STEP_ID', "
             "'SLURM_STEP_NODELIST', 'SLURM_STEP_TASKS_PER_NODE', 'TF_SLURM_PORT_SCOPE')}))")
    script = (f"if [ $SLURM_PROCID = 0 ]; then {_python()} -c \"{probe}\"; {_python()} -m tf_for_slurm explain "
              "--json --ps 1; fi")
    res = slurm_cluster.srun(["-N3", "-n4", "--mpi=none", "bash", "-c", script], timeout=150,
                             env={"PYTHONPATH": str(REPO)}, cwd=str(REPO))
    assert res.returncode == 0, res.stderr[-3000:]
    lines = res.stdout.splitlines()
    step, real = json.loads(lines[0]), json.loads(lines[1])
    offline_args = ["explain", "--json", "--ps", "1", "--nodelist", step["SLURM_STEP_NODELIST"],
                    "--tasks-per-node", step["SLURM_STEP_TASKS_PER_NODE"], "--job-id", step["SLURM_JOB_ID"],
                    "--step-id", step["SLURM_STEP_ID"]]
    if step["TF_SLURM_PORT_SCOPE"]:  # the local cluster's nodes share one host (see local_slurm.sh)
        offline_args += ["--port-scope", step["TF_SLURM_PORT_SCOPE"]]
    off = subprocess.run([_python(), "-m", "tf_for_slurm", *offline_args], capture_output=True, text=True,
                         timeout=60, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert off.returncode == 0, off.stderr
    offline = json.loads(off.stdout)
    assert [t["address"] for t in offline["tasks"]] == [t["address"] for t in real["tasks"]]
    assert offline["notes"]["port_window"] == real["notes"]["port_window"]
