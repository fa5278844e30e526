"""Real Slurm, issue 14 item 4: TensorFlow's PreemptionCheckpointHandler on a job whose 1-minute
limit is too short: warning -> checkpoint at the agreed step -> exit 42 -> requeue -> resume ->
COMPLETED at the target.

    sbatch -N2 -n2 --time=1 --signal=B:URG@30 scripts/tf_slurm_job.sh \
        examples/mnist_distributed/tf2_preemption.py --data_dir D --model_dir M --Iterations 1000 \
        --min_step_seconds 0.07        (NUM_PS=0, WARN_MARGIN=15, TARGET=1000)

Paced as tests/slurm/test_requeue_slurm.py's MWMS job, so one allocation cannot reach the target on
a machine of any speed: the steps are synchronous (one pacer), at most floor(65 / 0.07) + 1 = 929
< 1000 steps in one allocation (60 s + KillWait 5 s). It runs beside the `tf-slurm submit` job
(tests/slurm/one_minute_jobs.py).
"""

from __future__ import annotations

import re

import pytest

from one_minute_jobs import HAVE_MNIST, MNIST, PCH_TARGET as TARGET

pytestmark = [pytest.mark.slurm, pytest.mark.skipif(not HAVE_MNIST, reason=f"real MNIST digits not found in {MNIST}")]


@pytest.mark.timeout(660)
def test_preemption_handler_checkpoints_exits_42_requeues_and_completes(one_minute_jobs):
    # submitted with the `tf-slurm submit` job of test_submit_requeue_slurm.py (tests/slurm/one_minute_jobs.py)
    entry = one_minute_jobs["pch"]
    info, model = entry["info"], entry["model"]
    log = entry["log"].read_text(errors="replace")
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", (info, log[-6000:])
    restarts = int(info.get("Restarts", "0"))
    assert restarts >= 1 and log.count("requeued job ") == restarts, (info, log[-6000:])
    # each requeue: the warning told the tasks, the handler saw it, every worker saved and exited 42
    assert re.search(r"SIGUSR1 \(\d+ s before the time limit\): telling the step's tasks to stop", log), log[-6000:]
    assert re.search(r"SIGUSR1 seen [0-9.]+ s ago: PreemptionCheckpointHandler will save at the agreed step and "
                     r"exit 42", log), log[-6000:]
    saved = [int(x) for x in re.findall(r"requeued job \d+, .*status 42 \(checkpointed.*to resume from global "
                                        r"step (\d+)", log)]
    # a run whose minute ended before TensorFlow's start-up was over (a loaded machine: CI once saw a first run
    # reach global step 2) saved nothing: requeued from no checkpoint, before any run saved; every other
    # requeue is the handler's status 42
    fresh = re.findall(r"requeued job \d+[^\n]*to resume from no checkpoint yet", log)
    assert saved and len(saved) + len(fresh) == restarts, (saved, fresh, log[-6000:])
    assert log.count("PreemptionCheckpointHandler: checkpoint saved, exiting with status 42") >= len(saved), log[-6000:]
    # every worker of each resumed run says where it restored from
    resumed = [int(x) for x in re.findall(r"^0: tf2_preemption: resumed from \S*ckpt-(\d+) at step \1$", log, re.M)]
    assert saved == resumed, (saved, resumed, log[-6000:])
    assert log.count(" tf2_preemption: resumed from ") == 2 * len(saved), log[-6000:]
    assert all(0 < s < TARGET for s in saved) and saved == sorted(set(saved)), saved
    assert f"reached step {TARGET} of {TARGET}: done" in log, log[-6000:]
    state = (model / "checkpoint").read_text()
    assert f'model_checkpoint_path: "ckpt-{TARGET}"' in state, state
    print(f"\npreemption handler: {restarts} requeue(s) at steps {saved}")
