"""End to end under real Slurm (local 3-node cluster): the sbatch template, failures, resume, and
`tf-slurm exec` for an unmodified TF_CONFIG script whose ps ends in server.join().

Slow (TensorFlow on 2 cores): about 3 minutes in all.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import uuid
from pathlib import Path
from typing import Dict, List, Optional

import pytest
from data_paths import mnist_dir

pytestmark = [pytest.mark.slurm, pytest.mark.tf]

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = REPO / "scripts" / "BASH_Distributed_MNIST.sh"
JOB_TEMPLATE = REPO / "scripts" / "tf_slurm_job.sh"
TASKS = REPO / "tests" / "slurm_tasks"
MNIST = Path(mnist_dir())
HAVE_MNIST = (MNIST / "t10k-images-idx3-ubyte.gz").exists() or (MNIST / "t10k-images-idx3-ubyte").exists()
needs_mnist = pytest.mark.skipif(not HAVE_MNIST, reason=f"real MNIST digits not found in {MNIST}")


def _python() -> str:
    from slurm_harness import PYTHON

    return PYTHON


def _procs_with_env(match: Dict[str, str], cmd_part: str) -> List[int]:
    """Pids of this machine's processes whose environment holds `match` and command line `cmd_part`.

    Every emulated node is this machine, so the test can find a given task's process directly.
    """
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if cmd_part not in cmd:
                continue
            env = dict(item.split("=", 1) for item in
                       (d / "environ").read_bytes().decode(errors="replace").split("\0") if "=" in item)
        except OSError:
            continue
        if all(env.get(k) == v for k, v in match.items()):
            pids.append(int(d.name))
    return pids


def _wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.1)


def _template_env(tmp: Path, model_dir: Path, iterations: int, times: Optional[Path] = None) -> Dict[str, str]:
    return {
        "PYTHON": str(TASKS / "timed.sh"), "REAL_PYTHON": _python(), "TASK_TIMES": str(times or tmp / "times"),
        "DATA_DIR": str(MNIST), "MODEL_DIR": str(model_dir), "ITERATIONS": str(iterations),
        "BATCH_SIZE": "64", "IB": "IB", "NUM_PS": "1", "LOG_LEVEL": "INFO",
    }


def _times(path: Path) -> Dict[int, tuple]:
    out = {}
    for line in path.read_text().splitlines():
        procid, rc, t = line.split()
        out[int(procid)] = (int(rc), float(t))
    return out


@pytest.fixture(scope="module")
def mnist_run(slurm_cluster, tmp_path_factory):
    """One full `sbatch --wait` of the MNIST template (shared by the checks below)."""
    if not HAVE_MNIST:
        pytest.skip(f"real MNIST digits not found in {MNIST}")
    tmp = tmp_path_factory.mktemp("mnist")
    model = tmp / "model"
    out = tmp / "job-%j.out"
    t0 = time.monotonic()
    # the ps is ended once both workers are done, possibly before it printed the line checked below:
    # timed.sh makes the workers' programs wait for it
    env = {**_template_env(tmp, model, 300), "TASK_PS_LINE": "all 2 workers reported done; exiting cleanly (status 0)"}
    job, info = slurm_cluster.sbatch_poll(["-o", str(out), str(TEMPLATE)], timeout=300, env=env, cwd=str(tmp))
    rc = int(info["ExitCode"].split(":")[0])
    elapsed = time.monotonic() - t0
    log = (tmp / f"job-{job}.out").read_text()
    return {"job": job, "rc": rc, "tmp": tmp, "model": model, "log": log, "elapsed": elapsed,
            "info": slurm_cluster.show_job(job)}


@needs_mnist
@pytest.mark.timeout(400)
def test_template_job_completes(mnist_run):
    r = mnist_run
    assert r["rc"] == 0, r["log"][-4000:]
    assert r["info"]["JobState"] == "COMPLETED", r["info"]
    assert r["info"]["ExitCode"] == "0:0"
    assert "srun exit status 0" in r["log"]
    assert "all 2 workers reported done; exiting cleanly (status 0)" in r["log"]
    # the template's own choices, as the job log reports them
    assert re.search(r"3 tasks on node\[1-3\] \(1 ps, 2 workers\), 1 CPU\(s\) and 1024 MB per CPU", r["log"])
    assert "node1-ib:" in r["log"]  # IB=IB: addresses use the -ib template
    # every task exited 0, and the ps left within 1 s of the last worker
    times = _times(r["tmp"] / "times")
    assert sorted(times) == [0, 1, 2] and all(rc == 0 for rc, _ in times.values()), times
    last_worker = max(times[1][1], times[2][1])
    assert times[0][1] - last_worker <= 1.0, times


@needs_mnist
@pytest.mark.timeout(400)
def test_template_checkpoint_and_accuracy(mnist_run):
    model = mnist_run["model"]
    assert (model / "checkpoint").exists()
    assert list(model.glob("model.ckpt-*.index")), sorted(p.name for p in model.iterdir())
    metrics = json.loads((model / "metrics.json").read_text())
    assert metrics["global_step"] >= 300
    assert metrics["accuracy"] >= 0.95, metrics  # held-out real digits (never trained on)
    m = re.search(r"held-out accuracy: ([0-9.]+) on (\d+) examples", mnist_run["log"])
    assert m and float(m.group(1)) >= 0.95 and int(m.group(2)) >= 1000


@needs_mnist
@pytest.mark.timeout(300)
def test_template_worker_killed_with_restarts_and_requeues_off_fails_job(slurm_cluster, tmp_path):
    # a SIGKILLed task is a retryable failure: with requeues on, batch-step would requeue the job once the
    # checkpoint advanced (tests/supervise/test_requeue.py); here neither restarts nor requeues may help
    out = tmp_path / "job-%j.out"
    env = {**_template_env(tmp_path, tmp_path / "model", 1_000_000), "TF_SLURM_MAX_RESTARTS": "0",
           "MAX_REQUEUES": "0"}
    res = slurm_cluster.run(["sbatch", "--parsable", "-o", str(out), str(TEMPLATE)], timeout=60,
                            env=env, cwd=str(tmp_path))
    assert res.returncode == 0, res.stderr
    job = res.stdout.strip().split(";")[0]
    try:
        log_path = tmp_path / f"job-{job}.out"
        # wait until training really runs (the chief's first checkpoint), then SIGKILL worker 1
        _wait_for(lambda: log_path.exists() and "Saving checkpoints for 0" in log_path.read_text(), 120,
                  "the chief to start training")
        victims = _wait_for(lambda: [p for p in _procs_with_env({"SLURM_JOB_ID": job, "SLURM_PROCID": "2"},
                                                                 "LaunchTFServerWithHooks.py")
                                     if "timed.sh" not in Path(f"/proc/{p}/cmdline").read_text(errors="replace")],
                            30, "worker 1's process")
        killed_at = time.monotonic()
        for pid in victims:
            os.kill(pid, signal.SIGKILL)
        info = slurm_cluster.wait_job(job, timeout=60)
        took = time.monotonic() - killed_at
    finally:
        slurm_cluster.run(["scancel", job], timeout=30)
    assert info["JobState"] == "FAILED", (info, log_path.read_text()[-3000:])
    assert took <= 60
    assert "srun exit status 0" not in log_path.read_text()


# -- interactive srun + tf-slurm exec, unmodified TF_CONFIG script --------------------------------
def _exec_srun(slurm_cluster, steps: int, mark_dir: Path, tag: str, stamp_exits: bool = False,
               job_dir: Optional[Path] = None, exec_args: tuple = ()) -> subprocess.Popen:
    """stamp_exits: each command's exit time goes to mark_dir/exit.<rank>, stamped from outside the
    script (its own last print comes before TensorFlow's interpreter teardown, 1-6 s here)."""
    command = [_python(), str(TASKS / "tf_config_train.py"), str(steps), str(mark_dir)]
    if stamp_exits:
        command = ["sh", "-c", f'"$@"; s=$?; date +%s.%N > {mark_dir}/exit.$SLURM_PROCID; exit $s', "sh", *command]
    argv = ["srun", "-N3", "-n4", "--mpi=none", "--kill-on-bad-exit=1", "-l",
            _python(), "-m", "tf_for_slurm", "exec", "--ps", "1", *exec_args, "--", *command]
    env = {**slurm_cluster.env, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "2", "TEST_TAG": tag,
           "GRPC_POLL_STRATEGY": "poll", **({"TF_SLURM_JOB_DIR": str(job_dir)} if job_dir else {})}
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            cwd=str(REPO))


@pytest.mark.timeout(300)
def test_exec_unmodified_script_completes(slurm_cluster, tmp_path):
    proc = _exec_srun(slurm_cluster, 300, tmp_path, uuid.uuid4().hex, stamp_exits=True)
    try:
        out, _ = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    ended = time.time()
    assert proc.returncode == 0, out[-4000:]
    done = [float(t) for t in re.findall(r"worker \d+ done at ([0-9.]+)", out)]
    assert len(done) == 3, out[-4000:]
    # the ps (in server.join()) was ended by the supervisor: the step ended shortly after the workers'
    # commands exited (timed from their exits, not their prints: teardown speed is not what is timed)
    exited = max(float((tmp_path / f"exit.{rank}").read_text()) for rank in (1, 2, 3))
    assert ended - exited < 10.0, (ended - exited, out[-3000:])


@pytest.mark.timeout(300)
def test_exec_unmodified_script_worker_killed_with_restarts_off_fails(slurm_cluster, tmp_path):
    tag = uuid.uuid4().hex
    job_dir = tmp_path / "job"
    proc = _exec_srun(slurm_cluster, 1_000_000, tmp_path, tag, job_dir=job_dir, exec_args=("--max-restarts", "0"))
    try:
        _wait_for(lambda: (tmp_path / "worker1.up").exists() or proc.poll() is not None, 150,
                  "worker 1 to start training")
        assert proc.poll() is None, proc.communicate()[0][-4000:]
        # tf-slurm status while it runs: every task running, with its role and node (the hub writes
        # within a second of a change, and every 5 s)
        _wait_for(lambda: _status(job_dir)["step"]["counts"] == {"running": 4}, 30, "every task running")
        view = _status(job_dir)
        assert [(t["role"], t["index"], t["node"], t["state"]) for t in view["step"]["tasks"]] == [
            ("ps", 0, "node1", "running"), ("worker", 0, "node1", "running"), ("worker", 1, "node2", "running"),
            ("worker", 2, "node3", "running")], view
        victims = _wait_for(lambda: [p for p in _procs_with_env({"TEST_TAG": tag}, "tf_config_train.py")
                                     if _task_of(p) == {"type": "worker", "index": 1}], 30,
                            "worker 1's process")
        killed_at = time.monotonic()
        for pid in victims:
            os.kill(pid, signal.SIGKILL)
        out, _ = proc.communicate(timeout=60)
        took = time.monotonic() - killed_at
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode != 0, out[-3000:]
    assert took <= 60
    assert "worker 1 done" not in out
    step = _status(job_dir)["step"]  # after the end: the killed worker failed first, the others were ended
    assert (step["state"], step["status"]) == ("ended", 137), step
    assert {k: step["first_failure"][k] for k in ("role", "index", "node", "status")} == {
        "role": "worker", "index": 1, "node": "node2", "status": 137}, step
    assert sorted(t["state"] for t in step["tasks"]) == ["ended", "ended", "ended", "exited"], step


def _status(job_dir: Path) -> dict:
    """`tf-slurm status FOLDER --json` (no Slurm job id: the step's own file only)."""
    if not (job_dir / "status.json").exists():  # the hub's first write is still to come
        return {"step": {"counts": None}}
    res = subprocess.run([_python(), "-m", "tf_for_slurm", "status", str(job_dir), "--json"], capture_output=True,
                         text=True, timeout=60, cwd=str(REPO))
    assert res.returncode == 0, res.stderr
    view = json.loads(res.stdout)
    return view if view["step"] else {"step": {"counts": None}}


def _task_of(pid: int) -> Optional[dict]:
    try:
        return json.loads(_environ(pid).get("TF_CONFIG", "null"))["task"]
    except (ValueError, TypeError, KeyError):
        return None


def _environ(pid: int) -> Dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
    except OSError:
        return {}
    return dict(item.split("=", 1) for item in raw.split("\0") if "=" in item)


# -- the generic template (tf_slurm_job.sh) -------------------------------------------------------
@pytest.mark.timeout(300)
def test_generic_template_runs_unmodified_script(slurm_cluster, tmp_path):
    """sbatch tf_slurm_job.sh SCRIPT ARGS: 1 ps (server.join()) + 3 workers, job COMPLETED."""
    out = tmp_path / "job-%j.out"
    job, info = slurm_cluster.sbatch_poll(
        ["-N3", "-n4", "-o", str(out), str(JOB_TEMPLATE), str(TASKS / "tf_config_train.py"), "200", str(tmp_path)],
        timeout=240, env={"PYTHON": _python(), "IB": "NoIB", "NUM_PS": "1", "TF_SLURM_REPO": str(REPO),
                          "MODEL_DIR": str(tmp_path / "model")}, cwd=str(tmp_path))
    log = (tmp_path / f"job-{job}.out").read_text()
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", (info, log[-4000:])
    assert len(re.findall(r"worker \d+ done at", log)) == 3, log[-4000:]
    assert "4 tasks on node[1-3] (1 ps), 1 CPU(s) and 1024 MB per CPU" in log
    assert "srun exit status 0" in log


# -- template input checks (no cluster needed) --------------------------------------------------
@pytest.mark.timeout(60)
@pytest.mark.parametrize("template", [TEMPLATE, JOB_TEMPLATE], ids=["mnist", "generic"])
@pytest.mark.parametrize("env,needle", [
    ({}, "SLURM_JOB_ID is not set"),
    ({"SLURM_JOB_ID": "1", "IB": "Infiniband"}, "IB='Infiniband': expected auto, IB or NoIB"),
    ({"SLURM_JOB_ID": "1", "NUM_PS": "x"}, "NUM_PS='x'"),
    ({"SLURM_JOB_ID": "1", "SYNC": "yes"}, "SYNC='yes': expected 0 or 1"),
])
def test_template_rejects_bad_settings(template, env, needle):
    args = [str(template)] + (["train.py"] if template == JOB_TEMPLATE else [])
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    res = subprocess.run(["bash", *args], env={**clean, **env}, capture_output=True, text=True, timeout=30)
    assert res.returncode == 2, res.stderr
    assert needle in res.stderr and res.stderr.count("\n") == 1


# -- a site that reserves ports (MpiParams=ports=...): a second local cluster ---------------------
@pytest.fixture(scope="module")
def resv_cluster(slurm_cluster):
    """Another 3-node cluster with MpiParams=ports=12000-12999 (own directory and ports)."""
    from slurm_harness import start_cluster, stop_cluster

    cluster, started = start_cluster(env={"TF_SLURM_LOCAL_DIR": str(slurm_cluster.dir) + "-resv",
                                          "TF_SLURM_LOCAL_PORT": "16917",
                                          "TF_SLURM_LOCAL_RESV_PORTS": "12000-12999"})
    yield cluster
    if started:
        stop_cluster(cluster)


@pytest.mark.timeout(300)
def test_generic_template_on_site_with_reserved_ports(resv_cluster, tmp_path):
    assert re.search(r"^MpiParams\s*=\s*ports=12000-12999", resv_cluster.config(), re.M)
    job, info = resv_cluster.sbatch_poll(
        ["-N3", "-n4", "-o", str(tmp_path / "job-%j.out"), str(JOB_TEMPLATE), str(TASKS / "tf_config_train.py"),
         "100", str(tmp_path)],
        timeout=240, env={"PYTHON": _python(), "IB": "IB", "TF_SLURM_REPO": str(REPO),
                          "MODEL_DIR": str(tmp_path / "model")}, cwd=str(tmp_path))
    log = (tmp_path / f"job-{job}.out").read_text()
    assert info["JobState"] == "COMPLETED", log[-4000:]
    assert "ports: --resv-ports=4" in log  # 2 x the busiest node's tasks (2,1,1)
    assert len(re.findall(r"worker \d+ done at", log)) == 3


@pytest.mark.timeout(120)
def test_plan_uses_reserved_ports_with_node_scope(resv_cluster):
    """One node, per-node port scope: the plan takes Slurm's reserved ports, and they work."""
    res = resv_cluster.srun(["-N1", "-n3", "--resv-ports=6", "--mpi=none", _python(),
                             str(TASKS / "plan_probe.py")], timeout=90,
                            env={"PYTHONPATH": str(REPO), "TF_SLURM_PORT_SCOPE": "node"}, cwd=str(REPO))
    assert res.returncode == 0, res.stderr[-3000:]
    rows = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
    assert len(rows) == 3 and all(r["port_scope"] == "node" for r in rows)
    reserved = rows[0]["resv_ports"]
    lo, hi = (int(p) for p in reserved.split("-"))
    assert hi - lo + 1 == 6 and 12000 <= lo and hi <= 12999
    assert sorted(r["port"] for r in rows) == [lo, lo + 1, lo + 2]  # TF ports from the reservation
    assert all(r["heard"] == sorted({0, 1, 2} - {r["rank"]}) for r in rows)
