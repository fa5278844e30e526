"""Real Slurm (the local 3-node cluster): scripts written for TensorFlow's SlurmClusterResolver, in
the style of three centres' documentation (tests/unmodified/resolver_*.py), run unmodified under
`tf-slurm submit` and the generic template, with 1 and 2 tasks per node; two of them at once on the
same nodes, both with port_base=... in the script, never collide; a contradiction ends the job at
once with its fix line in `tf-slurm status`.

The jobs of this module are submitted together where the cluster holds them (the module pays the
longest path, not the sum):
- `long`: submit, MWMS Keras fit, 2 nodes x 2 tasks, training until cancelled (it holds its ports),
  paced (unpaced, its 4 workers kept the 2 cores busy and the module took 72-148 s);
- `renaming`: the template, a host-renaming subclass, MWMS, node1 and node2 x 1 task, started once
  `long` trains there: it completes while `long` still runs (two jobs at once, by construction);
- `tf1`: submit, TF1 ps/worker with jobs= and tasks_per_node=2, 2 nodes x 2 tasks: completes;
- `misfit`: submit, the same TF1 script on 3 nodes x 1 task: FAILED within seconds, fix line.
"""

from __future__ import annotations

import ast
import json
import re
import time
from pathlib import Path
from typing import Dict

import pytest
from slurm_harness import PYTHON, REPO, wait_for_log

pytestmark = pytest.mark.slurm

SCRIPTS = REPO / "tests" / "unmodified"
TEMPLATE = REPO / "scripts" / "tf_slurm_job.sh"
ENV = {"PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "2"}


def _submit(cluster, tmp: Path, args) -> str:
    res = cluster.run([PYTHON, "-m", "tf_for_slurm", "submit", "--python", PYTHON, "--folder", str(tmp / "jobs"),
                       *args], timeout=60, env=ENV, cwd=str(tmp))
    assert res.returncode == 0, res.stderr
    m = re.match(r"Submitted batch job (\d+)\n", res.stdout)
    assert m, res.stdout
    return m.group(1)


def _clusters(text: str) -> Dict[str, dict]:
    """rank -> {'cluster', 'task', 'gpus'} from the scripts' 'cluster {...} task T I gpus G' lines."""
    found = {}
    for m in re.finditer(r"^(?:(\d+): )?cluster (\{.*\}) task (\w+) (\d+) gpus (\d+)$", text, re.M):
        found[m.group(1) or "?"] = {"cluster": ast.literal_eval(m.group(2)), "task": (m.group(3), int(m.group(4))),
                                    "gpus": int(m.group(5))}
    return found


def _task_logs(folder: Path, n: int) -> Dict[str, str]:
    return {str(r): (folder / f"task-{r}.out").read_text(errors="replace") for r in range(n)}


def _ports(cluster: dict) -> set:
    return {(a.rsplit(":", 1)[0], int(a.rsplit(":", 1)[1])) for addrs in cluster.values() for a in addrs}


@pytest.fixture(scope="module")
def jobs(slurm_cluster, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("resolver")
    out: Dict[str, dict] = {}
    try:
        out["long"] = {"job": _submit(slurm_cluster, tmp, [
            "-N", "2", "--ntasks-per-node", "2", "--ps", "0", "--sbatch-arg=--nodelist=node1,node2", "-t", "10",
            "--", PYTHON, str(SCRIPTS / "resolver_mwms_fit.py"), "--epochs", "1000000", "--pace", "0.2"])}
        out["tf1"] = {"job": _submit(slurm_cluster, tmp, [
            "-N", "2", "--ntasks-per-node", "2", "-t", "5", "--",
            PYTHON, str(SCRIPTS / "resolver_tf1_ps_worker.py"), "--steps", "100"])}
        out["misfit"] = {"job": _submit(slurm_cluster, tmp, [
            "-N", "3", "--ntasks-per-node", "1", "-t", "5", "--",
            PYTHON, str(SCRIPTS / "resolver_tf1_ps_worker.py"), "--workers", "2"])}
        long_folder = tmp / "jobs" / out["long"]["job"]
        wait_for_log(long_folder / "task-0.out", r"worker 0 training", 240)
        res = slurm_cluster.run(
            ["sbatch", "--parsable", "-N2", "-n2", "--nodelist=node1,node2", "-t", "5",
             "-o", str(tmp / "renaming-%j.out"), str(TEMPLATE), str(SCRIPTS / "resolver_renaming_fit.py")],
            timeout=60, env={**ENV, "PYTHON": PYTHON, "TF_SLURM_REPO": str(REPO), "NUM_PS": "0", "IB": "NoIB",
                             "LOG_LEVEL": "INFO"}, cwd=str(tmp))
        assert res.returncode == 0, res.stderr
        job = res.stdout.strip().split(";")[0]
        out["renaming"] = {"job": job, "log": tmp / f"renaming-{job}.out"}
        for name in ("misfit", "tf1", "renaming"):
            out[name]["info"] = slurm_cluster.wait_job(out[name]["job"], 300)
        out["long"]["state_then"] = slurm_cluster.show_job(out["long"]["job"]).get("JobState")
        out["long"]["logs"] = _task_logs(long_folder, 4)
        started = {name: slurm_cluster.show_job(out[name]["job"]).get("StartTime") for name in ("long", "renaming")}
        out["started"] = started
    finally:
        for entry in out.values():
            if isinstance(entry, dict) and "job" in entry and "info" not in entry:
                slurm_cluster.run(["scancel", str(entry["job"])], timeout=30)
    out["tmp"] = tmp
    return out


@pytest.mark.timeout(600)
def test_two_resolver_jobs_at_once_on_the_same_nodes_never_collide(jobs):
    """`renaming` ran and completed on node1,node2 while `long` trained there (long RUNNING before it
    started, still RUNNING after it ended); both scripts ask for port_base 15000 / 12345, neither got it."""
    info = jobs["renaming"]["info"]
    log = Path(jobs["renaming"]["log"]).read_text(errors="replace")
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", (info, log[-4000:])
    assert jobs["long"]["state_then"] == "RUNNING", jobs["long"]
    long_seen = _clusters(jobs["long"]["logs"]["0"])
    renamed_seen = _clusters(log)
    assert long_seen and sorted(renamed_seen) == ["0", "1"], (jobs["long"]["logs"]["0"][-3000:], log[-3000:])
    long_cluster = next(iter(long_seen.values()))["cluster"]
    renamed_cluster = renamed_seen["0"]["cluster"]
    assert len(long_cluster["worker"]) == 4 and len(renamed_cluster["worker"]) == 2
    # the subclass's _resolve_hostlist renamed node1, node2 to their addresses (127.0.0.1 here)
    assert all(a.startswith("127.0.0.1:") for a in renamed_cluster["worker"]), renamed_cluster
    long_ports = {p for _, p in _ports(long_cluster)}
    renamed_ports = {p for _, p in _ports(renamed_cluster)}
    assert not long_ports & renamed_ports and not {15000, 15001, 12345} & (long_ports | renamed_ports)
    assert [renamed_seen[r]["task"] for r in ("0", "1")] == [("worker", 0), ("worker", 1)]
    assert log.count(" done at ") == 2, log[-4000:]


@pytest.mark.timeout(600)
def test_tf1_script_with_jobs_and_two_tasks_per_node_completes(jobs):
    info = jobs["tf1"]["info"]
    folder = jobs["tmp"] / "jobs" / jobs["tf1"]["job"]
    logs = _task_logs(folder, 4)
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", (info, logs["1"][-3000:])
    seen = {r: _clusters(text)["?"]["task"] for r, text in logs.items()}
    assert seen == {"0": ("ps", 0), "1": ("worker", 0), "2": ("worker", 1), "3": ("worker", 2)}, seen
    assert all(f"worker {i} done at" in logs[str(i + 1)] for i in range(3)), logs


@pytest.mark.timeout(600)
def test_a_contradiction_fails_the_job_at_once_with_its_fix_line(slurm_cluster, jobs):
    info = jobs["misfit"]["info"]
    assert info["JobState"] == "FAILED", info
    res = slurm_cluster.run([PYTHON, "-m", "tf_for_slurm", "status", jobs["misfit"]["job"], "--folder",
                             str(jobs["tmp"] / "jobs")], timeout=60, env=ENV, cwd=str(jobs["tmp"]))
    assert "fix: run 2 tasks on each node" in res.stdout, res.stdout + res.stderr
    status = json.loads(slurm_cluster.run(
        [PYTHON, "-m", "tf_for_slurm", "status", jobs["misfit"]["job"], "--json", "--folder", str(jobs["tmp"] / "jobs")],
        timeout=60, env=ENV, cwd=str(jobs["tmp"])).stdout)
    step = status["step"]
    assert step["status"] == 1, step
    # the step ended by the chief's line, before any task trained (its end is not this machine's speed)
    logs = _task_logs(jobs["tmp"] / "jobs" / jobs["misfit"]["job"], 3)
    assert not any(" training" in text for text in logs.values()), logs
    assert time.time() > 0
