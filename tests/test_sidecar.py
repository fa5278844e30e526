"""ps sidecar for unmodified scripts: all good -> 0, a worker fails -> its status, a worker SIGKILLed -> 1 naming
it, the ps command exits by itself, bad log level, missing aux ports, the report protocol."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tf_for_slurm import sidecar
from tf_for_slurm.errors import PlanError, UsageError
from tf_for_slurm.liveness import port_accepts
from tf_for_slurm.plan import localhost_plan

HERE = Path(__file__).resolve().parent
TASKS = HERE / "launcher_tasks"
ROOT = HERE.parent
PY = sys.executable
SERVER = str(TASKS / "fake_server.py")
RUNNER = str(TASKS / "exec_runner.py")
FAST = {"report_grace": 1.0, "probe_interval": 0.2, "kill_grace": 1.0, "startup_grace": 30.0}


def free_ports(n: int) -> list:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def make_plan(roles: list, my_rank=None, aux: bool = True):
    ports = free_ports(2 * len(roles))
    plan = localhost_plan(roles, ports[: len(roles)], my_rank)
    tasks = tuple(t._replace(aux_port=ports[len(roles) + t.rank] if aux else None) for t in plan.tasks)
    return dataclasses.replace(plan, tasks=tasks)


def spec_of(plan, rank: int, **extra) -> str:
    return json.dumps({"roles": [t.role for t in plan.tasks], "ports": [t.port for t in plan.tasks],
                       "aux": [t.aux_port for t in plan.tasks], "rank": rank, **extra})


def start_task(plan, rank: int, cmd: list, err_path=None, **extra) -> subprocess.Popen:
    """What `tf-slurm exec -- CMD` does for task `rank` (sidecar for ps, report for workers).
    With err_path, stderr goes to that file (to watch it while the task runs)."""
    stderr = open(err_path, "w") if err_path else subprocess.PIPE
    try:
        return subprocess.Popen([PY, RUNNER, spec_of(plan, rank, **extra), "--", *cmd], cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=stderr, text=True)
    finally:
        if err_path:
            stderr.close()


def server_cmd(task, *args: str) -> list:
    return [PY, SERVER, "--port", str(task.port), *args]


def finish(proc: subprocess.Popen, timeout: float) -> tuple:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"task did not end within {timeout} s; stderr: {err}")
    return proc.returncode, out, err


def kill_all(procs: list) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.communicate()


def wait_for(cond, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


# -- whole jobs: one ps under the sidecar, workers under run_and_report ------------------------------

@pytest.mark.timeout(60)
def test_all_workers_succeed_ps_ends_with_zero():
    plan = make_plan(["ps", "worker", "worker", "chief"])
    ps_task = plan.tasks[0]
    procs = [start_task(plan, 0, server_cmd(ps_task), sidecar=FAST, log_level="INFO")]
    try:
        wait_for(lambda: port_accepts("127.0.0.1", ps_task.port) or procs[0].poll() is not None, 20, "the ps command to serve")
        assert procs[0].poll() is None, procs[0].communicate()
        start = time.monotonic()
        for rank in (1, 2, 3):
            procs.append(start_task(plan, rank, server_cmd(plan.tasks[rank], "--exit-after", "0.3")))
        for p in procs[1:]:
            assert finish(p, 30)[0] == 0
        rc, _, err = finish(procs[0], 30)
        took = time.monotonic() - start
    finally:
        kill_all(procs)
    assert rc == 0, err
    assert took < 10, f"ps took {took:.1f} s to end after the workers"
    assert "all 3 workers finished" in err
    assert not port_accepts("127.0.0.1", ps_task.port)  # the joined ps command was ended


@pytest.mark.timeout(60)
def test_worker_fails_ps_ends_non_zero_naming_it():
    plan = make_plan(["ps", "worker", "worker"])
    procs = [start_task(plan, 0, server_cmd(plan.tasks[0]), sidecar=FAST)]
    try:
        procs.append(start_task(plan, 1, server_cmd(plan.tasks[1])))  # blocks: would never finish
        procs.append(start_task(plan, 2, server_cmd(plan.tasks[2], "--exit-after", "0.2", "--code", "3")))
        assert finish(procs[2], 30)[0] == 3  # the worker keeps its own status
        rc, _, err = finish(procs[0], 30)
    finally:
        kill_all(procs)
    assert rc == 3  # the failed worker's status
    assert "ERROR" in err and "worker 1 (127.0.0.1:%d) failed with exit status 3" % plan.tasks[2].port in err


@pytest.mark.timeout(60)
def test_worker_sigkilled_without_report_is_detected_within_bound(tmp_path):
    plan = make_plan(["ps", "worker", "worker"])
    pidfile = tmp_path / "w0.pid"
    err_path = tmp_path / "ps.err"
    procs = [start_task(plan, 0, server_cmd(plan.tasks[0]), err_path=err_path, sidecar=FAST, log_level="INFO")]
    try:
        procs.append(start_task(plan, 1, server_cmd(plan.tasks[1], "--pidfile", str(pidfile))))
        procs.append(start_task(plan, 2, server_cmd(plan.tasks[2])))
        w0 = f"worker 0 (127.0.0.1:{plan.tasks[1].port})"
        wait_for(lambda: f"{w0} is up" in err_path.read_text(), 20, "the sidecar to see worker 0 up")
        procs[1].send_signal(signal.SIGKILL)  # the exec wrapper: no report can be sent
        killed = time.monotonic()
        # the wrapper's death takes its command along (no orphan keeps the port open)
        wait_for(lambda: not port_accepts("127.0.0.1", plan.tasks[1].port), 10, "worker 0's command to die")
        rc = finish(procs[0], 30)[0]
        took = time.monotonic() - killed
        err = err_path.read_text()
    finally:
        kill_all(procs)
    assert rc == 1
    assert f"ERROR: {w0} stopped accepting connections" in err
    print(f"SIGKILLed worker detected {took:.2f} s after the kill (report_grace 1 s, probes every 0.2 s)")
    assert took < 1.0 + 0.2 + 4.0, f"detection took {took:.1f} s"


@pytest.mark.timeout(60)
def test_worker_never_seen_is_given_up_after_startup_grace():
    plan = make_plan(["ps", "worker"])
    ps = start_task(plan, 0, server_cmd(plan.tasks[0]), sidecar={**FAST, "startup_grace": 1.5})
    try:
        rc, _, err = finish(ps, 30)
    finally:
        kill_all([ps])
    assert rc == 1
    assert f"worker 0 (127.0.0.1:{plan.tasks[1].port}) never opened its TensorFlow port" in err


@pytest.mark.timeout(60)
@pytest.mark.parametrize("code", [0, 4])
def test_ps_command_exiting_by_itself_gives_its_status(code):
    plan = make_plan(["ps", "worker"])
    worker = start_task(plan, 1, server_cmd(plan.tasks[1]))
    ps = start_task(plan, 0, server_cmd(plan.tasks[0], "--exit-after", "0.3", "--code", str(code)),
                    sidecar=FAST, log_level="INFO")
    try:
        rc, _, err = finish(ps, 30)
    finally:
        kill_all([worker, ps])
    assert rc == code, err
    assert f"exited by itself with status {code}" in err


@pytest.mark.timeout(60)
def test_ps_that_ignores_sigterm_is_killed_and_still_exits_zero():
    plan = make_plan(["ps", "worker"])
    ps = start_task(plan, 0, server_cmd(plan.tasks[0], "--ignore-term"), sidecar={**FAST, "kill_grace": 0.5})
    try:
        wait_for(lambda: port_accepts("127.0.0.1", plan.tasks[0].port), 20, "the ps command to serve")
        worker = start_task(plan, 1, ["true"])
        assert finish(worker, 30)[0] == 0
        rc, _, err = finish(ps, 30)
    finally:
        kill_all([ps])
    assert rc == 0, err
    assert not port_accepts("127.0.0.1", plan.tasks[0].port)


@pytest.mark.timeout(60)
def test_sigterm_to_sidecar_reaches_the_ps_command():
    plan = make_plan(["ps", "worker"])
    ps = start_task(plan, 0, server_cmd(plan.tasks[0]), sidecar=FAST)
    try:
        wait_for(lambda: port_accepts("127.0.0.1", plan.tasks[0].port), 20, "the ps command to serve")
        ps.send_signal(signal.SIGTERM)
        rc, _, _ = finish(ps, 30)
    finally:
        kill_all([ps])
    assert rc == 128 + signal.SIGTERM
    assert not port_accepts("127.0.0.1", plan.tasks[0].port)


# -- in-process: argument checks and the report protocol -----------------------------------------

@pytest.mark.parametrize("level", ["VERBOSE", "", 10, None, "warn"])
def test_bad_log_level_is_a_usage_error(level):
    plan = make_plan(["ps", "worker"], my_rank=0)
    with pytest.raises(UsageError) as err:
        sidecar.run_ps_with_sidecar(plan, ["true"], {}, level)
    assert f"log_level={level!r}" in str(err.value) and "DEBUG, INFO, WARNING, ERROR, CRITICAL" in str(err.value)


def test_log_level_names_are_accepted_in_any_case():
    assert [sidecar.check_log_level(x) for x in ("debug", "Info", "WARNING", "error", "critical")] == \
        ["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]


def test_missing_aux_port_is_a_plan_error_before_anything_runs(tmp_path):
    marker = tmp_path / "ran"
    cmd = ["touch", str(marker)]
    plan_ps = make_plan(["ps", "worker"], my_rank=0, aux=False)
    with pytest.raises(PlanError) as err:
        sidecar.run_ps_with_sidecar(plan_ps, cmd, dict(os.environ))
    assert "aux_port of ps:0" in str(err.value) and "None" in str(err.value)
    plan_w = make_plan(["ps", "worker"], my_rank=1, aux=False)
    with pytest.raises(PlanError) as err:
        sidecar.run_and_report(plan_w, cmd, dict(os.environ))
    assert "aux_port of ps:0" in str(err.value)
    assert not marker.exists()


def test_wrong_role_is_rejected():
    with pytest.raises(UsageError):
        sidecar.run_ps_with_sidecar(make_plan(["ps", "worker"], my_rank=1), ["true"], {})
    with pytest.raises(UsageError):
        sidecar.run_and_report(make_plan(["ps", "worker"], my_rank=0), ["true"], {})


def send(port: int, line: str) -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        conn.sendall(line.encode())
        return conn.makefile("rb").readline().decode().strip()


@pytest.mark.timeout(60)
def test_protocol_rejects_bad_reports_and_acks_good_ones():
    plan = make_plan(["ps", "worker", "worker"], my_rank=0)
    aux = plan.tasks[0].aux_port
    result: dict = {}
    thread = threading.Thread(target=lambda: result.setdefault(
        "rc", sidecar.run_ps_with_sidecar(plan, server_cmd(plan.tasks[0]), dict(os.environ), "ERROR", **FAST)))
    thread.start()
    try:
        wait_for(lambda: port_accepts("127.0.0.1", aux), 20, "the sidecar to listen")
        tag = f"{plan.job_id}.{plan.step_id}"
        assert send(aux, "hello\n") == "error malformed"
        assert send(aux, f"report worker x 0 {tag}\n") == "error malformed"
        assert send(aux, f"report worker 7 0 {tag}\n") == "error unknown-task"
        assert send(aux, "report worker 0 1 999.0\n") == "error other-job"  # another job's stale worker
        assert send(aux, "report ps 0 0\n") == "error unknown-task"
        assert thread.is_alive()  # none of those ended the ps
        assert send(aux, f"report worker 0 0 {tag}\n") == "ack"
        assert send(aux, f"report worker 0 0 {tag}\n") == "ack"  # a retried report is harmless
        assert thread.is_alive()
        assert send(aux, "report worker 1 0\n") == "ack"  # the job tag is optional
        thread.join(timeout=20)
    finally:
        if thread.is_alive():
            send(aux, "report worker 1 9\n")
            thread.join(timeout=20)
    assert result.get("rc") == 0


class FakeSidecar:
    """Records report lines and acks them, like a sidecar."""

    def __init__(self, port: int):
        self.lines: list = []
        self.server = socket.create_server(("127.0.0.1", port))
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            with conn:
                self.lines.append(conn.makefile("rb").readline().decode())
                conn.sendall(b"ack\n")

    def close(self) -> None:
        self.server.shutdown(socket.SHUT_RDWR)  # a close alone would not end the blocked accept()
        self.server.close()
        self.thread.join(timeout=5)


@pytest.mark.timeout(60)
def test_run_and_report_returns_status_and_reports_to_every_ps():
    plan = make_plan(["ps", "ps", "worker", "worker"], my_rank=3)
    fakes = [FakeSidecar(t.aux_port) for t in plan.tasks_with_role("ps")]
    try:
        rc = sidecar.run_and_report(plan, [PY, "-c", "raise SystemExit(5)"], dict(os.environ))
    finally:
        for f in fakes:
            f.close()
    assert rc == 5
    tag = f"{plan.job_id}.{plan.step_id}"
    assert [f.lines for f in fakes] == [[f"report worker 1 5 {tag}\n"]] * 2


@pytest.mark.timeout(60)
def test_report_retries_until_a_late_sidecar_listens():
    plan = make_plan(["ps", "worker"], my_rank=1)
    holder: list = []
    timer = threading.Timer(0.7, lambda: holder.append(FakeSidecar(plan.tasks[0].aux_port)))
    timer.start()
    try:
        # the ps's TF port is up (the ps is alive) while its sidecar is not yet listening
        with socket.create_server(("127.0.0.1", plan.tasks[0].port)):
            answers = sidecar.report_status(plan, 0, deadline=20, gone_after=0.3)
    finally:
        timer.join()
        for f in holder:
            f.close()
    assert answers == {0: "ack"}
    assert holder[0].lines == [f"report worker 0 0 {plan.job_id}.{plan.step_id}\n"]


@pytest.mark.timeout(60)
def test_report_to_a_ps_that_is_gone_gives_up_quickly():
    plan = make_plan(["ps", "worker"], my_rank=1)
    start = time.monotonic()
    answers = sidecar.report_status(plan, 0, deadline=30, gone_after=0.5)
    assert answers == {0: "gone"}
    assert time.monotonic() - start < 5


@pytest.mark.timeout(60)
def test_sidecar_port_taken_is_a_plan_error():
    plan = make_plan(["ps", "worker"], my_rank=0)
    with socket.create_server(("", plan.tasks[0].aux_port)):
        with pytest.raises(PlanError) as err:
            sidecar.run_ps_with_sidecar(plan, ["true"], dict(os.environ))
    assert f"aux_port={plan.tasks[0].aux_port}" in str(err.value)


# -- through the tf-slurm CLI: `tf-slurm local ... -- tf-slurm exec -- SCRIPT` --------------------

def tf_slurm(*args: str) -> list:
    return [PY, "-m", "tf_for_slurm", *args]


def fake_script(*args: str) -> list:
    """An unmodified TF_CONFIG script: serves on its TF_CONFIG port; the ps joins forever."""
    return [PY, SERVER, "--tf-config", *args]


@pytest.mark.timeout(120)
def test_cli_unmodified_script_job_finishes_when_workers_do():
    start = time.monotonic()
    res = subprocess.run(tf_slurm("local", "-n", "4", "--nodes", "2", "--ps", "1", "--",
                                  *tf_slurm("exec", "--sidecar-log-level", "INFO", "--",
                                            *fake_script("--exit-after", "0.5"))),
                         cwd=ROOT, capture_output=True, text=True, timeout=90)
    took = time.monotonic() - start
    assert res.returncode == 0, res.stderr
    assert "0: ps-sidecar[ps:0] INFO: all 3 workers finished" in res.stderr
    assert took < 60


@pytest.mark.timeout(120)
def test_cli_failing_worker_fails_the_job():
    res = subprocess.run(tf_slurm("local", "-n", "3", "--ps", "1", "--", *tf_slurm("exec", "--",
                                  *fake_script("--exit-after", "0.5", "--fail-worker", "1", "--code", "6"))),
                         cwd=ROOT, capture_output=True, text=True, timeout=90)
    assert res.returncode == 6, res.stderr
    # the worker (task 2) or the ps (task 0, its sidecar passing the worker's status on) is seen first
    assert "task 2 exited with status 6" in res.stderr or "task 0 exited with status 6" in res.stderr


@pytest.mark.timeout(120)
def test_cli_ctrl_c_ends_the_whole_stack(tmp_path):
    pidfile = str(tmp_path / "cmd{rank}")
    proc = subprocess.Popen(tf_slurm("local", "-n", "3", "--ps", "1", "--",
                                     *tf_slurm("exec", "--", *fake_script("--pidfile", pidfile))),
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: all((tmp_path / f"cmd{r}").exists() for r in range(3)), 60, "all commands to start")
        pids = [int((tmp_path / f"cmd{r}").read_text()) for r in range(3)]
        start = time.monotonic()
        proc.send_signal(signal.SIGINT)
        rc, _, err = finish(proc, 30)
        took = time.monotonic() - start
    finally:
        kill_all([proc])
    assert rc == 130, err
    assert took < 10, f"Ctrl-C took {took:.1f} s"
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split(")")[1].split()[0] == "Z"


def test_timings_come_from_the_environment_and_are_checked(tmp_path):
    plan = make_plan(["ps", "worker"], my_rank=0)
    env = {**os.environ, "TF_SLURM_SIDECAR_STARTUP_GRACE": "soon"}
    with pytest.raises(UsageError) as err:
        sidecar.run_ps_with_sidecar(plan, ["true"], env)
    assert "TF_SLURM_SIDECAR_STARTUP_GRACE='soon'" in str(err.value)
    with pytest.raises(UsageError) as err:
        sidecar.run_ps_with_sidecar(plan, ["true"], dict(os.environ), report_grace=0)
    assert "report_grace=0" in str(err.value)


@pytest.mark.timeout(60)
def test_startup_grace_from_the_environment_is_used():
    plan = make_plan(["ps", "worker"])
    ps = subprocess.Popen([PY, RUNNER, spec_of(plan, 0), "--", *server_cmd(plan.tasks[0])], cwd=ROOT,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env={**os.environ, "TF_SLURM_SIDECAR_STARTUP_GRACE": "0.5",
                               "TF_SLURM_SIDECAR_PROBE_INTERVAL": "0.1"})
    try:
        rc, _, err = finish(ps, 30)
    finally:
        kill_all([ps])
    assert rc == 1
    assert "within 0.5 s" in err


@pytest.mark.tf
@pytest.mark.timeout(240)
def test_cli_real_tensorflow_script_whose_ps_joins_forever():
    """The product's promise for unmodified scripts, with TensorFlow itself: the job ends with 0."""
    import importlib.util

    if importlib.util.find_spec("tensorflow") is None:
        pytest.skip("TensorFlow is not installed")
    start = time.monotonic()
    res = subprocess.run(tf_slurm("local", "-n", "2", "--ps", "1", "--",
                                  *tf_slurm("exec", "--sidecar-log-level", "INFO", "--",
                                            PY, str(TASKS / "unmodified_tf_config.py"))),
                         cwd=ROOT, capture_output=True, text=True, timeout=200,
                         env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": ""})
    took = time.monotonic() - start
    assert res.returncode == 0, res.stderr[-3000:]
    done = [l for l in res.stdout.splitlines() if l.startswith("1: worker 0 done, loss")]
    assert done and float(done[0].rsplit(" ", 1)[1]) < 0.05, res.stdout
    assert "0: ps-sidecar[ps:0] INFO: all 1 workers finished" in res.stderr
    print(f"unmodified TF job (1 ps + 1 worker, 200 steps) took {took:.1f} s")


@pytest.mark.timeout(60)
def test_worker_whose_program_cannot_run_still_reports_127():
    plan = make_plan(["ps", "worker"], my_rank=1)
    fake = FakeSidecar(plan.tasks[0].aux_port)
    try:
        rc = sidecar.run_and_report(plan, ["/nonexistent/program"], dict(os.environ))
    finally:
        fake.close()
    assert rc == 127
    assert fake.lines == [f"report worker 0 127 {plan.job_id}.{plan.step_id}\n"]
    with pytest.raises(UsageError) as err:
        sidecar.run_ps_with_sidecar(dataclasses.replace(plan, my_rank=0), ["/nonexistent/program"],
                                    dict(os.environ), **FAST)
    assert "argv[0]='/nonexistent/program'" in str(err.value)
