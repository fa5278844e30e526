"""Real Slurm: a `tf-slurm submit -t 1` job whose minute is too short checkpoints on the warning,
requeues itself, resumes, and ends COMPLETED at the target, as the templates' jobs do
(tests/slurm/test_requeue_slurm.py) but with no template and no variable set by hand.

Costs 2-3 one-minute allocations (about 2-3 minutes): run it with the other slow Slurm modules.
The target no single allocation can reach, on a machine of any speed, comes from pacing (the
example's --min_step_seconds): 2 workers x (floor(65 / 0.24) + 1) = 542 < 600 steps (see
test_requeue_slurm's arithmetic).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from data_paths import mnist_dir
from slurm_harness import PYTHON, REPO

MNIST = Path(mnist_dir())
HAVE_MNIST = any((MNIST / f"t10k-images-idx3-ubyte{ext}").exists() for ext in ("", ".gz"))
EXAMPLE = REPO / "examples" / "mnist_distributed" / "LaunchTFServerWithHooks.py"
STEP_S, WORKERS, TARGET = 0.24, 2, 600
ALLOCATION_S = 60 + 5  # -t 1 + the local cluster's KillWait

pytestmark = [pytest.mark.slurm, pytest.mark.skipif(not HAVE_MNIST, reason=f"real MNIST digits not found in {MNIST}")]


@pytest.mark.timeout(600)
def test_submitted_job_requeues_and_resumes_to_the_target(slurm_cluster, tmp_path):
    assert WORKERS * (math.floor(ALLOCATION_S / STEP_S) + 1) < TARGET  # by construction, not this machine's speed
    model = tmp_path / "model"
    res = slurm_cluster.run([
        PYTHON, "-m", "tf_for_slurm", "submit", "--python", PYTHON, "--folder", str(tmp_path / "jobs"),
        "-N", "3", "--ntasks-per-node", "1", "--ps", "1", "-t", "1", "--warn-margin", "15",
        "--checkpoint-dir", str(model), "--target", str(TARGET), "--",
        PYTHON, str(EXAMPLE), "--data_dir", str(MNIST), "--model_dir", str(model), "--Iterations", str(TARGET),
        "--ps", "1", "--workers", str(WORKERS), "--NoIB", "--min_step_seconds", str(STEP_S)],
        timeout=60, env={"PYTHONPATH": str(REPO)}, cwd=str(tmp_path))
    assert res.returncode == 0, res.stderr
    m = re.match(r"Submitted batch job (\d+)\n", res.stdout)
    assert m, res.stdout
    job = m.group(1)
    try:
        info = slurm_cluster.wait_job(job, 480)
    finally:  # never leave a job requeueing itself under the next tests
        slurm_cluster.run(["scancel", job], timeout=30)
    folder = tmp_path / "jobs" / job
    log = (folder / "job.out").read_text(errors="replace")
    chief = (folder / "task-1.out").read_text(errors="replace")  # worker 0, TensorFlow's chief
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", (info, log[-4000:], chief[-4000:])
    restarts = int(info.get("Restarts", "0"))
    assert restarts >= 1 and log.count("requeued job ") == restarts, (info, log[-4000:])
    assert re.search(r"SIGUSR1 \(\d+ s before the time limit\): telling the step's tasks to stop", log), log[-4000:]
    # the batch log and every task's log were appended to, not truncated, by each requeued run
    assert log.count(f"job {job}: 3 tasks") == restarts + 1, log[-4000:]
    saved = [int(x) for x in re.findall(r"requeued job \d+, .*to resume from global step (\d+)", log)]
    assert saved and all(re.search(rf"resumed from \S*model\.ckpt-{s}\b", chief) for s in saved), (
        saved, chief[-4000:])
    state = (model / "checkpoint").read_text()
    last = re.search(r'^model_checkpoint_path: ".*-(\d+)"$', state, re.M)
    assert last and TARGET <= int(last.group(1)) <= TARGET + 2, state  # async workers: one step in flight
