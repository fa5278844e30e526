"""Issue 14, item 6: an unmodified MNIST-04-style sync script (SyncReplicasOptimizer aggregating both
workers, make_session_run_hook(is_chief), StopAtStepHook, TensorFlow's default 120 s
stop_grace_period_secs, the original done queue on the ps) ends its step with status 0 as soon as
training is over under `tf-slurm local -n 3 --tasks ps,worker,worker`, with the final checkpoint.

Without the shim's tf_slurm_sync_end the chief's command ends 120 s after its last step (a ps that
sleeps as the original's does) or never (a ps that leaves once both workers reported done: the
chief's session close waits for the sync runner's step towards the ps that is gone).  The bound is
on the time from the chief's last training step (printed by the script) to the end of its command,
so it does not depend on how fast the machine trains.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ports import free_base_port

pytestmark = [pytest.mark.tf,
              pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="needs TensorFlow")]

REPO = Path(__file__).resolve().parents[2]
TASKS = REPO / "tests" / "tf4slurm_tasks"
STEPS = 50  # enough to aggregate both workers many times; the bound below is on what follows the last step
AFTER_LAST_STEP = 40.0  # s from the chief's last training step to its command's end (TensorFlow's grace: 120)
RUN_TIMEOUT = 240.0


def run_sync(tmp: Path, ps_sleep: str) -> tuple:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "TF_SLURM_", "TF_CONFIG"))}
    env.update(TF_CPP_MIN_LOG_LEVEL="2", GRPC_POLL_STRATEGY="poll", PYTHONUNBUFFERED="1",
               TASK_TIMES=str(tmp / "times"), TF_SLURM_BASE_PORT=str(free_base_port(3)))
    tf_slurm = REPO / ".venv" / "bin" / "tf-slurm"
    cmd = [str(tf_slurm) if tf_slurm.exists() else "tf-slurm", "local", "-n", "3", "--tasks", "ps,worker,worker",
           "--", "bash", str(TASKS / "timed.sh"), sys.executable, str(TASKS / "sync_mnist04_style.py"),
           "--model_dir", str(tmp / "model"), "-Iterations", str(STEPS), "--ps_sleep", ps_sleep]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=str(tmp), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = proc.communicate(timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:  # SIGTERM first: the launcher ends its tasks (a hung chief too)
        proc.terminate()
        try:
            out, _ = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        exited = (tmp / "times").read_text() if (tmp / "times").exists() else "none"
        raise AssertionError(f"the step did not end within {RUN_TIMEOUT} s; tasks exited (procid rc time): "
                             f"{exited!r}; output tail:\n{out[-4000:]}") from None
    return proc.returncode, out, time.monotonic() - t0


@pytest.mark.timeout(300)
@pytest.mark.parametrize("ps_sleep", ["180", "0"], ids=["ps-sleeps-as-the-original", "ps-leaves-after-done"])
def test_sync_chief_ends_with_its_training(tmp_path, ps_sleep):
    rc, out, took = run_sync(tmp_path, ps_sleep)
    assert rc == 0, out[-4000:]
    times = {}
    for line in (tmp_path / "times").read_text().splitlines():
        procid, rc, t = line.split()
        times[int(procid)] = (int(rc), float(t))
    assert times.get(1, (None,))[0] == 0 and times.get(2, (None,))[0] == 0, times  # ps: possibly ended by exec
    last = re.search(r"^1: worker 0 last training step (\d+) at ([0-9.]+)$", out, re.M)
    assert last, out[-3000:]
    after = times[1][1] - float(last.group(2))
    assert 0 <= after < AFTER_LAST_STEP, (after, out[-3000:])
    assert re.search(r"^1: worker 0 finished training$", out, re.M), out[-3000:]
    # the final step and its checkpoint: the chief's last checkpoint is the last step's
    state = (tmp_path / "model" / "checkpoint").read_text()
    assert re.search(rf'^model_checkpoint_path: ".*model\.ckpt-{STEPS}"$', state, re.M), state
    assert (tmp_path / "model" / f"model.ckpt-{STEPS}.index").exists()
    print(f"sync MNIST-04 style, ps_sleep {ps_sleep}: step {took:.1f} s, chief's command ended "
          f"{after:.1f} s after its last training step")
