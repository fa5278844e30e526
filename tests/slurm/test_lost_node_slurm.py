"""Real Slurm: a lost node costs nothing where TensorFlow can go on (issue 24 item 1).

    TASKS=chief,ps,worker,worker,worker sbatch -N3 -n5 scripts/tf_slurm_job.sh tf2_pss_fit.py ...

The tutorial-style ParameterServerStrategy `fit` (tests/unmodified/) on 3 workers, worker 2 alone on
node3.  Mid-training node3 crashes: its slurmd, the job's slurmstepd there and its tasks are
SIGKILLed at once (tests/slurm_harness.py lose_node).  Slurm would notice only after SlurmdTimeout
(300 s).  The hub goes on without the worker; the coordinator sends its functions to the others and
finishes; the templates' `srun --no-kill` keeps srun from ending the step, and batch-step ends the
srun that still waits for node3's task, keeping the hub's status.  The job COMPLETES, never requeued.
"""

from __future__ import annotations

import re
import time

import pytest

from slurm_harness import PYTHON, REPO, lose_node, restore_nodes, wait_for_log

pytestmark = pytest.mark.slurm
SCRIPT = REPO / "tests" / "unmodified" / "tf2_pss_fit.py"


@pytest.mark.timeout(400)
def test_pss_job_completes_without_the_worker_whose_node_was_lost(slurm_cluster, tmp_path):
    env = {"PYTHON": PYTHON, "PYTHONPATH": str(REPO), "TASKS": "chief,ps,worker,worker,worker", "IB": "NoIB",
           "TF_CPP_MIN_LOG_LEVEL": "2", "MODEL_DIR": str(tmp_path / "model")}
    # paced: 30 epochs with 0.3 s after each, so training goes on for 9 s and more after the loss
    res = slurm_cluster.run(["sbatch", "--parsable", "-N3", "-n5", "-o", str(tmp_path / "job-%j.out"),
                             str(REPO / "scripts" / "tf_slurm_job.sh"), str(SCRIPT), "--epochs", "30", "--pace", "0.3"],
                            timeout=60, env=env, cwd=str(tmp_path))
    assert res.returncode == 0, res.stderr
    job = res.stdout.strip().split(";")[0]
    log = tmp_path / f"job-{job}.out"
    try:
        wait_for_log(log, r"coordinator training", 200, unless=r"srun exit status")
        killed = lose_node(slurm_cluster, "node3", job)
        assert len(killed) >= 3, killed  # slurmd, slurmstepd, the task (its supervisor and command)
        lost_at = time.time()
        # batch-step's last word on the run; node3's slurmd must answer before Slurm can end the job
        text = wait_for_log(log, r"srun exit status", 200)
    finally:
        restore_nodes(slurm_cluster)
    info = slurm_cluster.wait_job(job, 120)
    text = log.read_text(errors="replace")
    assert info["JobState"] == "COMPLETED" and info.get("Restarts") == "0", (info, text[-4000:])
    assert "coordinator done" in text, text[-4000:]
    assert "worker 2 (rank 4, node3) was lost" in text and "going on without it" in text, text[-4000:]
    assert re.search(r"ended with status 0 after [0-9.]+ s: training is over; finished with 2 of 3 workers "
                     r"\(worker 2 on node3 lost at \d\d:\d\d:\d\d\)", text), text[-4000:]
    assert re.search(r"srun exit status \d+ \(ended by batch-step\); the step's: 0", text), text[-4000:]
    assert "requeued job" not in text, text[-4000:]
    print(f"job {job} ended its run {time.time() - lost_at:.1f} s after node3 was lost")
