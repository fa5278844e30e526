"""Issue 9 for Keras `fit`: StopAndResume stops MWMS `fit` on SIGUSR1 with a checkpoint that
`batch-step` can read, and a rerun resumes at that global step and ends exactly at the target."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tf_for_slurm.supervise.batch_step import read_checkpoint_step
from tf_for_slurm.errors import UsageError
from tf_for_slurm.host.stop_request import StopRequest  # not installed: this process's signals stay as they are

pytestmark = [pytest.mark.tf]

REPO = Path(__file__).resolve().parents[2]
TASK = REPO / "tests" / "tf2_tasks" / "fit_resume.py"


def _start(model_dir: Path, target: int, log: Path) -> subprocess.Popen:
    argv = [sys.executable, "-m", "tf_for_slurm", "local", "-n", "2", "--tasks", "worker,worker", "--",
            sys.executable, str(TASK), str(model_dir), str(target), "--slow", "0.05"]
    return subprocess.Popen(argv, stdout=log.open("w"), stderr=subprocess.STDOUT, cwd=str(REPO))


def _ends(text: str) -> list:
    return sorted(int(s) for s in re.findall(r"^\d: worker \d end (\d+) ", text, re.M))


@pytest.mark.timeout(300)
def test_mwms_fit_stops_on_sigusr1_with_a_checkpoint_and_resumes_to_the_target(tmp_path):
    model = tmp_path / "model"
    log = tmp_path / "stop.log"
    proc = _start(model, 10_000, log)
    try:
        deadline = time.monotonic() + 150
        while log.read_text().count(" ready ") < 2:  # both workers have trained a batch
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.1)
        proc.send_signal(signal.SIGUSR1)  # as Slurm's warning, passed on to every task
        assert proc.wait(timeout=60) == 0, log.read_text()[-3000:]
    finally:
        proc.kill()
    out = log.read_text()
    ends = _ends(out)
    saved = read_checkpoint_step(str(model))  # what batch-step reads to decide the requeue
    assert len(ends) == 2 and ends[0] == ends[1] == saved and 2 <= saved < 10_000, (ends, saved, out[-3000:])
    assert re.search(rf"checkpoint \S+ckpt-{saved} written at global step {saved}, [0-9.]+ s after SIGUSR1", out)

    target = saved + 15  # the rerun resumes there: same global step, optimizer state, to the target
    proc = _start(model, target, tmp_path / "resume.log")
    assert proc.wait(timeout=150) == 0, (tmp_path / "resume.log").read_text()[-3000:]
    out = (tmp_path / "resume.log").read_text()
    assert len(re.findall(rf"worker \d restored at global step {saved},", out)) == 2, out[-3000:]
    assert _ends(out) == [target, target] and read_checkpoint_step(str(model)) == target, out[-3000:]

    proc = _start(model, target, tmp_path / "done.log")  # at the target already: fit trains nothing
    assert proc.wait(timeout=150) == 0
    out = (tmp_path / "done.log").read_text()
    assert _ends(out) == [target, target] and " ready " not in out, out[-3000:]


def test_bad_arguments_are_one_line_errors():
    from tf_for_slurm.runtime.keras_resume import StopAndResume

    with pytest.raises(UsageError, match="target=0: expected the global step"):
        StopAndResume("/tmp/x", target=0)
    with pytest.raises(UsageError, match="directory='': expected a checkpoint directory"):
        StopAndResume("", target=5)
    with pytest.raises(UsageError, match="steps_per_epoch=0: expected an int >= 1"):
        StopAndResume("/tmp/x", target=5, stop=StopRequest()).restore(object(), steps_per_epoch=0)
