"""Issue 8, multi-process: tf4slurm-era tasks (original call forms, TF1 through tf.compat.v1) and the
example with the seed's command line, 1 ps + 2 workers through `tf-slurm local`.

The tasks in tests/tf4slurm_tasks are written as a tf4slurm user wrote them (the ps ends in its own
dequeue loop) and are never edited to make a test pass.  tests/tf4slurm_tasks/timed.sh records each
task's exit status and time.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from data_paths import mnist_dir
from ports import free_base_port
from task_times import assert_ps_left_with_the_workers, task_times

pytestmark = [pytest.mark.tf]

REPO = Path(__file__).resolve().parents[2]
TASKS = REPO / "tests" / "tf4slurm_tasks"
EXAMPLE = REPO / "examples" / "mnist_distributed"
MNIST = mnist_dir()
HAVE_MNIST = any(os.path.exists(os.path.join(MNIST, f"t10k-images-idx3-ubyte{e}")) for e in ("", ".gz"))


def run_local(tmp: Path, argv: list, *, launcher_args: tuple = (), timeout: float = 240, ps_line: str = "") -> tuple:
    """ps_line: under `tf-slurm exec` (the default launcher) the ps is ended once both workers are done,
    possibly before it printed; timed.sh then makes the workers' tasks wait for that line of the ps."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "TF_SLURM_", "TF_CONFIG"))}
    env.update(TF_CPP_MIN_LOG_LEVEL="2", GRPC_POLL_STRATEGY="poll", TASK_TIMES=str(tmp / "times"),
               TF_SLURM_BASE_PORT=str(free_base_port(3)), TASK_PS_LINE=ps_line)
    cmd = [str(REPO / ".venv" / "bin" / "tf-slurm") if (REPO / ".venv" / "bin" / "tf-slurm").exists() else "tf-slurm",
           "local", "-n", "3", *launcher_args, "--", "bash", str(TASKS / "timed.sh"), sys.executable, *argv]
    t0 = time.monotonic()
    try:
        r = subprocess.run(cmd, cwd=str(tmp), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired as exc:  # say where each task stood (pytest cuts the exception's bytes)
        out = exc.output.decode(errors="replace") if isinstance(exc.output, bytes) else (exc.output or "")
        exited = (tmp / "times").read_text() if (tmp / "times").exists() else "none"
        raise AssertionError(f"tf-slurm local did not end within {timeout} s; tasks exited (procid rc time): "
                             f"{exited!r}; output tail:\n{out[-6000:]}") from None
    return r, time.monotonic() - t0


SMALL = ["-ps", "1", "-workers", "2", "-Iterations", "40", "-batch_size", "16",
         "--train_module", "SmallModel_DistributedTRAIN"]


@pytest.mark.timeout(300)
def test_original_task_under_local_launcher_as_srun_runs_it(tmp_path):
    """Slurm variables only (what plain srun gives): the original ps loop must end the ps itself."""
    r, took = run_local(tmp_path, [str(TASKS / "LaunchTFServerWithHooks.py"), *SMALL,
                                   "--model_dir", str(tmp_path / "model")], launcher_args=("--slurm-env-only",))
    out = r.stdout
    assert r.returncode == 0, out[-4000:]
    gap = assert_ps_left_with_the_workers(task_times(tmp_path / "times"), out)
    # the ps's own dequeue loop ran to its end: one line per worker's done report
    assert "0: ps 0 received done 0" in out and "0: ps 0 received done 1" in out, out[-3000:]
    # GetServerDictionary(..., InfinyBand=FLAGS.NoIB) under the launcher: its loopback policy wins
    assert "Cluster Dictionary: {'ps': ['127.0.0.1:" in out
    # the hooks with the original keywords: barrier on the chief, per-step lines outside AvoidStep
    assert "1: tf_for_slurm.runtime.hooks: chief: all 2 workers are up, training starts" in out, out[-3000:]
    steps = [int(s) for s in re.findall(r"^\d: tf_for_slurm\.runtime\.hooks: worker: global step (\d+)$", out, re.M)]
    assert steps and all(s < 3 or s > 37 for s in steps), steps
    assert len(re.findall(r"worker \d reported done from hook.end\(\)", out)) == 2
    assert len(re.findall(r"^\d: worker \d finished training$", out, re.M)) == 2
    print(f"original task, --slurm-env-only: job {took:.1f} s, ps exit - last worker exit = {gap:+.3f} s")


@pytest.mark.timeout(300)
def test_original_task_under_default_local_launcher(tmp_path):
    """`tf-slurm local -n 3 -- python task.py` as the README shows it (tasks under `tf-slurm exec`)."""
    r, took = run_local(tmp_path, [str(TASKS / "LaunchTFServerWithHooks.py"), *SMALL,
                                   "--model_dir", str(tmp_path / "model")], ps_line="ps 0 received done 1")
    out = r.stdout
    assert r.returncode == 0, out[-4000:]
    assert "0: ps 0 received done 1" in out, out[-3000:]  # the ps's loop saw both workers
    times = task_times(tmp_path / "times")
    assert times[1][0] == 0 and times[2][0] == 0, times
    if 0 in times:  # the ps left by itself (else exec's supervisor ended it once both workers were done)
        assert_ps_left_with_the_workers(times, out)
    print(f"original task, default local: job {took:.1f} s, ps recorded: {0 in times}")


needs_mnist = pytest.mark.skipif(not HAVE_MNIST, reason=f"real MNIST digits not found in {MNIST}")


@needs_mnist
@pytest.mark.timeout(400)
def test_seed_launcher_calls_the_examples_distributed_train(tmp_path):
    """The seed's launcher (original forms) calling the example's DistributedTrain(FLAGS, task_index,
    TFCluster=, TFServer=, QueueHook=) with the seed's command line."""
    model = tmp_path / "model"
    r, took = run_local(tmp_path, [str(TASKS / "LaunchTFServerWithHooks.py"), "-ps", "1", "-workers", "2",
                                   "--data_dir", MNIST, "--model_dir", str(model), "-batch_size", "50",
                                   "-Iterations", "200", "--NoIB"], launcher_args=("--slurm-env-only",))
    out = r.stdout
    assert r.returncode == 0, out[-4000:]
    gap = assert_ps_left_with_the_workers(task_times(tmp_path / "times"), out)
    assert "0: ps 0 received done 1" in out
    m = re.search(r"held-out accuracy: ([0-9.]+) on (\d+) examples after global step (\d+)", out)
    assert m and float(m.group(1)) >= 0.9 and int(m.group(3)) >= 200, out[-3000:]
    assert list(model.glob("model.ckpt-*.index")), "the chief's last checkpoint was written"
    print(f"seed launcher + example DistributedTrain: job {took:.1f} s, ps - last worker = {gap:+.3f} s")


@needs_mnist
@pytest.mark.timeout(400)
@pytest.mark.parametrize("counts", [["-ps", "1", "-workers", "2"], []], ids=["seed-command-line", "no-counts"])
def test_example_with_the_seeds_command_line_and_with_no_counts(tmp_path, counts):
    model = tmp_path / "model"
    argv = [str(EXAMPLE / "LaunchTFServerWithHooks.py"), *counts, "--data_dir", MNIST, "--model_dir", str(model),
            "-batch_size", "50", "-Iterations", "40", "--eval_every", "0"] + (["--NoIB"] if counts else [])
    r, took = run_local(tmp_path, argv, ps_line="ps:0: all 2 workers reported done; exiting cleanly (status 0)")
    out = r.stdout
    assert r.returncode == 0, out[-4000:]
    assert "ps:0: all 2 workers reported done; exiting cleanly (status 0)" in out, out[-3000:]
    assert re.search(r"held-out accuracy: [0-9.]+ on \d+ examples after global step \d+ \(async, 2 workers\)", out)
    times = task_times(tmp_path / "times")
    assert all(rc == 0 for rc, _ in times.values()) and 1 in times and 2 in times, times
    print(f"example {' '.join(counts) or '(no counts)'}: job {took:.1f} s")
