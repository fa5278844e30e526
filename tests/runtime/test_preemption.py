"""Issue 14, item 4: TensorFlow's PreemptionCheckpointHandler follows our stop request on Slurm.

The example (examples/mnist_distributed/tf2_preemption.py) under `tf-slurm local`: SIGUSR1 (as
Slurm's time-limit warning, passed on to every task) -> the handler's watcher sees the stop ->
every worker saves `ckpt-<step>` at the agreed step and exits 42 (what `batch-step` reads as
"checkpointed, requeue") -> a rerun on the same model dir restores that step and ends with 0.
The pacing (2000 steps at 0.05 s: at least 100 s of training) makes sure the signal comes before
the end on any machine.
"""

from __future__ import annotations

import logging
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from data_paths import mnist_dir
from tf_for_slurm.errors import UsageError
from tf_for_slurm.host.stop_request import StopRequest  # not installed: this process's signals stay as they are
from tf_for_slurm.supervise.batch_step import read_checkpoint_step

pytestmark = [pytest.mark.tf]

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "mnist_distributed" / "tf2_preemption.py"
MNIST = mnist_dir()
TARGET = 2000


def _start(model_dir: Path, target: int, log: Path, pace: float) -> subprocess.Popen:
    argv = [sys.executable, "-m", "tf_for_slurm", "local", "-n", "2", "--ps", "0", "--",
            sys.executable, str(EXAMPLE), "--data_dir", MNIST, "--model_dir", str(model_dir),
            "--Iterations", str(target), "--min_step_seconds", str(pace)]
    return subprocess.Popen(argv, stdout=log.open("w"), stderr=subprocess.STDOUT, cwd=str(REPO))


def _need_mnist() -> None:
    if not any((Path(MNIST) / f"t10k-images-idx3-ubyte{ext}").exists() for ext in ("", ".gz")):
        pytest.skip(f"no MNIST digits in {MNIST}")


@pytest.mark.timeout(300)
def test_sigusr1_makes_the_handler_checkpoint_exit_42_and_a_rerun_resumes(tmp_path):
    _need_mnist()
    model = tmp_path / "model"
    log = tmp_path / "stop.log"
    proc = _start(model, TARGET, log, pace=0.05)
    try:
        deadline = time.monotonic() + 150
        while "training: first step" not in log.read_text():  # the chief trained a step
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.1)
        proc.send_signal(signal.SIGUSR1)  # as Slurm's warning: tf-slurm local passes it to every task
        status = proc.wait(timeout=90)
    finally:
        proc.kill()
    out = log.read_text()
    assert status == 42, out[-3000:]  # the first failure's status: every worker exited 42
    assert re.search(r"^\d: tf_for_slurm\.runtime\.preemption: SIGUSR1 seen [0-9.]+ s ago: "
                     r"PreemptionCheckpointHandler will save at the agreed step and exit 42$", out, re.M), out[-3000:]
    assert re.search(r"^0: tf_for_slurm\.runtime\.preemption: PreemptionCheckpointHandler: checkpoint saved, "
                     r"exiting with status 42$", out, re.M), out[-3000:]
    assert "reached step" not in out, out[-3000:]  # nobody trained to the end
    # under exec, 42 is a planned stop: no worker was ended as after a failure; both exited by themselves
    assert "ending every task" not in out and "tasks: 2 exited by themselves" in out, out[-3000:]
    saved = read_checkpoint_step(str(model))  # what batch-step reads to decide the requeue
    assert saved is not None and 1 <= saved < TARGET, (saved, out[-3000:])
    assert (model / f"ckpt-{saved}.index").exists()
    assert not list(tmp_path.glob("workertemp_*")), "a non-chief's scratch checkpoint was left behind"

    target = saved + 20  # the rerun restores that step and trains only the rest
    log2 = tmp_path / "resume.log"
    proc = _start(model, target, log2, pace=0.0)
    try:
        status = proc.wait(timeout=150)
    finally:
        proc.kill()
    out = log2.read_text()
    assert status == 0, out[-3000:]
    assert re.search(rf"^0: tf2_preemption: resumed from \S+ckpt-{saved} at step {saved}$", out, re.M), out[-3000:]
    assert re.search(rf"^0: tf2_preemption: training: first step {saved + 1} done$", out, re.M), out[-3000:]
    for rank in (0, 1):
        assert f"{rank}: worker {rank}: reached step {target} of {target}: done" in out, out[-3000:]
    assert read_checkpoint_step(str(model)) == target


def test_the_watcher_follows_the_stop_request_and_logs_once(caplog):
    from tf_for_slurm.runtime.preemption import termination_config

    stop = StopRequest(("USR1", "TERM"))  # notified by hand: no signal handler installed
    config = termination_config(stop)
    assert config.grace_period == 0 and config.save_fn is None
    with caplog.at_level(logging.INFO, logger="tf_for_slurm.runtime.preemption"):
        assert config.termination_watcher_fn() is False
        stop.notify("USR1")
        assert config.termination_watcher_fn() is True
        assert config.termination_watcher_fn() is True  # still stopping; the line is not repeated
    # this logger's lines only: an earlier test's TensorFlow object collected now may log an error of its own
    lines = [r.getMessage() for r in caplog.records if r.name == "tf_for_slurm.runtime.preemption"]
    assert len(lines) == 1 and re.fullmatch(
        r"SIGUSR1 seen [0-9.]+ s ago: PreemptionCheckpointHandler will save at the agreed step and exit 42",
        lines[0]), lines
    with pytest.raises(SystemExit) as ended:
        config.exit_fn()
    assert ended.value.code == 42  # plan.requeue.CHECKPOINTED_STATUSES: batch-step requeues

    other = termination_config(stop, exit_code=7, grace_period=30)
    assert other.grace_period == 30
    with pytest.raises(SystemExit) as ended:
        other.exit_fn()
    assert ended.value.code == 7


def test_bad_arguments_are_one_line_errors():
    from tf_for_slurm.runtime.preemption import preemption_handler, termination_config

    stop = StopRequest()
    with pytest.raises(UsageError, match="exit_code=256: expected an exit status"):
        termination_config(stop, exit_code=256)
    with pytest.raises(UsageError, match="exit_code=True: expected an exit status"):
        termination_config(stop, exit_code=True)
    with pytest.raises(UsageError, match="grace_period=-1: expected seconds >= 0"):
        termination_config(stop, grace_period=-1)
    import tensorflow as tf

    with pytest.raises(UsageError, match="checkpoint_dir=None: expected a directory"):
        preemption_handler(None, tf.train.Checkpoint(), None, stop_request=stop)


def test_importing_the_helper_does_not_import_tensorflow():
    code = ("import sys, tf_for_slurm.runtime.preemption as p; "
            "assert 'tensorflow' not in sys.modules, 'tensorflow imported'; print(p.EXIT_CHECKPOINTED)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(REPO), timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "42", done.stderr
