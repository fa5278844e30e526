"""A hang is a fault: an unmodified script that stops making progress (every process alive) is found
hung, the stuck task's Python stacks go to its log, it is ended, and the restart policy starts what
it says again: under MultiWorkerMirroredStrategy the group, from its BackupAndRestore backup; under
TF1 the stuck worker alone.  Training then completes.  Under `tf-slurm local`; the progress comes from
the shim (Keras fit batches, the TF1 global step), nothing in the scripts reports it.

TF_SLURM_HANG_AFTER=6 (the bound's floor; the median step is milliseconds, so 10 x median is below
it): detection takes 6-7 s on any machine, and each script's remaining work after the hang is paced
to outlast it (--pace).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "unmodified"
PY = sys.executable

pytestmark = [pytest.mark.tf,
              pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="needs TensorFlow")]

ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1", "TF_SLURM_HANG_AFTER": "6"}
for _name in ("TF_USE_LEGACY_KERAS", "TF_CONFIG", "TF_SLURM_PS", "TF_SLURM_PROGRESS_CAPTURE"):
    ENV.pop(_name, None)


def run_local(args, timeout=240):
    proc = subprocess.run([PY, "-m", "tf_for_slurm", "local", *args], env=ENV, capture_output=True, text=True,
                          timeout=timeout)
    return proc.returncode, proc.stdout + proc.stderr


@pytest.mark.timeout(300)
def test_mwms_fit_whose_worker_blocks_mid_epoch_is_restarted_from_its_backup_and_completes(tmp_path):
    marker = tmp_path / "hung-once"
    rc, out = run_local(["-n", "2", "--ps", "0", "--", PY, str(SCRIPTS / "tf2_mwms_backup.py"),
                         "--backup-dir", str(tmp_path / "backup"), "--epochs", "3", "--steps-per-epoch", "10",
                         "--hang-once", str(marker)])
    assert marker.exists(), out[-4000:]
    assert rc == 0, out[-6000:]
    hung = [line for line in out.splitlines() if "hung: no training step for" in line]
    assert len(hung) == 1, out[-6000:]
    # every stuck task's Python stacks, in its log: the one ended and the one its group's restart ends
    stacks = {line.split(":")[0] for line in out.splitlines() if "most recent call first" in line}
    assert stacks == {"0", "1"}, (stacks, out[-6000:])
    assert out.count("worker 1 epoch 1 at") == 2 and "worker 1 epoch 2 at" in out, out[-6000:]  # resumed at 1
    assert out.count("done at") == 2, out[-6000:]


@pytest.mark.timeout(300)
def test_tf1_worker_blocked_in_session_run_is_restarted_alone_and_training_completes(tmp_path):
    marker = tmp_path / "hung-once"
    rc, out = run_local(["-n", "3", "--", PY, str(SCRIPTS / "tf1_ps_worker.py"), "--steps", "400",
                         "--pace", "0.05", "--hang-once", str(marker)])
    assert marker.exists(), out[-4000:]
    assert rc == 0, out[-6000:]
    hung = [line for line in out.splitlines() if "hung: no training step for" in line]
    assert len(hung) == 1 and "worker 1" in hung[0] and "worker 0" not in hung[0].split("ending")[1], out[-6000:]
    assert "most recent call first" in out, out[-6000:]
    assert "worker 0 done at" in out, out[-6000:]
