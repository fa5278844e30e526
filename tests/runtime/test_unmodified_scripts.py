"""Unmodified TF_CONFIG scripts (tests/unmodified/: written as the seeds and TensorFlow's tutorials
write them, nothing from tf_for_slurm, no device filters, no barriers) end their step: 0 when
training is done, non-zero within 10 s when a worker, a ps or the coordinator is killed.
Under `tf-slurm local` and under real Slurm (`srun ... tf-slurm exec -- python script.py`).
"""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Dict, List, Mapping, Optional

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = Path(__file__).resolve().parents[1] / "unmodified"
PY = sys.executable

# find_spec, not importorskip: importing TensorFlow at collection cost every run seconds, even `-m "not tf"`
pytestmark = [pytest.mark.tf,
              pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="needs TensorFlow")]

ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}
for _name in ("TF_USE_LEGACY_KERAS", "TF_CONFIG"):  # the product decides, not the test
    ENV.pop(_name, None)

# script -> (roles, normal args, long-running args, the line the coordinator prints when training)
CASES = {
    "tf1": ("ps,worker,worker", ["tf1_ps_worker.py", "--steps", "300"], ["tf1_ps_worker.py", "--steps", "10000000"],
            "worker 0 training"),
    "pss": ("chief,ps,worker,worker", ["tf2_pss_fit.py"], ["tf2_pss_fit.py", "--epochs", "100000"],
            "coordinator training"),
    "mwms": ("worker,worker", ["tf2_mwms_fit.py"], ["tf2_mwms_fit.py", "--epochs", "100000"], "worker 0 training"),
    "eval": ("chief,worker,evaluator", ["tf2_chief_evaluator.py"], ["tf2_chief_evaluator.py", "--epochs", "100000"],
             "chief 0 training"),
}


def script_argv(args: List[str], model_dir: Path) -> List[str]:
    argv = [PY, str(SCRIPTS / args[0]), *args[1:]]
    if args[0] == "tf2_chief_evaluator.py":
        argv += ["--model-dir", str(model_dir)]
    return argv


def done_times(out: str, who: str) -> List[float]:
    return [float(t) for t in re.findall(rf"{who} done at ([0-9.]+)", out)]


RUN_VAR = "TESTS_RUN_ID"  # in a step's environment, passed to every task: whose step a process is


def new_run() -> Dict[str, str]:
    """The environment entry that marks one step's processes as this test's (command_pids)."""
    return {RUN_VAR: uuid.uuid4().hex}


def command_pids(script: str, rank: int, run: Optional[Mapping[str, str]]) -> List[int]:
    """The task's own command (python SCRIPT), not its tf-slurm supervisor, of the step started with
    `run` (new_run) in its environment: never another test's task of the same script and rank (the
    Slurm tests run beside the TensorFlow tests: tests/side_by_side.py). run=None: any step's."""
    mark = f"{RUN_VAR}={run[RUN_VAR]}".encode() if run else b""
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            argv = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")
            env = Path(f"/proc/{name}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if len(argv) > 1 and argv[1].decode(errors="replace").endswith(script) \
                and f"SLURM_PROCID={rank}".encode() in env and (not mark or mark in env):
            pids.append(int(name))
    return pids


def wait_for_line(path: Path, needle: str, proc: subprocess.Popen, timeout: float) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if needle in path.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            raise AssertionError(f"the step ended before {needle!r}: {path.read_text()[-3000:]}")
        time.sleep(0.1)
    raise AssertionError(f"no {needle!r} within {timeout} s: {path.read_text()[-3000:]}")


def run_step(argv: List[str], log: Path, *, env: Optional[dict] = None, victim: Optional[int] = None,
             script: str = "", ready: str = "", timeout: float = 200) -> tuple:
    """Run a step; with `victim`, SIGKILL that rank's command once `ready` is printed.
    Returns (returncode, output, seconds from the kill to the step's end)."""
    run = new_run()
    with open(log, "w") as out:
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                env={**ENV, **(env or {}), **run})
        try:
            took = None
            if victim is not None:
                wait_for_line(log, ready, proc, timeout=150)
                pids = command_pids(script, victim, run)
                assert pids, f"no process of rank {victim} running {script}"
                for pid in pids:
                    os.kill(pid, signal.SIGKILL)
                killed = time.monotonic()
                proc.wait(timeout=60)
                took = time.monotonic() - killed
            else:
                proc.wait(timeout=timeout)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return proc.returncode, log.read_text(errors="replace"), took


def local_argv(case: str, args: List[str], model_dir: Path) -> List[str]:
    roles = CASES[case][0]
    return [PY, "-m", "tf_for_slurm", "local", "-n", str(roles.count(",") + 1), "--tasks", roles, "--",
            *script_argv(args, model_dir)]


# -- tf-slurm local ---------------------------------------------------------------------------------

@pytest.mark.timeout(240)
def test_tf1_late_worker_opens_its_session_after_the_chief_finished(tmp_path):
    argv = local_argv("tf1", ["tf1_ps_worker.py", "--steps", "300", "--slow-task", "worker:1",
                              "--slow-seconds", "3"], tmp_path)
    # Late by construction, not by a guess at how long the chief takes: worker 1's program starts
    # only once the chief printed that it is done (then loads its data 3 s late). Each command's
    # exit is stamped from outside (its last print comes before TensorFlow's interpreter teardown,
    # 1-6 s here). TF_SLURM_DRAIN=120: the late worker's start-up now follows the chief's end, and it
    # must still end by itself (no "still running" warning).
    log, stamp = tmp_path / "log", tmp_path / "exit"
    at = argv.index("--") + 1
    argv[at:] = ["sh", "-c",
                 f'if [ "$SLURM_PROCID" = 2 ]; then for i in $(seq 2400); do grep -q "worker 0 done at" {log} '
                 f'&& break; sleep 0.05; done; fi; "$@"; s=$?; date +%s.%N > {stamp}.$SLURM_PROCID; exit $s',
                 "sh", *argv[at:]]
    rc, out, _ = run_step(argv, log, env={"TF_SLURM_DRAIN": "120"})
    end = time.time()
    assert rc == 0, out[-4000:]
    chief_done = done_times(out, "worker 0")
    opened = [float(t) for t in re.findall(r"worker 1 opens its session at ([0-9.]+)", out)]
    assert chief_done and opened and opened[0] - chief_done[0] >= 3, out[-3000:]
    assert done_times(out, "worker 1"), out[-3000:]  # it trained (nothing left to do) and ended by itself
    # the ps (server.join()) is ended as soon as the last worker's command exits (tests/test_supervisor.py
    # times that exactly)
    assert end - float(Path(f"{stamp}.2").read_text()) < 5
    assert "still running" not in out


# the ranks whose commands train: the step ends once the last of them exited (the others serve)
TRAINERS = {"tf1": (1, 2), "pss": (0,), "mwms": (0, 1), "eval": (0, 1)}
CHIEF = {"tf1": "worker 1", "pss": "coordinator", "mwms": "worker 0", "eval": "chief 0"}


def stamped(argv: List[str], stamp: Path) -> List[str]:
    """argv with each command's exit time written to stamp.<rank> from outside the script (its own last
    print comes before TensorFlow's interpreter teardown, which takes 1-6 s here)."""
    at = argv.index("--") + 1
    return [*argv[:at], "sh", "-c", f'"$@"; s=$?; date +%s.%N > {stamp}.$SLURM_PROCID; exit $s', "sh", *argv[at:]]


def check_ends_0_by_the_last_trainers_exit(case: str, rc: int, out: str, ended: float, stamp: Path, model: Path) -> None:
    assert rc == 0, out[-4000:]
    assert done_times(out, CHIEF[case]), out[-3000:]
    last = max(float(Path(f"{stamp}.{rank}").read_text()) for rank in TRAINERS[case])
    # ended by that exit, not by a fallback (the 10 s silence rule, a TF1 worker's 30 s drain, a server's
    # join() that never returns): the design's bound is the kill grace (3 s) plus a reaction; the time
    # itself is bench/bench_shutdown.py's (a busy machine stretches it, never to a fallback's)
    assert ended - last < 8.0, (ended - last, out[-3000:])
    if case == "eval":
        assert "evaluator waiting for checkpoints" in out and (model / "checkpoint").exists()


@pytest.mark.timeout(240)
def test_mwms_script_ends_0_right_after_the_last_training_task(tmp_path):
    """Under `tf-slurm local`; every strategy's script under srun: test_under_srun_each_script_ends_0.
    (This one also runs in the old-TF pass: a Keras 2 `fit` under MWMS on TensorFlow 2.15.)"""
    stamp = tmp_path / "exit"
    rc, out, _ = run_step(stamped(local_argv("mwms", CASES["mwms"][1], tmp_path / "model"), stamp), tmp_path / "log")
    check_ends_0_by_the_last_trainers_exit("mwms", rc, out, time.time(), stamp, tmp_path / "model")


# One trainer and one server per strategy (and the evaluator): the supervisor treats a killed
# command alike whatever its role (test_supervisor.py, test_step_watch.py cover the roles with plain
# commands); what differs per strategy is which tasks serve and which train.
KILLS = [("tf1", 2, "worker"), ("tf1", 0, "ps"),
         ("pss", 1, "ps"), ("pss", 0, "coordinator"),
         ("mwms", 1, "worker"),
         ("eval", 2, "evaluator")]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("case,victim,what", KILLS, ids=[f"{c}-{w}" for c, _, w in KILLS])
def test_with_restarts_off_a_killed_task_ends_the_step_non_zero_within_10s(tmp_path, case, victim, what):
    roles, _, long_args, ready = CASES[case]
    argv = local_argv(case, long_args, tmp_path / "model")
    rc, out, took = run_step(argv, tmp_path / "log", env={"TF_SLURM_MAX_RESTARTS": "0"}, victim=victim,
                             script=long_args[0], ready=ready)
    print(f"{case}: {what} killed, the step ended {took:.2f} s later (status {rc})")
    assert rc != 0, out[-3000:]
    assert took < 10, (took, out[-3000:])
    assert f"task {victim} exited with status 137" in out, out[-3000:]


# -- real Slurm -------------------------------------------------------------------------------------

def srun_argv(case: str, args: List[str], model_dir: Path) -> List[str]:
    roles = CASES[case][0]
    n = roles.count(",") + 1
    return ["srun", f"-N{min(n, 3)}", f"-n{n}", "--mpi=none", "-l", PY, "-m", "tf_for_slurm", "exec",
            "--tasks", roles, "--", *script_argv(args, model_dir)]


@pytest.mark.slurm
@pytest.mark.timeout(300)
@pytest.mark.parametrize("case", list(CASES))
def test_under_srun_each_script_ends_0(slurm_cluster, tmp_path, case):
    """Each unmodified script under srun ends 0 within 2 s of its last training task's exit (measured
    here: 0.1-0.3 s; the ps, the servers and the evaluator are ended by the supervisor), and prints no
    ERROR line."""
    args = CASES[case][1]
    if case == "tf1":
        args = args + ["--slow-task", "worker:1", "--slow-seconds", "6"]
    stamp = tmp_path / "exit"
    rc, out, _ = run_step(stamped(srun_argv(case, args, tmp_path / "model"), stamp), tmp_path / "log",
                          env={**slurm_cluster.env, "PYTHONPATH": str(ROOT)}, timeout=240)
    check_ends_0_by_the_last_trainers_exit(case, rc, out, time.time(), stamp, tmp_path / "model")
    # a good run prints no ERROR line, from us or from TensorFlow (its C++ log's E prefix), issue 25
    errors = [line for line in out.splitlines() if re.search(r"(^|: )(E\d{4} \d|ERROR\b)", line)]
    assert errors == [], "\n".join(errors[:10])


@pytest.mark.slurm
@pytest.mark.timeout(300)
@pytest.mark.parametrize("case,victim", [("tf1", 0)])
def test_under_srun_without_kill_on_bad_exit_a_killed_task_ends_the_step(slurm_cluster, tmp_path, case, victim):
    # restarts off: TF_SLURM_MAX_RESTARTS=0 (on by default, a killed task would be restarted). One case:
    # what srun adds is the same whatever the role (every role and strategy: the local test above); the
    # TF1 ps is the one whose loss leaves the others waiting forever on their own
    roles, _, long_args, ready = CASES[case]
    rc, out, took = run_step(srun_argv(case, long_args, tmp_path / "model"), tmp_path / "log",
                             env={**slurm_cluster.env, "PYTHONPATH": str(ROOT), "TF_SLURM_MAX_RESTARTS": "0"},
                             victim=victim,
                             script=long_args[0], ready=ready)
    assert rc != 0, out[-3000:]
    assert took < 10, (took, out[-3000:])


@pytest.mark.timeout(300)
def test_a_worker_whose_training_raises_ends_a_local_step_within_5s_every_time(tmp_path):
    script = Path(__file__).resolve().parents[1] / "launcher_tasks" / "raising_worker.py"
    for run in range(3):
        argv = [PY, "-m", "tf_for_slurm", "local", "-n", "3", "--", PY, str(script)]
        rc, out, _ = run_step(argv, tmp_path / f"log{run}", timeout=150)
        ended = time.time()
        raised = [float(t) for t in re.findall(r"raising at ([0-9.]+)", out)]
        assert rc == 1 and raised, out[-3000:]
        print(f"run {run}: step ended {ended - raised[0]:.2f} s after the raise")
        assert ended - raised[0] <= 5.0, (run, ended - raised[0], out[-2000:])
        assert "task 1 exited with status 1" in out, out[-3000:]
        assert all(command_pids("raising_worker.py", rank, None) == [] for rank in range(3))


@pytest.mark.timeout(300)
@pytest.mark.parametrize("victim,what", [
    # a worker alone: test_lost_node.py (with another worker's node lost at the same moment)
    (1, "restarting every task of the step in 1 s: ps 0 (rank 1, node1)"),  # TF: restart the coordinator too
])
def test_a_killed_pss_task_is_restarted_and_the_coordinator_finishes(tmp_path, victim, what):
    """ParameterServerStrategy tolerates a worker failure by design (the coordinator retries its
    functions elsewhere and reconnects to the same address): with restarts on, the killed worker's
    command comes back in place.  A ps's failure needs the coordinator restarted: every task starts
    again.  Either way the unmodified `fit` script ends 0.  Paced (20 epochs, 0.3 s after each)."""
    log = tmp_path / "log"
    argv = local_argv("pss", ["tf2_pss_fit.py", "--epochs", "20", "--pace", "0.3"], tmp_path)
    run = new_run()
    with open(log, "w") as out:
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                env={**ENV, "TF_SLURM_MAX_RESTARTS": "2", **run})
        try:
            wait_for_line(log, "coordinator training", proc, timeout=150)
            pids = command_pids("tf2_pss_fit.py", victim, run)
            assert pids, f"no process of rank {victim}"
            for pid in pids:
                os.kill(pid, signal.SIGKILL)
            proc.wait(timeout=200)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    out = log.read_text(errors="replace")
    assert proc.returncode == 0, out[-4000:]
    assert what in out and "exited with status 137" in out, out[-4000:]
    assert "coordinator done" in out and "restarts: " in out, out[-4000:]


def mwms_backup_step(launcher: List[str], tmp_path: Path, env: dict) -> None:
    """Run tf2_mwms_backup.py on 2 workers, SIGKILL worker 1's command at epoch 2; check the group
    restarted, `fit` resumed from the backup (not epoch 0) and the step ended 0."""
    log = tmp_path / "log"
    argv = [*launcher, "--", PY, str(SCRIPTS / "tf2_mwms_backup.py"), "--backup-dir", str(tmp_path / "backup"),
            "--epochs", "8", "--steps-per-epoch", "10", "--pace", "0.1"]
    run = new_run()
    with open(log, "w") as out:
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                env={**ENV, "TF_SLURM_LOG_LEVEL": "INFO", **env, **run})
        try:
            wait_for_line(log, "worker 1 epoch 2 at", proc, timeout=150)  # epochs 0 and 1 are backed up
            pids = command_pids("tf2_mwms_backup.py", 1, run)
            assert pids, "no process of rank 1"
            for pid in pids:
                os.kill(pid, signal.SIGKILL)
            killed = time.time()
            proc.wait(timeout=200)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    out = log.read_text(errors="replace")
    assert proc.returncode == 0, out[-4000:]
    assert "restarting every task of the step" in out and "worker 1 (rank 1, " in out, out[-4000:]
    assert "exited with status 137 (signal 9) (under mwms" in out, out[-4000:]
    after = out[out.index("restarting every task of the step"):]
    resumed = re.findall(r"worker 0 epoch (\d+) at ([0-9.]+)", after)
    assert resumed and int(resumed[0][0]) >= 2, after[-4000:]  # from the backup, not from epoch 0
    assert len(done_times(after, "worker 0")) == 1 and len(done_times(after, "worker 1")) == 1, after[-4000:]
    print(f"group back to training (worker 0 at epoch {resumed[0][0]}) {float(resumed[0][1]) - killed:.1f} s "
          "after the SIGKILL")


@pytest.mark.slurm
@pytest.mark.timeout(300)
def test_under_srun_a_killed_mwms_worker_restarts_the_group_with_exec_max_restarts(slurm_cluster, tmp_path):
    """MultiWorkerMirroredStrategy cannot go on without a worker: with restarts on, the whole group
    is ended and started again in place, and the tutorial's `BackupAndRestore` resumes `fit` at the
    epoch its backup holds (not at 0).  Paced (0.1 s a batch): the kill lands mid-training on any machine.
    Under srun only (the same run under `tf-slurm local` tested nothing more: the restart policy, the
    setting read from TF_SLURM_MAX_RESTARTS and the local launcher are in the TF1 and PSS tests)."""
    mwms_backup_step(["srun", "-N2", "-n2", "--mpi=none", "-l", PY, "-m", "tf_for_slurm", "exec",
                      "--ps", "0", "--max-restarts", "2"], tmp_path, {**slurm_cluster.env, "PYTHONPATH": str(ROOT)})


def checkpoint_step(model_dir: Path) -> int:
    """The global step of the latest checkpoint MonitoredTrainingSession wrote (its `checkpoint` file)."""
    text = (model_dir / "checkpoint").read_text()
    return int(re.search(r'model_checkpoint_path: ".*-(\d+)"', text).group(1))


@pytest.mark.timeout(300)
@pytest.mark.parametrize("victim,what", [
    # the chief alone: test_lost_node.py (with another worker's node lost at the same moment)
    (0, "restarting every task of the step in 1 s: ps 0 (rank 0, node1) exited with status 137"),  # the group
])
def test_tf1_a_killed_task_is_restarted_and_training_reaches_its_last_step(tmp_path, victim, what):
    """The seed-style TF1 script with MonitoredTrainingSession's checkpoint_dir: the chief restarts
    alone and restores; a ps's failure restarts everyone and the chief restores the variables from the
    checkpoint.  The step ends 0 with the final checkpoint at the last step.  Paced: 300 steps of at
    least 0.02 s, the kill lands mid-training on any machine."""
    model = tmp_path / "model"
    argv = local_argv("tf1", ["tf1_ps_worker.py", "--steps", "300", "--checkpoint-dir", str(model),
                              "--pace", "0.02"], tmp_path)
    log = tmp_path / "log"
    run = new_run()
    with open(log, "w") as out:
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                env={**ENV, "TF_SLURM_MAX_RESTARTS": "2", "TF_SLURM_LOG_LEVEL": "INFO", **run})
        try:
            wait_for_line(log, "worker 1 training from step", proc, timeout=150)
            wait_for_line(log, "worker 0 training from step", proc, timeout=150)
            pids = command_pids("tf1_ps_worker.py", victim, run)
            assert pids, f"no process of rank {victim}"
            for pid in pids:
                os.kill(pid, signal.SIGKILL)
            proc.wait(timeout=200)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    out = log.read_text(errors="replace")
    assert proc.returncode == 0, out[-4000:]
    assert what in out, out[-4000:]
    assert checkpoint_step(model) >= 300, out[-3000:]
