"""Real Slurm: a `tf-slurm submit -t 1` job whose minute is too short checkpoints on the warning,
requeues itself, resumes, and ends COMPLETED at the target, as the templates' jobs do
(tests/slurm/test_requeue_slurm.py) but with no template and no variable set by hand.

Costs 2-3 one-minute allocations, run beside the PreemptionCheckpointHandler job
(tests/slurm/one_minute_jobs.py).
The target no single allocation can reach, on a machine of any speed, comes from pacing (the
example's --min_step_seconds): 2 workers x (floor(65 / 0.24) + 1) = 542 < 600 steps (see
test_requeue_slurm's arithmetic).
"""

from __future__ import annotations

import re

import pytest

from one_minute_jobs import HAVE_MNIST, MNIST, SUBMIT_TARGET as TARGET

pytestmark = [pytest.mark.slurm, pytest.mark.skipif(not HAVE_MNIST, reason=f"real MNIST digits not found in {MNIST}")]


@pytest.mark.timeout(660)
def test_submitted_job_requeues_and_resumes_to_the_target(one_minute_jobs):
    # submitted with the PreemptionCheckpointHandler job of test_preemption_slurm.py (tests/slurm/one_minute_jobs.py)
    entry = one_minute_jobs["submit"]
    info, model, job = entry["info"], entry["model"], entry["job"]
    folder = entry["folder"]
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
