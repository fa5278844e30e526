"""Issue 14, item 5, under real Slurm: `sbatch --time=1 --signal=B:USR1@30` of the MNIST template
with its defaults (WARN_MARGIN=60, which batch-step caps at a quarter of the 60 s limit; MAX_REQUEUES=10)
and more work than one allocation holds completes via requeue.

Only what a user must set is set (PYTHON, DATA_DIR, MODEL_DIR), plus ITERATIONS and a pace: with
MIN_STEP_SECONDS=0.027 each of the 2 workers starts step k no earlier than 0.027 k s after its start, so
one allocation (60 s + KillWait 5 s) holds at most 2 * (65 / 0.027 + 1) = 4816 < 5000 global steps on
any machine, and the job needs at least one requeue.  Here (2 cores) a worker's own step takes ~0.025 s,
so the pace barely binds and the job runs as the unpaced default does: ~3000 global steps in the first
run, the target in the second, ~2.2 minutes (bench/bench_short_limit_requeue.py runs the unpaced
scenario N times and prints per-run figures).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from data_paths import mnist_dir
from slurm_harness import PYTHON, REPO

MNIST = Path(mnist_dir())
TEMPLATE = REPO / "scripts" / "BASH_Distributed_MNIST.sh"
TARGET, PACE, WORKERS, ALLOCATION_S = 5000, 0.027, 2, 60 + 5


@pytest.mark.slurm
@pytest.mark.timeout(480)
@pytest.mark.skipif(not any((MNIST / f"t10k-images-idx3-ubyte{e}").exists() for e in ("", ".gz")),
                    reason=f"real MNIST digits not found in {MNIST}")
def test_mnist_template_defaults_one_minute_limit_complete_via_requeue(slurm_cluster, tmp_path):
    assert WORKERS * (math.floor(ALLOCATION_S / PACE) + 1) < TARGET  # no allocation reaches it, by construction
    model = tmp_path / "model"
    job, info = slurm_cluster.sbatch_poll(
        ["--time=1", "--signal=B:USR1@30", str(TEMPLATE)], timeout=420, cwd=str(tmp_path),
        env={"PYTHON": PYTHON, "DATA_DIR": str(MNIST), "MODEL_DIR": str(model), "ITERATIONS": str(TARGET),
             "MIN_STEP_SECONDS": str(PACE)})
    log = (tmp_path / f"tf_mnist-{job}.out").read_text(errors="replace")
    # on failure: every run's timeline (batch-step's lines) and the log's end
    timeline = "\n".join(line for line in log.splitlines() if "batch-step" in line or "srun:" in line)
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", (info, timeline, log[-4000:])
    restarts = int(info["Restarts"])
    assert 1 <= restarts <= 10 and log.count(f"requeued job {job}, ") == restarts, (info, log[-6000:])
    # every run's step ended 0 (no task killed by an early SIGUSR1: status 138) and the last one at the target
    ends = re.findall(r"step ended with status (\d+)[^\n]*checkpoint at global step (\d+)", log)
    assert len(ends) == restarts + 1 and {s for s, _ in ends} == {"0"}, (ends, log[-6000:])
    last = re.search(r'^model_checkpoint_path: ".*-(\d+)"$', (model / "checkpoint").read_text(), re.M)
    assert last and TARGET <= int(last.group(1)) <= TARGET + 2, (last, log[-6000:])  # async: one step in flight
    print(f"\njob {job}: {restarts} requeue(s), checkpoints per run {[int(c) for _, c in ends]}")
