"""Real Slurm, issue 14 item 4: TensorFlow's PreemptionCheckpointHandler on a job whose 1-minute
limit is too short: warning -> checkpoint at the agreed step -> exit 42 -> requeue -> resume ->
COMPLETED at the target.

    sbatch -N2 -n2 --time=1 --signal=B:USR1@30 scripts/tf_slurm_job.sh \
        examples/mnist_distributed/tf2_preemption.py --data_dir D --model_dir M --Iterations 1000 \
        --min_step_seconds 0.07        (NUM_PS=0, WARN_MARGIN=15, TARGET=1000)

Paced as tests/slurm/test_requeue_slurm.py's MWMS job, so one allocation cannot reach the target on
a machine of any speed: the steps are synchronous (one pacer), at most floor(65 / 0.07) + 1 = 929
< 1000 steps in one allocation (60 s + KillWait 5 s).
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
JOB_TEMPLATE = REPO / "scripts" / "tf_slurm_job.sh"
EXAMPLE = REPO / "examples" / "mnist_distributed" / "tf2_preemption.py"
ALLOCATION_S = 60 + 5 + 0  # --time=1 + KillWait + OverTimeLimit
STEP_S, TARGET = 0.07, 1000

pytestmark = [pytest.mark.slurm, pytest.mark.skipif(not HAVE_MNIST, reason=f"real MNIST digits not found in {MNIST}")]


@pytest.mark.timeout(660)
def test_preemption_handler_checkpoints_exits_42_requeues_and_completes(slurm_cluster, tmp_path):
    assert math.floor(ALLOCATION_S / STEP_S) + 1 < TARGET  # by construction, not by this machine's speed
    model = tmp_path / "pch"
    env = {"PYTHON": PYTHON, "TF_SLURM_REPO": str(REPO), "PYTHONPATH": str(REPO), "DATA_DIR": str(MNIST),
           "WARN_MARGIN": "15", "LOG_LEVEL": "INFO", "IB": "NoIB", "TF_CPP_MIN_LOG_LEVEL": "2",
           "MODEL_DIR": str(model), "NUM_PS": "0", "TARGET": str(TARGET)}
    res = slurm_cluster.run(["sbatch", "--parsable", "--time=1", "--signal=B:USR1@30", "-N2", "-n2",
                             "-o", str(tmp_path / "pch-%j.out"), str(JOB_TEMPLATE), str(EXAMPLE),
                             "--data_dir", str(MNIST), "--model_dir", str(model), "--Iterations", str(TARGET),
                             "--min_step_seconds", str(STEP_S)], timeout=60, env=env, cwd=str(tmp_path))
    assert res.returncode == 0, res.stderr
    job = res.stdout.strip().split(";")[0]
    try:
        info = slurm_cluster.wait_job(job, 600)
    finally:  # a failure here must not leave the job requeueing itself under the next tests
        slurm_cluster.run(["scancel", job], timeout=30)
    log = (tmp_path / f"pch-{job}.out").read_text(errors="replace")
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", (info, log[-6000:])
    restarts = int(info.get("Restarts", "0"))
    assert restarts >= 1 and log.count("requeued job ") == restarts, (info, log[-6000:])
    # each requeue: the warning told the tasks, the handler saw it, every worker saved and exited 42
    assert re.search(r"SIGUSR1 \(\d+ s before the time limit\): telling the step's tasks to stop", log), log[-6000:]
    assert re.search(r"SIGUSR1 seen [0-9.]+ s ago: PreemptionCheckpointHandler will save at the agreed step and "
                     r"exit 42", log), log[-6000:]
    assert log.count("PreemptionCheckpointHandler: checkpoint saved, exiting with status 42") >= restarts, log[-6000:]
    saved = [int(x) for x in re.findall(r"requeued job \d+, .*status 42 \(checkpointed.*to resume from global "
                                        r"step (\d+)", log)]
    # every worker of each resumed run says where it restored from
    resumed = [int(x) for x in re.findall(r"^0: tf2_preemption: resumed from \S*ckpt-(\d+) at step \1$", log, re.M)]
    assert len(saved) == restarts and saved == resumed, (saved, resumed, log[-6000:])
    assert log.count(" tf2_preemption: resumed from ") == 2 * restarts, log[-6000:]
    assert all(0 < s < TARGET for s in saved) and saved == sorted(set(saved)), saved
    assert f"reached step {TARGET} of {TARGET}: done" in log, log[-6000:]
    state = (model / "checkpoint").read_text()
    assert f'model_checkpoint_path: "ckpt-{TARGET}"' in state, state
    print(f"\npreemption handler: {restarts} requeue(s) at steps {saved}")
