"""`tf-slurm exec` supervises every task (no TensorFlow here: shell commands stand in for tasks).

Each test runs a real step of processes through `tf-slurm local` (every task under `tf-slurm
exec`), with a hard timeout, and checks how and when the step ends, and that nothing is left.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from cli_runs import clean_env
from envs import step_env
from wire_peer import SECRET, answer_as_hub, key_for
from tf_for_slurm.host.slurm import under_exec

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable

pytestmark = [pytest.mark.timeout(120), pytest.mark.procs]  # procs: left out of the fast subset (tests/conftest.py)


def local(*args: str, env=None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "tf_for_slurm", "local", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def start_local(*args: str, env=None) -> subprocess.Popen:
    return subprocess.Popen([PY, "-m", "tf_for_slurm", "local", *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})


def leftovers(marker: str) -> list:
    """Processes whose command line still carries `marker` (there must be none after a step)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{pid}/stat") as fh:
                state = fh.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in cmd and state != "Z" and int(pid) != os.getpid():
            found.append((int(pid), cmd))
    return found


def start_established(tmp_path: Path, n: int, *args: str, env=None) -> tuple:
    """start_local with the launcher's stderr in a file, once the step is established: the hub has
    logged every other task's supervisor as joined (debug logging). Returns (Popen, stderr file).

    Why not a sleep: a supervisor starts its command first and then connects, retrying with a
    back-off of up to 1 s; one killed or stopped before it joined is not the event under test."""
    err = tmp_path / "local.err"
    proc = subprocess.Popen([PY, "-m", "tf_for_slurm", "local", *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=err.open("w"), text=True,
                            env={**os.environ, "TF_SLURM_LOG_LEVEL": "DEBUG", **(env or {})})
    end = time.monotonic() + 60
    while len(set(re.findall(r"\(rank (\d+), node\d+\) joined", err.read_text()))) < n - 1:
        if proc.poll() is not None or time.monotonic() > end:
            proc.kill()
            raise AssertionError(f"the step was not established: {err.read_text()[-3000:]}")
        time.sleep(0.05)
    return proc, err


def wait_files(paths, timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if all(p.exists() and p.read_text().strip() for p in paths):
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {paths}")


def script(body: str, marker: str) -> list:
    """A task command: `sh -c BODY marker` (the marker lets the test find leftovers)."""
    return ["sh", "-c", body, marker]


def time_the_end(proc: subprocess.Popen, tmp_path: Path, n: int, act) -> float:
    """Once each of the n tasks' commands wrote its pid (pid.RANK), act() (kill or stop something);
    then seconds from act() until the launcher exited. The launcher is killed in any case."""
    try:
        wait_files([tmp_path / f"pid.{r}" for r in range(n)])
        act()
        t0 = time.monotonic()
        proc.communicate(timeout=30)
        return time.monotonic() - t0
    finally:
        proc.kill()


PID_BODY = 'echo $$ > {}/pid.$SLURM_PROCID; exec sleep 600'  # a task command that reports its pid
GO = 'until [ -f {}/go ]; do sleep 0.05; done; '  # a task command's wait for the test's word (file `go`)


def run_established(tmp_path: Path, n: int, *args: str, env=None) -> tuple:
    """`tf-slurm local ARGS` whose commands wait for the word (GO) given once the step is established
    (start_established): the event under test comes after every supervisor joined, as soon as it
    did. Returns (status, the launcher's stderr)."""
    proc, err_file = start_established(tmp_path, n, *args, env=env)
    try:
        (tmp_path / "go").touch()
        proc.communicate(timeout=60)
    finally:
        proc.kill()
    return proc.returncode, err_file.read_text()


# -- how a step ends ----------------------------------------------------------------------------

def test_tf1_style_ps_that_never_exits_is_ended_right_after_the_last_worker(tmp_path):
    marker = f"m{uuid.uuid4().hex}"
    body = ('if [ "$TF_SLURM_JOB_TYPE" = ps ]; then exec sleep 600; fi; '
            f'date +%s.%N > {tmp_path}/start.$TF_SLURM_TASK_INDEX; '
            f'sleep 0.$((2 + 3 * TF_SLURM_TASK_INDEX)); date +%s.%N > {tmp_path}/done.$TF_SLURM_TASK_INDEX')
    r = local("-n", "3", "--", *script(body, marker))
    ended = time.time()
    assert r.returncode == 0, r.stderr
    last = max(float((tmp_path / f"done.{i}").read_text()) for i in range(2))
    # ended by that exit (the ps sleeps 600 s; the fallback, the 10 s silence rule, would be later): the
    # time itself is bench/bench_shutdown.py's; a busy machine stretches it, never to 5 s
    assert ended - last < 5.0, f"step ended {ended - last:.2f} s after the last worker"
    # counted from the workers' start, not the launch: how fast processes start is not what is timed
    assert ended - min(float((tmp_path / f"start.{i}").read_text()) for i in range(2)) < 10
    assert leftovers(marker) == []


def test_pss_style_servers_are_ended_right_after_the_coordinator(tmp_path):
    marker = f"m{uuid.uuid4().hex}"
    body = (f'if [ "$TF_SLURM_JOB_TYPE" = chief ]; then {GO.format(tmp_path)}date +%s.%N > {tmp_path}/chief; '
            'exit 0; fi; exec sleep 600')
    rc, err = run_established(tmp_path, 5, "-n", "5", "--tasks", "ps,chief,worker,worker,evaluator", "--",
                              *script(body, marker))
    ended = time.time()
    assert rc == 0, err
    assert ended - float((tmp_path / "chief").read_text()) < 5.0  # by its exit: the servers sleep 600 s
    assert leftovers(marker) == []


def test_mwms_style_all_workers_finish(tmp_path):
    marker = f"m{uuid.uuid4().hex}"
    r = local("-n", "3", "--ps", "0", "--", *script('sleep 0.2; echo "$TF_CONFIG"', marker))
    assert r.returncode == 0, r.stderr
    assert r.stdout.count('"task":{"type":"worker"') == 3


def test_a_failing_task_ends_every_task_fast_with_its_status_and_is_named(tmp_path):
    marker = f"m{uuid.uuid4().hex}"
    body = (f'if [ "$SLURM_PROCID" = 2 ]; then {GO.format(tmp_path)}date +%s.%N > {tmp_path}/failed; exit 3; fi; '
            'exec sleep 600')
    rc, err = run_established(tmp_path, 4, "-n", "4", "--", *script(body, marker))
    took = time.time() - float((tmp_path / "failed").read_text())  # from the failure, not the launch
    assert rc == 3, err
    assert took < 8, took
    assert "task 2 exited with status 3" in err, err
    assert "worker 1 (rank 2, node1) failed (exit 3)" in err
    assert leftovers(marker) == []


@pytest.mark.parametrize("victim", [0, 1, 2], ids=["ps", "chief", "worker"])
def test_with_restarts_off_a_sigkilled_command_ends_the_step_non_zero_within_10s(tmp_path, victim):
    marker = f"m{uuid.uuid4().hex}"
    proc, err_file = start_established(tmp_path, 3, "-n", "3", "--", *script(PID_BODY.format(tmp_path), marker),
                                       env={"TF_SLURM_MAX_RESTARTS": "0"})
    took = time_the_end(proc, tmp_path, 3,
                        lambda: os.kill(int((tmp_path / f"pid.{victim}").read_text()), signal.SIGKILL))
    err = err_file.read_text()
    assert proc.returncode == 128 + signal.SIGKILL, err
    assert took < 10, took
    assert f"task {victim} exited with status 137" in err, err
    assert leftovers(marker) == []


def _supervisor_pid(marker: str, rank: int) -> int:
    for pid, cmd in leftovers(marker):
        if "tf_for_slurm exec" in cmd:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                env = dict(x.split(b"=", 1) for x in fh.read().split(b"\0") if b"=" in x)
            if env.get(b"SLURM_PROCID") == str(rank).encode():
                return pid
    raise AssertionError(f"no supervisor of rank {rank} found")


def test_a_killed_supervisor_is_noticed_at_once(tmp_path):
    marker = f"m{uuid.uuid4().hex}"
    proc, err_file = start_established(tmp_path, 3, "-n", "3", "--", *script(PID_BODY.format(tmp_path), marker))
    # joined: the hub hears its connection close; a ps: the step cannot go on without it
    took = time_the_end(proc, tmp_path, 3, lambda: os.kill(_supervisor_pid(marker, 0), signal.SIGKILL))
    err = err_file.read_text()
    assert proc.returncode == 69, err  # the lost status (batch-step requeues), not the launcher's view (137)
    assert took < 5, took
    assert "ps 0 (rank 0, node1) was lost (its supervisor went away without an exit status" in err, err
    assert leftovers(marker) == []


@pytest.mark.parametrize("require_all", [False, True], ids=["goes-on", "every-worker-required"])
def test_a_lost_tf1_worker_the_step_goes_on_without_unless_every_worker_is_required(tmp_path, require_all):
    """Worker 1's supervisor and command killed together (its emulated node lost): by default the
    chief trains on and the step ends 0 when it finishes, the summary naming the lost worker; with
    TF_SLURM_REQUIRE_ALL_WORKERS=1 the step ends at once with the lost status."""
    marker = f"m{uuid.uuid4().hex}"
    body = (f'echo $$ > {tmp_path}/pid.$SLURM_PROCID; '
            f'if [ "$TF_SLURM_JOB_TYPE$TF_SLURM_TASK_INDEX" = worker0 ]; then {GO.format(tmp_path)}exit 0; fi; '
            'exec sleep 600')
    env = {"TF_SLURM_REQUIRE_ALL_WORKERS": "1" if require_all else "0"}
    proc, err_file = start_established(tmp_path, 3, "-n", "3", "--", *script(body, marker), env=env)
    try:
        wait_files([tmp_path / f"pid.{r}" for r in range(3)])
        supervisor = _supervisor_pid(marker, 2)
        os.kill(supervisor, signal.SIGKILL)  # the node's processes, at once:
        with contextlib.suppress(ProcessLookupError):  # its command may already have died with it
            os.kill(int((tmp_path / "pid.2").read_text()), signal.SIGKILL)
        if not require_all:
            end = time.monotonic() + 30
            while "going on without it" not in err_file.read_text():  # the hub decided: now the chief ends
                assert proc.poll() is None and time.monotonic() < end, err_file.read_text()[-3000:]
                time.sleep(0.05)
            (tmp_path / "go").touch()
        proc.communicate(timeout=30)
    finally:
        proc.kill()
    err = err_file.read_text()
    if require_all:  # (the launcher may see the hub's report of it before or after the exit: the same end)
        assert proc.returncode == 69, err
        assert "worker 1 (rank 2, node1) was lost (its supervisor went away" in err, err
    else:
        assert proc.returncode == 0, err
        assert "task 2 was killed (status 137): taken for a lost node" in err, err
        assert re.search(r"ended with status 0 after [0-9.]+ s: training is over; finished with 1 of 2 workers "
                         r"\(worker 1 on node1 lost at \d\d:\d\d:\d\d\)", err), err
    assert leftovers(marker) == []


def test_a_silent_supervisor_is_taken_for_a_dead_node(tmp_path):
    marker = f"m{uuid.uuid4().hex}"
    # 5 beats a silence: a busy machine is no silence (noticed on the hub's 0.5 s tick)
    env = {"TF_SLURM_HEARTBEAT": "0.15", "TF_SLURM_SILENCE": "0.75"}
    proc, err_file = start_established(tmp_path, 3, "-n", "3", "--kill-grace", "0.25", "--",
                                       *script(PID_BODY.format(tmp_path), marker), env=env)
    stopped = []

    def stop() -> None:
        stopped.append(_supervisor_pid(marker, 0))  # joined: the hub counts its silence
        os.kill(stopped[0], signal.SIGSTOP)  # alive but silent, like a node that dropped off the network

    try:
        took = time_the_end(proc, tmp_path, 3, stop)
    finally:
        for pid in stopped:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
    assert proc.returncode != 0
    # silence 0.75 s, then the stopped process cannot act on SIGTERM: the launcher's kill grace (0.25 s)
    assert took < 6, took
    err = err_file.read_text()
    assert "ps 0 (rank 0, node1) was lost (no word from its supervisor" in err, err
    # the stopped supervisor's command dies with it (SIGKILL, parent-death signal): wait for that
    end = time.monotonic() + 10
    while leftovers(marker) and time.monotonic() < end:
        time.sleep(0.05)
    assert leftovers(marker) == []


def test_a_silent_tf1_worker_the_step_went_on_without_hears_why_when_it_wakes(tmp_path):
    """Worker 1's supervisor stopped (a node off the network): the hub goes on without it and tells it
    to leave with 0; woken, it reads why (not "training is over": the chief is still training)."""
    marker = f"m{uuid.uuid4().hex}"
    body = (f'echo $$ > {tmp_path}/pid.$SLURM_PROCID; '
            f'if [ "$TF_SLURM_JOB_TYPE$TF_SLURM_TASK_INDEX" = worker0 ]; then {GO.format(tmp_path)}exit 0; fi; '
            'exec sleep 600')
    env = {"TF_SLURM_HEARTBEAT": "0.15", "TF_SLURM_SILENCE": "0.75"}
    proc, err_file = start_established(tmp_path, 3, "-n", "3", "--", *script(body, marker), env=env)
    stopped = None
    try:
        wait_files([tmp_path / f"pid.{r}" for r in range(3)])
        stopped = _supervisor_pid(marker, 2)
        os.kill(stopped, signal.SIGSTOP)
        end = time.monotonic() + 30
        while "going on without it" not in err_file.read_text():
            assert proc.poll() is None and time.monotonic() < end, err_file.read_text()[-3000:]
            time.sleep(0.05)
        os.kill(stopped, signal.SIGCONT)
        while "ending this task" not in err_file.read_text():  # it reads the hub's word, the chief still runs
            assert proc.poll() is None and time.monotonic() < end, err_file.read_text()[-3000:]
            time.sleep(0.05)
        (tmp_path / "go").touch()
        proc.communicate(timeout=30)
    finally:
        if stopped is not None:
            try:
                os.kill(stopped, signal.SIGCONT)
            except ProcessLookupError:
                pass
        proc.kill()
    err = err_file.read_text()
    assert proc.returncode == 0, err
    assert "ending this task: the step went on without this task: it was lost (no word from its supervisor" in err, err
    assert leftovers(marker) == []


def test_drain_period_ends_a_late_tf1_worker_with_one_warning_and_status_0(tmp_path):
    marker = f"m{uuid.uuid4().hex}"
    # the chief finishes once every supervisor joined (GO); the drain (0.25 s) counts from its end
    body = ('case "$TF_SLURM_JOB_TYPE$TF_SLURM_TASK_INDEX" in ps0) exec sleep 600;; '
            f'worker0) {GO.format(tmp_path)}date +%s.%N > {tmp_path}/chief_done; exit 0;; esac; exec sleep 600')
    rc, err = run_established(tmp_path, 3, "-n", "3", "--", *script(body, marker), env={"TF_SLURM_DRAIN": "0.25"})
    took = time.time() - float((tmp_path / "chief_done").read_text())
    assert rc == 0, err
    assert 0.25 <= took < 7, took
    warnings = [line for line in err.splitlines() if "WARNING" in line and "still running" in line]
    assert len(warnings) == 1 and "worker 1 (rank 2, node1) still running 0.25 s after the chief finished" in warnings[0]
    assert leftovers(marker) == []


def test_ctrl_c_to_the_launcher_ends_the_whole_stack(tmp_path):
    marker = f"m{uuid.uuid4().hex}"
    proc = start_local("-n", "3", "--", *script(PID_BODY.format(tmp_path), marker))
    time_the_end(proc, tmp_path, 3, lambda: proc.send_signal(signal.SIGINT))
    assert proc.returncode != 0
    assert leftovers(marker) == []


def test_a_program_that_cannot_run_fails_the_step_with_127():
    r = local("-n", "3", "--", "/no/such/program")
    assert r.returncode == 127, r.stderr
    assert "cannot run '/no/such/program'" in r.stderr


# -- the environment the command gets -----------------------------------------------------------

def test_local_gives_tf_config_by_default_and_slurm_only_on_request():
    # is TF_CONFIG set, and SLURM_PROCID (None: not set), read from sh: no Python start-up per task
    code = ('if [ -n "${TF_CONFIG+set}" ]; then c=True; else c=False; fi; '
            'echo "CFG $c ${SLURM_PROCID-None}"')
    r = local("-n", "2", "--ps", "0", "--", "sh", "-c", code)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("CFG True") == 2
    r = local("-n", "2", "--slurm-env-only", "--", "sh", "-c", code)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("CFG False") == 2


def test_an_explicit_exec_inside_local_stays_harmless():
    r = local("-n", "3", "--", PY, "-m", "tf_for_slurm", "exec", "--", "sh", "-c",
              'test "$TF_SLURM_JOB_TYPE" = ps && exec sleep 600; echo "$TF_SLURM_JOB_TYPE:$TF_SLURM_TASK_INDEX"')
    assert r.returncode == 0, r.stderr
    assert sorted(line.split(": ", 1)[1] for line in r.stdout.splitlines()) == ["worker:0", "worker:1"]


def test_tf1_workers_get_device_filters_and_keras_2_others_do_not(tmp_path):
    # the ps's command is ended once the workers are done: the workers wait for the ps's line.
    # A shell reads the environment exec gives as Python would (None: not set), without Python's start-up
    code = ('echo "F ${TF_SLURM_JOB_TYPE-None} ${TF_SLURM_SESSION_FILTERS-None} ${TF_USE_LEGACY_KERAS-None} '
            '${TF_SLURM_STRATEGY-None} ${TF_SLURM_RECOVERY_WAIT-None}"; '
            'if [ "$TF_SLURM_JOB_TYPE" = ps ]; then touch "$0"; else i=0; '
            'until [ -f "$0" ] || [ $i -ge 600 ]; do sleep 0.05; i=$((i + 1)); done; fi')
    r = local("-n", "3", "--", "sh", "-c", code, str(tmp_path / "ps-printed"))
    assert r.returncode == 0, r.stderr
    lines = sorted(line.split(": ", 1)[1] for line in r.stdout.splitlines() if ": F " in line)
    keras = "1" if __import__("importlib").util.find_spec("tf_keras") else "None"
    assert lines == [f"F ps /job:ps/task:0 {keras} tf1 1", f"F worker /job:ps,/job:worker/task:0 {keras} tf1 1",
                     f"F worker /job:ps,/job:worker/task:1 {keras} tf1 1"]  # recovery wait: 1 s
    (tmp_path / "ps-printed").unlink()
    r = local("-n", "3", "--", "sh", "-c", code, str(tmp_path / "ps-printed"),
              env={"TF_SLURM_DEVICE_FILTERS": "0", "TF_USE_LEGACY_KERAS": "0"})
    assert r.returncode == 0, r.stderr
    lines = [line for line in r.stdout.splitlines() if ": F " in line]
    assert len(lines) == 3 and all(" None 0 tf1 None" in line for line in lines), r.stdout


def test_exec_in_a_batch_script_without_srun_fails_at_once_naming_srun():
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    env.update({"SLURM_JOB_ID": "77", "SLURM_JOB_NODELIST": "node[1-3]", "SLURM_TASKS_PER_NODE": "1(x3)",
                "SLURM_NTASKS": "3", "SLURM_NODEID": "0", "SLURM_LOCALID": "0", "SLURM_PROCID": "0"})
    t0 = time.monotonic()
    r = subprocess.run([PY, "-m", "tf_for_slurm", "exec", "--", "true"], env=env, capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 2
    assert time.monotonic() - t0 < 5
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "srun tf-slurm exec -- python train.py" in lines[0] and "SLURM_NTASKS=3" in lines[0]


def test_exec_checks_the_tasks_tensorflow_port_before_starting_the_command():
    import socket

    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {**os.environ, **step_env("localhost", "1", TF_SLURM_BASE_PORT=str(port), TF_SLURM_PS="0")}
        r = subprocess.run([PY, "-m", "tf_for_slurm", "exec", "--", "true"], env=env, capture_output=True,
                           text=True, timeout=30)
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1
    assert f"={port}: expected a free TCP port" in r.stderr and "its TensorFlow server" in r.stderr


def test_exec_gives_each_task_its_share_of_the_nodes_gpus(cli_runs):
    code = 'import os; print(os.environ.get("CUDA_VISIBLE_DEVICES"))'
    seen = {}
    for slot in range(4):  # one node, 1 ps + 3 workers, Slurm gave GPUs 2 and 5
        env = {k: v for k, v in clean_env().items() if not k.startswith("CUDA")}
        env.update(step_env("localhost", "4", slot=slot, SLURM_STEP_GPUS="2,5", TF_SLURM_BASE_PORT="31500"))
        r = cli_runs.run(["exec", "--no-supervise", "--", PY, "-c", code], env, timeout=30)  # forked (cli_runs.py)
        assert r.returncode == 0, r.stderr
        seen[slot] = r.stdout.strip()
    assert seen == {0: "", 1: "2", 2: "5", 3: "2"}


# -- without a launcher that kills the others (srun without --kill-on-bad-exit) ---------------------

def start_step(n: int, body: str, marker: str, roles: str = "", extra=None, logs: Path = None) -> list:
    """Start every task as `tf-slurm exec` directly, as srun would: nobody but the supervisors ends them.
    With `logs`, debug logging, and each task's stderr goes to logs/err.RANK (see wait_joined)."""
    procs = []
    job = str(int(time.time() * 1000) % 9_000_000 + 1_000_000)
    for slot in range(n):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "TF_SLURM"))}
        env.update(step_env("node[1-%d]" % n, "1(x%d)" % n, slot=slot, job_id=job,
                            TF_SLURM_ADDRESS="template:127.0.0.1", TF_SLURM_PORT_SCOPE="step", **(extra or {})))
        if roles:
            env["TF_SLURM_TASKS"] = roles
        err = subprocess.PIPE
        if logs is not None:
            env["TF_SLURM_LOG_LEVEL"] = "DEBUG"
            err = (logs / f"err.{slot}").open("w")
        procs.append(subprocess.Popen([PY, "-m", "tf_for_slurm", "exec", "--", "sh", "-c", body, marker],
                                      env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=err,
                                      text=True, start_new_session=True))
    return procs


def wait_joined(procs: list, logs: Path) -> None:
    """Until the hub logged every other task's supervisor as joined (start_step with `logs`)."""
    end = time.monotonic() + 60
    while True:
        text = "".join(p.read_text() for p in logs.glob("err.*"))
        if len(set(re.findall(r"\(rank (\d+), node\d+\) joined", text))) >= len(procs) - 1:
            return
        if time.monotonic() > end or any(p.poll() is not None for p in procs):
            for p in procs:
                p.kill()
            raise AssertionError(f"the step was not established: {text[-3000:]}")
        time.sleep(0.05)


def finish(procs, timeout: float) -> list:
    end = time.monotonic() + timeout
    codes = []
    for p in procs:
        try:
            p.communicate(timeout=max(0.1, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise AssertionError(f"task pid {p.pid} still running {timeout} s on")
        codes.append(p.returncode)
    return codes


@pytest.mark.parametrize("victim", [0, 1, 2], ids=["ps", "chief", "worker"])
def test_without_a_launcher_and_with_restarts_off_a_killed_command_ends_every_task(tmp_path, victim):
    marker = f"m{uuid.uuid4().hex}"
    procs = start_step(3, PID_BODY.format(tmp_path), marker, logs=tmp_path, extra={"TF_SLURM_MAX_RESTARTS": "0"})
    try:
        wait_files([tmp_path / f"pid.{r}" for r in range(3)])
        wait_joined(procs, tmp_path)
        os.kill(int((tmp_path / f"pid.{victim}").read_text()), signal.SIGKILL)
        t0 = time.monotonic()
        codes = finish(procs, 15)
    finally:
        for p in procs:
            p.kill()
    assert time.monotonic() - t0 < 10
    assert codes == [137, 137, 137]
    assert leftovers(marker) == []


def test_without_a_launcher_a_failing_task_ends_every_task_with_its_status(tmp_path):
    marker = f"m{uuid.uuid4().hex}"
    body = (f'if [ "$SLURM_PROCID" = 3 ]; then {GO.format(tmp_path)}date +%s.%N > {tmp_path}/failed; exit 5; fi; '
            'exec sleep 600')
    procs = start_step(4, body, marker, logs=tmp_path)
    wait_joined(procs, tmp_path)
    (tmp_path / "go").touch()
    codes = finish(procs, 15)
    assert codes == [5, 5, 5, 5]
    assert time.time() - float((tmp_path / "failed").read_text()) < 10  # from the failure, not the start
    assert leftovers(marker) == []


def test_without_a_launcher_pss_servers_end_0_with_the_coordinator(tmp_path):
    marker = f"m{uuid.uuid4().hex}"
    body = f'if [ "$TF_SLURM_JOB_TYPE" = chief ]; then {GO.format(tmp_path)}exit 0; fi; exec sleep 600'
    procs = start_step(4, body, marker, roles="chief,ps,worker,worker", logs=tmp_path)
    wait_joined(procs, tmp_path)
    (tmp_path / "go").touch()
    codes = finish(procs, 15)
    assert codes == [0, 0, 0, 0]
    assert leftovers(marker) == []


def test_runtime_launch_in_a_batch_script_without_srun_fails_at_once():
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    env.update({"SLURM_JOB_ID": "77", "SLURM_JOB_NODELIST": "node[1-3]", "SLURM_TASKS_PER_NODE": "1(x3)",
                "SLURM_NTASKS": "3", "SLURM_NODEID": "0", "SLURM_LOCALID": "0", "SLURM_PROCID": "0"})
    code = ("import sys\nfrom tf_for_slurm.runtime import launch\nfrom tf_for_slurm.errors import TfSlurmError\n"
            "try:\n    launch(lambda ctx: None)\nexcept TfSlurmError as e:\n"
            "    print(e); print('tensorflow' in sys.modules); sys.exit(e.exit_code)\n")
    r = subprocess.run([PY, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    message, tf_loaded = r.stdout.strip().splitlines()
    assert "srun python train.py" in message and tf_loaded == "False"


@pytest.mark.slurm
def test_exec_in_a_real_batch_script_without_srun_fails_at_once(slurm_cluster, tmp_path):
    out = tmp_path / "out"
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/bash\nPYTHONPATH={ROOT} {PY} -m tf_for_slurm exec -- sleep 600\necho rc=$?\n")
    job, info = slurm_cluster.sbatch_poll(["-N3", "-n3", "-o", str(out), str(script)], timeout=60)
    text = out.read_text()
    assert info["JobState"] == "COMPLETED", (info, text)
    assert "rc=2" in text and "srun tf-slurm exec -- python train.py" in text
    assert float(info.get("RunTime", "00:00:00").split(":")[-1]) < 30


def test_per_rank_log_files_with_sruns_patterns(tmp_path):
    # every task waits until all three printed: the ps is ended once the workers are done, maybe before it printed
    ready = tmp_path / "ready"
    ready.mkdir()
    r = local("-n", "3", "-N", "2", "--job-id", "4711", "--output", str(tmp_path / "train-%j-%t-%n-%N.log"), "--",
              "sh", "-c", f'echo "out $SLURM_PROCID"; echo "err $SLURM_PROCID" >&2; touch {ready}/$SLURM_PROCID; '
              f'until [ -f {ready}/0 ] && [ -f {ready}/1 ] && [ -f {ready}/2 ]; do sleep 0.05; done')
    assert r.returncode == 0, r.stderr
    assert r.stdout == ""
    files = sorted(p.name for p in tmp_path.glob("train-*.log"))
    assert files == ["train-4711-0-0-node1.log", "train-4711-1-0-node1.log", "train-4711-2-1-node2.log"]
    for rank, name in enumerate(files):
        assert (tmp_path / name).read_text().split("\n")[:2] == [f"out {rank}", f"err {rank}"]
    bad = local("-n", "2", "--output", "x-%q.log", "--", "true")
    assert bad.returncode == 2 and "--output='x-%q.log'" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_a_spoke_waiting_for_an_unanswered_report_does_not_spin():
    """A hub that accepts the task but never acknowledges its exit: the spoke waits report_wait
    seconds (0.5) for the ack, asleep (a busy loop here once burnt a core): its CPU time is taken
    when the hub got the report and when the spoke ended, so the wait is measured by itself."""
    import socket
    import threading

    from tf_for_slurm.host.environment import plan_from_env
    from tf_for_slurm.errors import TfSlurmError
    from tf_for_slurm.host.network import ensure_bindable

    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "TF_SLURM"))}
    # task 1 of 2 (worker 1, a spoke); the fake hub listens on rank 0's auxiliary port
    env.update(step_env("localhost", "2", slot=1, TF_SLURM_PS="0", TF_SLURM_REPORT_WAIT="0.5",
                        TF_SLURM_ADDRESS="template:127.0.0.1", TF_SLURM_PORT_SCOPE="step"))
    for base in range(21000 + os.getpid() % 500 * 8, 32000, 97):  # below the ephemeral range
        env["TF_SLURM_BASE_PORT"] = str(base)
        plan = plan_from_env(env, check=False)
        try:
            hub = socket.create_server(("127.0.0.1", plan.tasks[0].aux_port))
        except OSError:
            continue
        try:
            ensure_bindable(plan.tasks[1].port, "the spoke's TensorFlow port")
            break
        except TfSlurmError:
            hub.close()
    got = []
    spoke = []  # its pid, once started
    reported = {}  # when the hub got `exit`: monotonic time and the spoke's CPU seconds until then

    def cpu_seconds(pid: int) -> float:  # utime, stime, cutime, cstime: as wait4's usage counts them
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")

    env["TF_SLURM_SECRET"] = SECRET
    env["TF_SLURM_PREFLIGHT"] = "0"  # alone against a fake hub: no peers to check

    def serve():
        conn, _ = hub.accept()
        with conn:
            pending = bytearray()
            proven, _seen = answer_as_hub(conn, key_for("4242.0"), "4242.0", pending)
            assert proven
            conn.sendall(b"ok 0.2\n")
            got.append(b"ok")
            buf = bytes(pending)
            while b"exit" not in buf:
                data = conn.recv(4096)
                if not data:
                    return
                buf += data
            reported.update(at=time.monotonic(), cpu=cpu_seconds(spoke[0]))
            got.append(buf)
            time.sleep(5)

    threading.Thread(target=serve, daemon=True).start()
    proc = subprocess.Popen([PY, "-m", "tf_for_slurm", "exec", "--", "sleep", "0.3"], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    spoke.append(proc.pid)
    t0 = time.monotonic()
    _pid, status, usage = os.wait4(proc.pid, 0)
    ended = time.monotonic()
    hub.close()
    assert os.waitstatus_to_exitcode(status) == 0, proc.stderr.read().decode()
    assert 0.75 < ended - t0 < 6, ended - t0  # its command's 0.3 s, then the 0.5 s wait
    assert got and b"exit 0" in got[-1]
    assert 0.45 < ended - reported["at"] < 5, ended - reported["at"]  # it waited for the ack
    assert usage.ru_utime + usage.ru_stime < 1.0, usage
    waiting = usage.ru_utime + usage.ru_stime - reported["cpu"]
    assert waiting < 0.2, waiting  # asleep while waiting, not spinning (a spin: ~0.5 s, or 0.25 on a shared core)


def test_sigusr1_reaches_every_command_through_local_and_exec(tmp_path):
    """As srun and `scancel --signal=USR1` do: the step goes on; the commands decide what to do."""
    code = ("import os, signal, sys, time\n"
            "got = []\n"
            "signal.signal(signal.SIGUSR1, lambda s, f: got.append(s))\n"
            f"open(os.path.join({str(tmp_path)!r}, 'up.' + os.environ['SLURM_PROCID']), 'w').close()\n"
            "end = time.time() + 30\n"
            "while not got and time.time() < end:\n"
            "    time.sleep(0.05)\n"
            "print('USR1' if got else 'nothing', flush=True)\n"
            "sys.exit(0 if got else 4)\n")
    proc = start_local("-n", "3", "--ps", "0", "--", PY, "-c", code)
    try:
        end = time.monotonic() + 30
        while len(list(tmp_path.glob("up.*"))) < 3:
            assert time.monotonic() < end and proc.poll() is None
            time.sleep(0.05)
        proc.send_signal(signal.SIGUSR1)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert sorted(line.split(": ", 1)[1] for line in out.splitlines()) == ["USR1"] * 3


def test_launch_reruns_itself_under_exec_only_inside_a_step(monkeypatch):
    import importlib

    from tf_for_slurm.host.environment import plan_from_env

    launch_mod = importlib.import_module("tf_for_slurm.runtime.launch")  # the module, not the function
    env = step_env("node[1-3]", "1(x3)", slot=1, TF_SLURM_ADDRESS="template:127.0.0.1", TF_SLURM_BASE_PORT="23000")
    plan = plan_from_env(env, check=False)
    assert launch_mod._can_supervise(plan, env)
    assert not launch_mod._can_supervise(plan, {**env, "TF_SLURM_SUPERVISE": "0"})
    no_step = {k: v for k, v in env.items() if not k.startswith("SLURM_STEP")}
    assert not launch_mod._can_supervise(plan, no_step)
    assert not under_exec(env)
    assert under_exec({**env, "TF_SLURM_SUPERVISED": "4242.0.1"})
    assert not under_exec({**env, "TF_SLURM_SUPERVISED": "999.0.1"})  # another step's
    seen = []
    monkeypatch.setattr(launch_mod.os, "execv", lambda path, argv: seen.append(argv))
    monkeypatch.setattr(launch_mod.sys, "orig_argv", ["python3", "train.py", "--steps", "5"], raising=False)
    launch_mod._reexec_under_exec(plan)
    argv = seen[-1]
    assert argv[1:4] == ["-m", "tf_for_slurm", "exec"]
    assert argv[argv.index("--tasks") + 1] == "ps,worker,worker"
    assert argv[argv.index("--address") + 1] == "template:127.0.0.1"
    assert argv[argv.index("--") + 1:] == [sys.executable, "train.py", "--steps", "5"]
    iface = plan.__class__(tasks=plan.tasks, my_rank=plan.my_rank, job_id=plan.job_id, step_id=plan.step_id,
                           details=(("address_policy", "iface:ib0"),))
    launch_mod._reexec_under_exec(iface)
    assert "--address" not in seen[-1]


@pytest.mark.tf
@pytest.mark.parametrize("off", [False, True])
def test_get_server_dictionary_gives_the_tasks_sessions_device_filters(off):
    """Original-style scripts open sessions without filters; a late one would wait for a finished task."""
    code = ("import tensorflow as tf\n"
            "from tf_for_slurm.ServerDictionary import GetServerDictionary\n"
            "d, job, index = GetServerDictionary(['ps', 'worker', 'worker'], NoIB=True)\n"
            "from tensorflow.python.client import session\n"
            "print(job, index, getattr(session.Session, '_tf_slurm_filters', False))\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "TF_SLURM"))}
    env.update(step_env("localhost", "3", slot=0, TF_SLURM_BASE_PORT="23500", TF_CPP_MIN_LOG_LEVEL="2",
                        **({"TF_SLURM_DEVICE_FILTERS": "0"} if off else {})))
    r = subprocess.run([PY, "-c", code], env=env, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split()[-3:] == ["ps", "0", "False" if off else "True"]
