"""Real Slurm (the local 3-node cluster): a heterogeneous job, parameter servers in one component,
workers in the other, one TensorFlow cluster.

One job, `sbatch -w node3 -n1 : -w node[1-2] --ntasks-per-node=2` (component order opposite to the
node names' order, the layout where SLURM_NODEID is not an index into the step's node list), runs
three steps of unmodified scripts from tests/unmodified/ under `tf-slurm exec --roles-by-component`:
1. TF1 ps/worker over both components in one step (`srun --het-group=0,1`);
2. ParameterServerStrategy `fit` over both components (`--chief`: the first worker coordinates);
3. TF1 again as two steps, one per component, started together (`srun --het-group=0 & srun
   --het-group=1`): every task plans the whole allocation, and one supervision ends both;
4. TF1 over both components with worker 2 SIGKILLed: the step fails as a plain one does, that
   worker named as the first failure (137), every other task ended.
Each step's status file (TF_SLURM_JOB_DIR per step) says where every task ran and how it ended.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import pytest
from slurm_harness import PYTHON, REPO

pytestmark = pytest.mark.slurm

UNMODIFIED = REPO / "tests" / "unmodified"
# the fault: the task of rank 3 (worker 2, on node2) is SIGKILLed as it starts; the others run the script
KILL_RANK_3 = 'if [ "$SLURM_PROCID" = 3 ]; then kill -KILL $$; fi; exec "$@"'


def _script(tmp: Path) -> str:
    py = shlex.quote(PYTHON)
    exec_ = f"{py} -m tf_for_slurm exec --roles-by-component ps,worker"
    tf1 = f"{py} {shlex.quote(str(UNMODIFIED / 'tf1_ps_worker.py'))} --steps 40"
    pss = f"{py} {shlex.quote(str(UNMODIFIED / 'tf2_pss_fit.py'))} --epochs 1 --steps-per-epoch 10"
    folder = shlex.quote(str(tmp))
    return f"""#!/bin/bash
export GRPC_POLL_STRATEGY=poll TF_CPP_MIN_LOG_LEVEL=2
export TF_SLURM_JOB_DIR={folder}/tf1
srun --het-group=0,1 --mpi=none -l {exec_} -- {tf1}
echo "STATUS tf1 $?"
export TF_SLURM_JOB_DIR={folder}/pss
srun --het-group=0,1 --mpi=none -l {exec_} --chief -- {pss}
echo "STATUS pss $?"
export TF_SLURM_JOB_DIR={folder}/separate
srun --het-group=0 --mpi=none -l {exec_} -- {tf1} &
ps_step=$!
srun --het-group=1 --mpi=none -l {exec_} -- {tf1} &
worker_step=$!
wait $ps_step; echo "STATUS separate-ps $?"
wait $worker_step; echo "STATUS separate-workers $?"
export TF_SLURM_JOB_DIR={folder}/killed
srun --het-group=0,1 --mpi=none -l {exec_} -- sh -c {shlex.quote(KILL_RANK_3)} sh {tf1}
echo "STATUS killed $?"
"""


def _step(folder: Path) -> dict:
    """The step's final state, from `tf-slurm status FOLDER --json` (the step's own file)."""
    res = subprocess.run([PYTHON, "-m", "tf_for_slurm", "status", str(folder), "--json"], capture_output=True,
                         text=True, timeout=60, cwd=str(REPO))
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)["step"]


def _tasks(folder: Path) -> list:
    """Each task's (role, index, node, status)."""
    step = _step(folder)
    return [(t["role"], t["index"], t["node"], t["status"]) for t in step["tasks"]]


@pytest.mark.timeout(420)
def test_hetjob_ps_component_and_worker_component(slurm_cluster, tmp_path):
    job_sh = tmp_path / "job.sh"
    job_sh.write_text(_script(tmp_path))
    out = tmp_path / "job.out"
    env = {"PYTHONPATH": str(REPO)}
    job, info = slurm_cluster.sbatch_poll(["-o", str(out), "-w", "node3", "-n1", ":", "-w", "node[1-2]",
                                           "--ntasks-per-node=2", str(job_sh)], timeout=360, env=env,
                                          cwd=str(tmp_path))
    log = out.read_text() if out.exists() else ""
    assert info["JobState"] == "COMPLETED", (info, log[-5000:])
    statuses = dict(line.split()[1:3] for line in log.splitlines() if line.startswith("STATUS "))
    assert statuses == {"tf1": "0", "pss": "0", "separate-ps": "0", "separate-workers": "0", "killed": "137"}, \
        log[-5000:]
    ps_and_workers = [("ps", 0, "node3", 0), ("worker", 0, "node1", 0), ("worker", 1, "node1", 0),
                      ("worker", 2, "node2", 0), ("worker", 3, "node2", 0)]
    assert _tasks(tmp_path / "tf1") == ps_and_workers, log[-5000:]
    assert _tasks(tmp_path / "separate") == ps_and_workers, log[-5000:]
    assert _tasks(tmp_path / "pss") == [("ps", 0, "node3", 0), ("chief", 0, "node1", 0), ("worker", 0, "node1", 0),
                                        ("worker", 1, "node2", 0), ("worker", 2, "node2", 0)], log[-5000:]
    assert "coordinator done" in log, log[-5000:]
    killed = _step(tmp_path / "killed")
    assert {k: killed["first_failure"][k] for k in ("role", "index", "node", "status")} == {
        "role": "worker", "index": 2, "node": "node2", "status": 137}, killed
    assert sorted(t["state"] for t in killed["tasks"]) == ["ended"] * 4 + ["exited"], killed
