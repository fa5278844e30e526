"""TF2 strategies runtime: MWMS TF_CONFIG, ParameterServerStrategy with clean server exit.

The pure checks run without TensorFlow. The `tf` tests start real TensorFlow servers, one
subprocess per task on 127.0.0.1, each with a hard deadline (tests/tf2_tasks/tf2_cluster.py kills
whatever outlives it, and pytest-timeout bounds the test).
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from tf_for_slurm.errors import PlanError, UsageError
from tf_for_slurm.plan import localhost_plan
from tf_for_slurm.runtime import tf2, tf2_plan

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tf2_tasks"))
import tf2_cluster  # noqa: E402

HAVE_TF = importlib.util.find_spec("tensorflow") is not None
needs_tf = pytest.mark.skipif(not HAVE_TF, reason="TensorFlow is not installed")
# Keras 3 `fit` fails under both strategies in TF 2.21; tf_keras is the documented way to use fit.
needs_tf_keras = pytest.mark.skipif(
    importlib.util.find_spec("tf_keras") is None,
    reason="tf_keras is not installed (pip install --no-deps tf-keras==2.21.0)")


# -- pure: no TensorFlow -----------------------------------------------------------------------

def test_mwms_tf_config_workers_only_worker0_is_chief():
    plan = localhost_plan(["worker", "worker", "worker"], [5000, 5001, 5002], my_rank=1)
    cfg = tf2.mwms_tf_config(plan)
    assert cfg == {"cluster": {"worker": ["127.0.0.1:5000", "127.0.0.1:5001", "127.0.0.1:5002"]},
                   "task": {"type": "worker", "index": 1}}
    assert "ps" not in cfg["cluster"] and "chief" not in cfg["cluster"]
    assert tf2.mwms_tf_config(plan, rank=2)["task"] == {"type": "worker", "index": 2}
    assert [tf2.mwms_is_chief(plan, r) for r in range(3)] == [True, False, False]


def test_mwms_tf_config_keeps_an_explicit_chief():
    plan = localhost_plan(["chief", "worker", "worker"], [5000, 5001, 5002], my_rank=0)
    cfg = tf2.mwms_tf_config(plan)
    assert cfg["cluster"] == {"chief": ["127.0.0.1:5000"], "worker": ["127.0.0.1:5001", "127.0.0.1:5002"]}
    assert cfg["task"] == {"type": "chief", "index": 0}
    assert tf2.mwms_tf_config(plan, rank=1)["task"] == {"type": "worker", "index": 0}
    assert [tf2.mwms_is_chief(plan, r) for r in range(3)] == [True, False, False]


def test_mwms_rejects_ps_clearly():
    plan = localhost_plan(["ps", "worker", "worker"], [5000, 5001, 5002], my_rank=1)
    with pytest.raises(PlanError) as err:
        tf2.mwms_tf_config(plan)
    msg = str(err.value)
    assert "\n" not in msg and "'ps'" in msg and "MultiWorkerMirroredStrategy" in msg


def test_mwms_rejects_bad_rank_and_offline_plan():
    plan = localhost_plan(["worker", "worker"], [5000, 5001])
    with pytest.raises(UsageError, match=r"rank=5: expected an int in \[0, 1\]"):
        tf2.mwms_tf_config(plan, rank=5)
    with pytest.raises(PlanError):  # offline plan, no rank given: which task is this?
        tf2.mwms_tf_config(plan)
    with pytest.raises(UsageError, match="plan="):
        tf2.mwms_tf_config({"worker": ["a:1"]})


def test_pss_needs_chief_ps_and_worker():
    no_chief = localhost_plan(["ps", "worker"], [5000, 5001], my_rank=1)
    with pytest.raises(PlanError, match="exactly one 'chief'"):
        tf2.run_parameter_server_strategy(lambda s, p: None, no_chief)
    no_ps = localhost_plan(["chief", "worker"], [5000, 5001], my_rank=1)
    with pytest.raises(PlanError, match="at least one 'ps' and one 'worker'"):
        tf2.serve_until_done(no_ps)


def test_pss_roles_are_checked_before_tensorflow_starts():
    plan = localhost_plan(["chief", "ps", "worker"], [5000, 5001, 5002], my_rank=0)
    with pytest.raises(UsageError, match="task='chief:0'"):
        tf2.serve_until_done(plan)
    with pytest.raises(UsageError, match="task='ps:0'"):
        tf2.parameter_server_strategy(localhost_plan(["chief", "ps", "worker"], [5000, 5001, 5002], my_rank=1))
    with pytest.raises(UsageError, match="liveness_timeout=0"):
        tf2.serve_until_done(plan, liveness_timeout=0)
    with pytest.raises(UsageError, match="status=300"):
        tf2.shutdown_cluster(plan, status=300)
    with pytest.raises(UsageError, match="train_fn="):
        tf2.run_parameter_server_strategy("not callable", plan)


def test_shutdown_skips_tasks_that_are_gone_without_tensorflow():
    ports = tf2_cluster.free_ports(3)  # nothing listens on them
    plan = localhost_plan(["chief", "ps", "worker"], ports, my_rank=0)
    t0 = time.monotonic()
    report = tf2.shutdown_cluster(plan, timeout=2.0)
    assert report == {"ps:0": "not listening", "worker:0": "not listening"}
    assert time.monotonic() - t0 < 3.0


def _fake_step(monkeypatch, slot: int, **extra: str) -> None:
    from envs import step_env  # tests/envs.py: the variables srun sets

    for name in [k for k in os.environ if k.startswith(("SLURM_", "TF_SLURM_"))]:
        monkeypatch.delenv(name)
    for name, value in step_env("n1", "3", slot=slot, TF_SLURM_ADDRESS="template:127.0.0.1", **extra).items():
        monkeypatch.setenv(name, value)


def test_plans_from_the_slurm_environment_follow_each_strategy(monkeypatch):
    _fake_step(monkeypatch, slot=1)
    mwms_plan = tf2_plan.plan_or_env(None, "mwms")  # MWMS: no ps by default
    assert [t.role for t in mwms_plan.tasks] == ["worker", "worker", "worker"]
    assert tf2.mwms_tf_config(mwms_plan)["task"] == {"type": "worker", "index": 1}
    pss_plan = tf2_plan.plan_or_env(None, "pss")  # PSS: a chief (the coordinator) by default
    assert [t.role for t in pss_plan.tasks] == ["ps", "chief", "worker"]
    assert pss_plan.me.role == "chief"
    # an explicit ListOfTFTasks wins, and MWMS then refuses its ps clearly
    _fake_step(monkeypatch, slot=0, TF_SLURM_TASKS="ps,worker,worker")
    with pytest.raises(PlanError, match="takes no 'ps'"):
        tf2.multi_worker_mirrored_strategy()
    with pytest.raises(PlanError, match="exactly one 'chief'"):
        tf2.run_parameter_server_strategy(lambda strategy, plan: None)


def test_importing_tf2_runtime_does_not_import_tensorflow():
    code = "import sys, tf_for_slurm.runtime.tf2; print('tensorflow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=tf2_cluster.REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


# -- real TensorFlow servers in subprocesses ---------------------------------------------------

def _fail_msg(job) -> str:
    return "\n".join(f"--- {p.name} rc={p.returncode} killed_at_deadline={p.killed_at_deadline}\n"
                     + p.log()[-3000:] for p in job.procs)


@pytest.mark.tf
@needs_tf
@pytest.mark.timeout(180)
@pytest.mark.parametrize("exit_mode", ["normal_teardown", "exit_now"])
def test_pss_custom_loop_normal_end_every_process_exits_0(tmp_path, exit_mode):
    extra = ("--fast-exit",) if exit_mode == "exit_now" else ()
    job = tf2_cluster.start("pss_task.py", ["chief", "ps", "worker"], str(tmp_path), ("--steps", "20") + extra)
    try:
        job.wait(timeout=150)
    finally:
        job.kill_all()
    assert [p.returncode for p in job.procs] == [0, 0, 0], _fail_msg(job)
    chief_log = job.by_name("chief0").log()
    assert "shutdown: ps:0 told to exit with status 0" in chief_log, _fail_msg(job)
    assert "shutdown: worker:0 told to exit with status 0" in chief_log, _fail_msg(job)
    if exit_mode == "exit_now":
        # servers leave at once; the coordinator must not then sit in gRPC retries to the gone
        # servers until its 10 s shutdown timeout
        end_time = json.loads((tmp_path / "chief.json").read_text())["end_time"]
        assert job.by_name("chief0").exit_time - end_time < 5.0, _fail_msg(job)
    result = json.loads((tmp_path / "chief.json").read_text())
    assert result["steps"] == 20
    assert result["w_device"].startswith("/job:ps/")  # variables live on the ps
    assert result["last_loss"] < 0.5 * result["first_loss"]  # the workers really trained
    for name in ("ps0", "worker0"):
        assert json.loads((tmp_path / f"{name}.exit").read_text())["status"] == 0
        assert "said done (status 0)" in job.by_name(name).log()


@pytest.mark.tf
@needs_tf
@pytest.mark.timeout(180)
def test_pss_coordinator_sigkill_servers_exit_nonzero_within_10s_naming_it(tmp_path):
    job = tf2_cluster.start("pss_task.py", ["chief", "ps", "worker"], str(tmp_path),
                            ("--steps", "5", "--mode", "hang", "--fast-exit"))
    try:
        ready = tf2_cluster.wait_for_file(str(tmp_path / "ready"), timeout=120, job=job)
        assert ready, _fail_msg(job)
        # while the coordinator lives (its port open, no 'done') the servers must keep serving,
        # for longer than poll + liveness_timeout + poll (1 + 3 + 1 s): no false 'coordinator lost'
        window_end = time.monotonic() + 6.0
        while time.monotonic() < window_end:
            assert all(p.popen.poll() is None for p in job.procs), _fail_msg(job)
            time.sleep(0.2)
        chief = job.by_name("chief0")
        killed_at = time.time()
        chief.popen.send_signal(signal.SIGKILL)
        job.wait(timeout=30, names=["ps0", "worker0"])
    finally:
        job.kill_all()
    coordinator = f"chief:0 at 127.0.0.1:{job.ports[0]}"
    for name in ("ps0", "worker0"):
        p = job.by_name(name)
        assert not p.killed_at_deadline, _fail_msg(job)
        assert p.returncode == tf2.EXIT_COORDINATOR_LOST, _fail_msg(job)
        assert p.exit_time - killed_at <= 10.0, (name, p.exit_time - killed_at)
        error_lines = [l for l in p.log().splitlines() if " ERROR " in l]
        assert any(coordinator in l for l in error_lines), _fail_msg(job)


@pytest.mark.tf
@needs_tf
@pytest.mark.timeout(120)
def test_pss_servers_give_up_when_the_coordinator_never_starts(tmp_path):
    job = tf2_cluster.start("pss_task.py", ["chief", "ps", "worker"], str(tmp_path),
                            ("--startup-timeout", "3", "--fast-exit"), skip=(0,))
    try:
        job.wait(timeout=90)
    finally:
        job.kill_all()
    coordinator = f"chief:0 at 127.0.0.1:{job.ports[0]}"
    for p in job.procs:
        assert not p.killed_at_deadline and p.returncode == tf2.EXIT_COORDINATOR_NEVER_SEEN, _fail_msg(job)
        assert any(" ERROR " in l and coordinator in l for l in p.log().splitlines()), _fail_msg(job)


@pytest.mark.tf
@needs_tf
@pytest.mark.timeout(180)
def test_pss_train_fn_failure_still_ends_every_process(tmp_path):
    job = tf2_cluster.start("pss_task.py", ["chief", "ps", "worker", "worker"], str(tmp_path),
                            ("--steps", "3", "--mode", "fail"))
    try:
        job.wait(timeout=150)
    finally:
        job.kill_all()
    assert not any(p.killed_at_deadline for p in job.procs), _fail_msg(job)
    assert job.by_name("chief0").returncode != 0
    assert "train_fn failed on purpose" in job.by_name("chief0").log()
    for name in ("ps0", "worker0", "worker1"):  # told 'training failed', not left hanging
        assert job.by_name(name).returncode == tf2.EXIT_TRAINING_FAILED, _fail_msg(job)


@pytest.mark.tf
@needs_tf
@pytest.mark.timeout(120)
def test_shutdown_is_bounded_when_a_task_accepts_tcp_but_never_answers(tmp_path):
    # A 'worker' that accepts connections and then says nothing (a wedged process): the
    # coordinator's enqueue must give up after `timeout`, not hang the coordinator's exit.
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    accepted = []
    stop = threading.Event()

    def accept_loop():
        silent.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(silent.accept()[0])
            except OSError:
                pass

    th = threading.Thread(target=accept_loop, daemon=True)
    th.start()
    gone = tf2_cluster.free_ports(2)
    code = (
        "import json, sys, time\n"
        "from tf_for_slurm.plan import localhost_plan\n"
        "from tf_for_slurm.runtime import tf2\n"
        f"plan = localhost_plan(['chief', 'ps', 'worker'], [{gone[0]}, {gone[1]}, {silent.getsockname()[1]}], 0)\n"
        "t0 = time.monotonic()\n"
        "report = tf2.shutdown_cluster(plan, timeout=3.0)\n"
        "print(json.dumps({'report': report, 'elapsed': time.monotonic() - t0}))\n"
    )
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=90,
                             cwd=tf2_cluster.REPO)
    finally:
        stop.set()
        th.join(5)
        silent.close()
        for c in accepted:
            c.close()
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["report"]["ps:0"] == "not listening"
    assert result["report"]["worker:0"] != "ok"
    assert result["elapsed"] < 2 * 3.0 + 2.0, result


def _run_mwms(tmp_path, extra: tuple = ()) -> None:
    job = tf2_cluster.start("mwms_task.py", ["worker", "worker"], str(tmp_path), ("--steps", "10") + extra)
    try:
        job.wait(timeout=150)
    finally:
        job.kill_all()
    assert [p.returncode for p in job.procs] == [0, 0], _fail_msg(job)
    w0 = json.loads((tmp_path / "worker0.json").read_text())
    w1 = json.loads((tmp_path / "worker1.json").read_text())
    assert w0["replicas"] == w1["replicas"] == 2
    assert (w0["is_chief"], w1["is_chief"]) == (True, False)
    # each worker fed different data; identical weights mean gradients were all-reduced
    assert w0["final"] == w1["final"]
    assert w0["final"] != w0["initial"]
    assert w0["losses"][-1] < w0["losses"][0]


@pytest.mark.tf
@needs_tf
@pytest.mark.timeout(180)
def test_mwms_two_workers_custom_loop_identical_weights(tmp_path):
    _run_mwms(tmp_path)


@pytest.mark.tf
@needs_tf
@needs_tf_keras
@pytest.mark.timeout(180)
def test_mwms_two_workers_tf_keras_fit_identical_weights(tmp_path):
    _run_mwms(tmp_path, ("--keras-fit",))


@pytest.mark.tf
@needs_tf
@needs_tf_keras
@pytest.mark.timeout(180)
def test_pss_tf_keras_fit_every_process_exits_0(tmp_path):
    job = tf2_cluster.start("pss_task.py", ["chief", "ps", "worker"], str(tmp_path), ("--steps", "12", "--keras-fit"))
    try:
        job.wait(timeout=150)
    finally:
        job.kill_all()
    assert [p.returncode for p in job.procs] == [0, 0, 0], _fail_msg(job)
    result = json.loads((tmp_path / "chief.json").read_text())
    assert result["w_device"].startswith("/job:ps/")
    assert result["last_loss"] < result["first_loss"]
