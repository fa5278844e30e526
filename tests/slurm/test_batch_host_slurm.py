"""Real Slurm: the batch host lost (issue 43 item 2).

    sbatch -N3 -n3 scripts/tf_slurm_job.sh batch_host_job.py   (the template: --no-kill --requeue)

The template's job on node[1-3]; batch-step on node1, the batch host, with the step's supervisor
(the hub, rank 0), or with a task of a step whose supervisor is on node2
(TASKS=worker,chief,worker).  node1 crashes (tests/slurm_harness.py lose_node: its slurmd, the
job's slurmstepd and processes there SIGKILLed at once).  Left alone, Slurm keeps such a
`--no-kill` job RUNNING with no batch script to its time limit (docs/SLURM_NODE_LOSS.md).  Here
rank 1's supervisor (node2), which lost the hub (or, as the hub, the task on node1), finds that a
step no longer starts on node1 (twice, 15 s apart: its slurmd is gone; Slurm's own NOT_RESPONDING
may take up to SlurmdTimeout, 300 s here), and requeues the job, saying why in the job's log.
node1 is then started again (as a rebooted node would be) and the requeued run COMPLETES.

The job's command is a plain program, not TensorFlow: what is tested is the supervisors' and Slurm's
part; it waits on run 1 until the node is lost, and ends at once on a later run.
"""

from __future__ import annotations

import json
import time

import pytest

from slurm_harness import PYTHON, REPO, lose_node, restore_nodes, wait_for_joined, wait_for_log

from tf_for_slurm.cli.status import run_history
from tf_for_slurm.supervise import batch_host

pytestmark = pytest.mark.slurm

JOB = """import os, sys, time
run = int(os.environ.get("SLURM_RESTART_COUNT") or 0) + 1
print(f"task {os.environ['SLURM_PROCID']} of run {run} on {os.environ['SLURMD_NODENAME']}", flush=True)
if run == 1:
    time.sleep(900)  # until its node is lost, or the job requeued
"""


@pytest.mark.parametrize("roles", [{"NUM_PS": "0"}, {"TASKS": "worker,chief,worker"}], ids=["spoke", "hub"])
def test_a_job_whose_batch_host_is_lost_is_requeued_by_a_surviving_task(slurm_cluster, tmp_path, roles):
    """`spoke`: the step's supervisor was on node1, rank 1 (node2) checks; `hub`: the chief's, the step's
    supervisor, is rank 1 on node2, and it checks after the step it supervised ended for node1's task."""
    cluster = slurm_cluster
    script = tmp_path / "batch_host_job.py"
    script.write_text(JOB)
    env = {"PYTHON": PYTHON, "PYTHONPATH": str(REPO), "IB": "NoIB", "MODEL_DIR": str(tmp_path / "m"),
           "TF_SLURM_JOBS_ROOT": str(tmp_path), **roles}
    res = cluster.run(["sbatch", "--parsable", "-N3", "-n3", "-o", str(tmp_path / "job-%j.out"),
                       str(REPO / "scripts" / "tf_slurm_job.sh"), str(script)], timeout=60, env=env, cwd=str(tmp_path))
    assert res.returncode == 0, res.stderr
    job = res.stdout.strip().split(";")[0]
    log = tmp_path / f"job-{job}.out"
    restored = False
    try:
        wait_for_log(log, r"(?s)(task \d of run 1 on.*){3}", 120, unless=r"srun exit status")
        wait_for_joined(tmp_path / job, 3, 60)  # a node lost before its peers joined is another case
        assert cluster.show_job(job).get("BatchHost") == "node1"
        lost_at = time.time()
        assert len(lose_node(cluster, "node1", job)) >= 3
        deadline = time.monotonic() + 240  # two probes (~11 s each, 15 s apart), the turn
        while cluster.show_job(job).get("Restarts") == "0":
            assert time.monotonic() < deadline, (cluster.show_job(job), log.read_text(errors="replace")[-3000:])
            time.sleep(1)
        print(f"job {job}: requeued {time.time() - lost_at:.1f} s after its batch host was lost")
        restore_nodes(cluster)  # the node back, as after a reboot: Slurm then lets the requeued run start
        restored = True
        info = cluster.wait_job(job, 180)
    finally:
        if not restored:
            restore_nodes(cluster)
    text = log.read_text(errors="replace")
    assert info["JobState"] == "COMPLETED" and info.get("Restarts") == "1", (info, text[-4000:])
    assert "task 0 of run 2 on" in text, text[-4000:]
    line = [x for x in text.splitlines() if "its batch host node1 lost" in x]
    assert line and line[0].startswith("tf-slurm exec (task 1 on node2): requeued job " + job), text[-4000:]
    assert "could not start there" in line[0] or "Slurm says" in line[0], line
    # batch.json: run 1, which its batch-step (dead with node1) left running, says what the task did
    batch = json.loads((tmp_path / job / "batch.json").read_text())
    first = batch["history"][0]
    assert (batch["run"], first["run"], first["state"]) == (2, 1, "requeued"), batch
    assert first["decision"] == "task 1 on node2: " + line[0].split(": ", 1)[1], (first, line[0])
    assert any(x.endswith("run 1: requeued: " + first["decision"]) for x in run_history(batch)), run_history(batch)


def test_the_probe_runs_on_a_live_node_beside_a_step_that_holds_its_memory(slurm_cluster, tmp_path):
    """The check's first look (supervise.batch_host.probe): on a node that lives, its step of `true` runs
    beside the job's step, which holds the CPUs and memory asked (`--overlap`), whatever SLURM_* variables
    of that step the task's environment carries; so a lost process alone is left to batch-step at once."""
    cluster = slurm_cluster
    script = tmp_path / "sleep.sh"
    script.write_text("#!/bin/bash\nsrun --no-kill -N3 -n3 -c1 --mem-per-cpu=1024M sleep 300\n")
    job, ran = None, None
    try:
        res = cluster.run(["sbatch", "--parsable", "-N3", "-n3", "-c1", "--mem-per-cpu=1024M", "-o",
                           str(tmp_path / "job.out"), str(script)], timeout=60, cwd=str(tmp_path))
        assert res.returncode == 0, res.stderr
        job = res.stdout.strip().split(";")[0]
        deadline = time.monotonic() + 60
        while f"{job}.0" not in cluster.run(["squeue", "-h", "-s", "-j", job, "-o", "%i"], timeout=30).stdout.split():
            assert time.monotonic() < deadline, "the job's step never started"
            time.sleep(0.5)
        step_vars = {"SLURM_JOB_ID": job, "SLURM_STEP_ID": "0", "SLURM_NTASKS": "3", "SLURM_NNODES": "3",
                     "SLURM_MEM_PER_CPU": "1024", "SLURM_CPUS_PER_TASK": "1", "SLURM_PROCID": "1"}
        ran = batch_host.probe(job, "node1", {**cluster.env, **step_vars})
    finally:
        if job:
            cluster.run(["scancel", job], timeout=30)
    assert ran is None, ran
