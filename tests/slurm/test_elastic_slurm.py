"""Real Slurm: a lost node with no spare left costs a worker, not the place in the queue (issue 43).

    MIN_WORKERS=2 NUM_PS=0 sbatch -N3 -n3 scripts/tf_slurm_job.sh tf2_mwms_backup.py ...

The tutorial-style MultiWorkerMirroredStrategy `fit` with BackupAndRestore (tests/unmodified/) on 3
workers, one per node, no spare node.  Mid-training node2 (worker 1) crashes: its slurmd, the job's
slurmstepd there and its task are SIGKILLed at once (tests/slurm_harness.py lose_node).  MWMS cannot
go on without a worker: the hub ends the step; with no healthy node to take node2's place,
batch-step starts the step again at once on node1 and node3 with 2 workers (MIN_WORKERS=2 allows
it), where `fit` resumes from the backed-up epoch.  The job COMPLETES, never requeued.  The same job
without MIN_WORKERS is the requeue case, unchanged: plan/relaunch's table tests it.

The same when node2 holds the chief but not the batch script (TASKS=worker,chief,worker): the step
starts again as worker,chief on node1 and node3.  The same for TF1 (`tf-slurm submit --tasks
worker,ps,worker --min-workers 1`, the unmodified
ps/worker script): the ps's node (node2) lost, the step starts again as `worker,ps` on node1 and
node3, the chief resumes from its checkpoint.

And a job Slurm starts on fewer nodes than its role list names (item 4: a node range, node3 drained,
as when it is busy with another job): the template with `#SBATCH --nodes=2-3` (MWMS, TASKS of 3
workers, MIN_WORKERS=2) and `tf-slurm submit -N 2-3 --tasks worker,ps,worker` (TF1) each train on
the 2 nodes they got.
"""

from __future__ import annotations

import json
import re
import time
from typing import Tuple

import pytest

from slurm_harness import ENDED, NOT_RELAUNCHED, PYTHON, REPO, lose_node, restore_nodes, wait_for_log

pytestmark = pytest.mark.slurm
SCRIPT = REPO / "tests" / "unmodified" / "tf2_mwms_backup.py"
TF1_SCRIPT = REPO / "tests" / "unmodified" / "tf1_ps_worker.py"
EPOCHS = 8


def _going_on(job: str, log, lost_at: float) -> None:
    """batch-step went on with fewer workers; the run's last srun then ended 0."""
    wait_for_log(log, r"relaunch 1 of 2", 120, unless=NOT_RELAUNCHED)
    print(f"job {job}: going on with fewer workers {time.time() - lost_at:.1f} s after the node was lost")
    wait_for_log(log, r"srun exit status 0\b", 240, unless=r"not requeued|requeued job")


def _completed(cluster, job: str, log) -> str:
    """The job COMPLETED, never requeued (waited for once the lost node is back: Slurm keeps the job
    COMPLETING until the dead step's node answers again)."""
    info = cluster.wait_job(job, 120)
    text = log.read_text(errors="replace")
    assert info["JobState"] == "COMPLETED" and info.get("Restarts") == "0", (info, text[-4000:])
    assert "requeued job" not in text, text[-4000:]
    return text


def _mwms_losing_node2(cluster, tmp_path, roles: dict, trainer: str) -> Tuple[str, str]:
    """The template's MWMS `fit` with BackupAndRestore on node[1-3], no spare, `roles` (NUM_PS or TASKS,
    MIN_WORKERS); node2 lost once `trainer` (a task name the script prints) begins epoch 2; the job
    goes on with fewer workers and COMPLETES, never requeued: (the job, its log)."""
    env = {"PYTHON": PYTHON, "PYTHONPATH": str(REPO), "IB": "NoIB", "TF_CPP_MIN_LOG_LEVEL": "2",
           "MODEL_DIR": str(tmp_path / "model"), "TF_SLURM_JOBS_ROOT": str(tmp_path), **roles}
    # paced: 8 epochs of 10 steps with 0.1 s after each, so the loss (in epoch 2) comes mid-training
    res = cluster.run(["sbatch", "--parsable", "-N3", "-n3", "-o", str(tmp_path / "job-%j.out"),
                       str(REPO / "scripts" / "tf_slurm_job.sh"), str(SCRIPT), "--backup-dir",
                       str(tmp_path / "backup"), "--epochs", str(EPOCHS), "--pace", "0.1"],
                      timeout=60, env=env, cwd=str(tmp_path))
    assert res.returncode == 0, res.stderr
    job = res.stdout.strip().split(";")[0]
    log = tmp_path / f"job-{job}.out"
    try:
        wait_for_log(log, rf"{trainer} epoch 2 at", 240, unless=ENDED)
        assert len(lose_node(cluster, "node2", job)) >= 3
        _going_on(job, log, time.time())
    finally:
        restore_nodes(cluster)
    return job, _completed(cluster, job, log)


@pytest.mark.timeout(420)
def test_mwms_job_with_no_spare_goes_on_with_fewer_workers_and_completes(slurm_cluster, tmp_path):
    job, text = _mwms_losing_node2(slurm_cluster, tmp_path, {"NUM_PS": "0", "MIN_WORKERS": "2"}, "worker 1")
    assert re.search(r"relaunch 1 of 2: lost node2; going on with 2 of 3 workers on node1,node3, [0-9.]+ s after "
                     r"the step ended", text), text[-4000:]
    second = text.split("relaunch 1 of 2", 1)[1]
    # two workers only in the second step; fit resumed from the backup (past epoch 0) and both finished
    assert "worker 2 " not in second, second[-3000:]
    resumed = [int(e) for e in re.findall(r"worker 1 epoch (\d+) at", second)]
    assert resumed and resumed[0] >= 1 and resumed[-1] == EPOCHS - 1, (resumed, second[-3000:])
    assert "worker 0 done" in second and "worker 1 done" in second, second[-3000:]
    batch = json.loads((tmp_path / job / "batch.json").read_text())
    assert [(r["lost"], r["nodes"], r.get("workers")) for r in batch["relaunches"]] == \
        [(["node2"], ["node1", "node3"], 2)], batch
    assert (batch["workers_planned"], batch["workers"]) == (3, 2), batch
    assert re.search(r"this run trained with 2 of 3 workers( from global step \d+)? \(short of nodes, "
                     r"TF_SLURM_MIN_WORKERS\)", text), text[-2000:]


@pytest.mark.timeout(420)
def test_mwms_job_whose_chief_node_is_lost_goes_on_with_the_chief_moved(slurm_cluster, tmp_path):
    """TASKS=worker,chief,worker (MWMS with a chief), MIN_WORKERS=1, no spare: node2, the chief's node but
    not the batch script's, lost; the step starts again as worker,chief on node1 and node3 (the chief
    moved, the last worker left out) and `fit` resumes from the backup."""
    job, text = _mwms_losing_node2(slurm_cluster, tmp_path, {"TASKS": "worker,chief,worker", "MIN_WORKERS": "1"},
                                   "chief 0")
    assert re.search(r"relaunch 1 of 2: lost node2; going on with 1 of 2 workers on node1,node3, [0-9.]+ s after "
                     r"the step ended", text), text[-4000:]
    second = text.split("relaunch 1 of 2", 1)[1]
    assert re.search(r"^1: chief 0 training$", second, re.M) and "worker 1 " not in second, second[-3000:]
    resumed = [int(e) for e in re.findall(r"chief 0 epoch (\d+) at", second)]
    assert resumed and resumed[0] >= 1 and resumed[-1] == EPOCHS - 1, (resumed, second[-3000:])
    assert "chief 0 done" in second and "worker 0 done" in second, second[-3000:]


@pytest.mark.timeout(420)
def test_tf1_job_whose_ps_node_is_lost_goes_on_with_the_ps_on_a_healthy_node(slurm_cluster, tmp_path):
    """`submit --tasks worker,ps,worker --min-workers 1`, no spare: node2 (the ps) lost; the step starts
    again as worker,ps on node1 and node3 (the last worker left out), the chief trains to the last step."""
    model = tmp_path / "model"
    # paced: 400 global steps, two workers each at most one step per 0.1 s: training lasts 20 s and more
    res = slurm_cluster.run([PYTHON, "-m", "tf_for_slurm", "submit", "--python", PYTHON, "--folder", str(tmp_path),
                             "-N", "3", "--ntasks-per-node", "1", "--tasks", "worker,ps,worker", "--min-workers", "1",
                             "-t", "5", "--checkpoint-dir", str(model), "--target", "400", "--",
                             PYTHON, str(TF1_SCRIPT), "--steps", "400", "--pace", "0.1", "--checkpoint-dir",
                             str(model)], timeout=60, env={"PYTHONPATH": str(REPO)}, cwd=str(tmp_path))
    assert res.returncode == 0, res.stderr
    job = re.match(r"Submitted batch job (\d+)\n", res.stdout).group(1)
    log, chief = tmp_path / job / "job.out", tmp_path / job / "task-0.out"
    try:
        wait_for_log(chief, r"worker 0 training from step \d+", 240, unless=ENDED)
        time.sleep(3)  # the loss mid-training (pacing makes it last 20 s and more)
        assert len(lose_node(slurm_cluster, "node2", job)) >= 3
        _going_on(job, log, time.time())
    finally:
        restore_nodes(slurm_cluster)
    text = _completed(slurm_cluster, job, log)
    assert re.search(r"relaunch 1 of 2: lost node2; going on with 1 of 2 workers on node1,node3, [0-9.]+ s after "
                     r"the step ended; it resumes from the checkpoint at global step \d+", text), text[-4000:]
    said = chief.read_text(errors="replace")
    assert len(re.findall(r"worker 0 training from step \d+", said)) == 2 and "worker 0 done" in said, said[-3000:]
    last = re.search(r'^model_checkpoint_path: ".*-(\d+)"$', (model / "checkpoint").read_text(), re.M)
    assert last and int(last.group(1)) >= 400, (model / "checkpoint").read_text()
    batch = json.loads((tmp_path / job / "batch.json").read_text())
    assert (batch["workers_planned"], batch["workers"]) == (2, 1), batch
    assert re.search(r"this run trained with 1 of 2 workers from global step \d+", text), text[-2000:]


@pytest.mark.timeout(420)
def test_a_job_started_on_fewer_nodes_than_asked_trains_with_fewer_workers(slurm_cluster, tmp_path):
    """The template with `#SBATCH --nodes=2-3` and no --ntasks (a task on each node Slurm gives; with
    --ntasks-per-node sbatch asks for MIN x K tasks and Slurm gives MIN nodes, measured) while node3 is
    drained (busy elsewhere): Slurm starts the job on 2 nodes; the
    role list TASKS=worker,worker,worker loses its last worker (MIN_WORKERS=2 allows it) and the MWMS
    `fit` trains on 2 workers to the end; the run's end line and batch.json say 2 of 3 (issue 43 item 4)."""
    env = {"PYTHON": PYTHON, "PYTHONPATH": str(REPO), "TASKS": "worker,worker,worker", "MIN_WORKERS": "2",
           "IB": "NoIB", "TF_CPP_MIN_LOG_LEVEL": "2", "MODEL_DIR": str(tmp_path / "model"),
           "TF_SLURM_JOBS_ROOT": str(tmp_path)}
    # the user's copy of the template: --nodes=2-3 and no --ntasks line (a task on each node Slurm gives)
    template = tmp_path / "tf_slurm_job.sh"
    text = (REPO / "scripts" / "tf_slurm_job.sh").read_text()
    assert "#SBATCH --nodes=3\n#SBATCH --ntasks=3\n" in text
    template.write_text(text.replace("#SBATCH --nodes=3\n#SBATCH --ntasks=3\n", "#SBATCH --nodes=2-3\n"))
    env["TF_SLURM_REPO"] = str(REPO)
    drained = slurm_cluster.run(["scontrol", "update", "NodeName=node3", "State=DRAIN", "Reason=tfs-test-busy"],
                                timeout=30)
    assert drained.returncode == 0, drained.stderr
    try:
        res = slurm_cluster.run(["sbatch", "--parsable", "-o", str(tmp_path / "job-%j.out"), str(template), str(SCRIPT),
                                 "--backup-dir", str(tmp_path / "backup"), "--epochs", "2"],
                                timeout=60, env=env, cwd=str(tmp_path))
        assert res.returncode == 0, res.stderr
        job = res.stdout.strip().split(";")[0]
        info = slurm_cluster.wait_job(job, 300)
    finally:
        slurm_cluster.run(["scontrol", "update", "NodeName=node3", "State=RESUME"], timeout=30)
    text = (tmp_path / f"job-{job}.out").read_text(errors="replace")
    assert info["JobState"] == "COMPLETED" and info["NumNodes"] == "2", (info, text[-4000:])
    assert re.search(r"names 3 roles for the step's 2 tasks \(an allocation smaller than asked\): its last 1 "
                     r"worker\(s\) left out \(TF_SLURM_MIN_WORKERS allows it\)", text), text[-4000:]
    assert "worker 0 done" in text and "worker 1 done" in text and "worker 2 " not in text, text[-4000:]
    batch = json.loads((tmp_path / job / "batch.json").read_text())
    assert (batch["workers_planned"], batch["workers"]) == (3, 2), batch
    assert "this run trained with 2 of 3 workers (short of nodes, TF_SLURM_MIN_WORKERS)" in text, text[-2000:]


@pytest.mark.timeout(420)
def test_submit_with_a_node_range_started_on_fewer_nodes_trains_there(slurm_cluster, tmp_path):
    """`tf-slurm submit -N 2-3 --tasks worker,ps,worker` while node3 is drained: the job starts on 2
    nodes as worker,ps (--min-workers defaults to the 1 worker 2 nodes keep) and the chief trains to
    its last step."""
    drained = slurm_cluster.run(["scontrol", "update", "NodeName=node3", "State=DRAIN", "Reason=tfs-test-busy"],
                                timeout=30)
    assert drained.returncode == 0, drained.stderr
    try:
        res = slurm_cluster.run([PYTHON, "-m", "tf_for_slurm", "submit", "--python", PYTHON, "--folder", str(tmp_path),
                                 "-N", "2-3", "--tasks", "worker,ps,worker", "-t", "5", "--",
                                 PYTHON, str(TF1_SCRIPT), "--steps", "50"], timeout=60,
                                env={"PYTHONPATH": str(REPO)}, cwd=str(tmp_path))
        assert res.returncode == 0, res.stderr
        job = re.match(r"Submitted batch job (\d+)\n", res.stdout).group(1)
        info = slurm_cluster.wait_job(job, 300)
    finally:
        slurm_cluster.run(["scontrol", "update", "NodeName=node3", "State=RESUME"], timeout=30)
    text = (tmp_path / job / "job.out").read_text(errors="replace")
    chief = (tmp_path / job / "task-0.out").read_text(errors="replace")
    assert info["JobState"] == "COMPLETED" and info["NumNodes"] == "2", (info, text[-3000:])
    assert "worker 0 done" in chief and not (tmp_path / job / "task-2.out").exists(), chief[-3000:]
    assert "this run trained with 1 of 2 workers (short of nodes, TF_SLURM_MIN_WORKERS)" in text, text[-3000:]
