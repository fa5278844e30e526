"""TF1 runtime: real TensorFlow servers in subprocesses on 127.0.0.1 (marked `tf`), plus the
pure parts (reporter numbering, device filters, GPU env) checked without TensorFlow."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tf_for_slurm.errors import PlanError, UsageError
from tf_for_slurm.plan import Task, localhost_plan
from tf_for_slurm.runtime.ps_wait import EXIT_WORKER_FAILED, EXIT_WORKER_LOST

ROOT = Path(__file__).resolve().parents[2]
TASK = ROOT / "tests" / "tf1_tasks" / "train_task.py"
CHILD_ENV = {**os.environ, "GRPC_POLL_STRATEGY": "poll", "TF_CPP_MIN_LOG_LEVEL": "2",
             "PYTHONPATH": str(ROOT)}


def free_ports(n: int) -> list:
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


# --------------------------------------------------------------------------------------------
# Pure parts (no TensorFlow)
# --------------------------------------------------------------------------------------------

def test_import_runtime_does_not_import_tensorflow():
    code = ("import sys, tf_for_slurm, tf_for_slurm.runtime as r, tf_for_slurm.DistributedTFQueueHook; "
            "r.launch; r.wait_for_workers; r.QueueManagementHook; "
            "assert 'tensorflow' not in sys.modules, 'TF imported'")
    subprocess.run([sys.executable, "-c", code], check=True, env=CHILD_ENV, timeout=60)
    code2 = "import sys, tf_for_slurm; assert 'tf_for_slurm.runtime' not in sys.modules"
    subprocess.run([sys.executable, "-c", code2], check=True, env=CHILD_ENV, timeout=60)


def test_reporter_indices_chief_first():
    from tf_for_slurm.runtime import reporter_index, reporter_tasks
    from tf_for_slurm.runtime.done_queue import decode_done, encode_done

    plan = localhost_plan(["worker", "ps", "chief", "worker", "evaluator"], [1, 2, 3, 4, 5])
    order = [(t.role, t.index) for t in reporter_tasks(plan)]
    assert order == [("chief", 0), ("worker", 0), ("worker", 1)]
    assert reporter_index(plan, plan.tasks[3]) == 2
    with pytest.raises(UsageError, match="role='ps'"):
        reporter_index(plan, plan.tasks[1])
    for i in range(5):
        assert decode_done(encode_done(i)) == (i, False)
        assert decode_done(encode_done(i, failed=True)) == (i, True)


def test_chief_choice():
    from tf_for_slurm.runtime import chief_of

    assert chief_of(localhost_plan(["ps", "worker", "worker"], [1, 2, 3])).rank == 1
    assert chief_of(localhost_plan(["worker", "ps", "chief"], [1, 2, 3])).role == "chief"
    with pytest.raises(UsageError, match="at least one 'worker'"):
        chief_of(localhost_plan(["ps", "evaluator"], [1, 2]))


def test_device_filters():
    from tf_for_slurm.runtime import device_filters

    plan = localhost_plan(["ps", "ps", "chief", "worker", "worker"], [1, 2, 3, 4, 5])
    assert device_filters(plan, plan.tasks[0]) == ["/job:ps/task:0"]
    assert device_filters(plan, plan.tasks[1]) == ["/job:ps/task:1"]
    assert device_filters(plan, plan.tasks[2]) == ["/job:ps", "/job:chief/task:0"]
    assert device_filters(plan, plan.tasks[4]) == ["/job:ps", "/job:worker/task:1"]


def _gpu_plan(roles, my_rank, gpus=()):
    tasks = tuple(Task(rank=i, node="n0", node_index=0, local_id=i, role=r, index=sum(
        1 for x in roles[:i] if x == r), host="127.0.0.1", port=1000 + i, gpus=tuple(gpus)) for i, r in enumerate(roles))
    from tf_for_slurm.plan import ClusterPlan

    return ClusterPlan(tasks=tasks, my_rank=my_rank)


def test_configure_gpus_env():
    from tf_for_slurm.runtime import configure_gpus

    roles = ["ps", "worker", "worker"]
    env = {"CUDA_VISIBLE_DEVICES": "4,5,6"}
    assert configure_gpus(_gpu_plan(roles, 0), env) == "" and env["CUDA_VISIBLE_DEVICES"] == ""
    env = {"CUDA_VISIBLE_DEVICES": "4,5,6"}
    assert configure_gpus(_gpu_plan(roles, 1), env) == "4,5"
    env = {"CUDA_VISIBLE_DEVICES": "4,5,6"}
    assert configure_gpus(_gpu_plan(roles, 2), env) == "6"
    env = {"SLURM_STEP_GPUS": "2,3"}  # no CUDA_VISIBLE_DEVICES: physical ids as given
    assert configure_gpus(_gpu_plan(roles, 2), env) == "3"
    env = {}  # plan-provided ids
    assert configure_gpus(_gpu_plan(roles, 1, gpus=("7", "9")), env) == "7"
    env = {"CUDA_VISIBLE_DEVICES": "0", "SLURM_STEP_GPUS": "2,3"}  # Slurm bound per task
    assert configure_gpus(_gpu_plan(roles, 2), env) == "0"
    env = {}  # CPU-only node
    assert configure_gpus(_gpu_plan(roles, 1), env) == ""


def test_bad_arguments_are_one_line_errors():
    from tf_for_slurm.runtime import QueueManagementHook, launch, start_server
    from tf_for_slurm.runtime.hooks import BarrierOnChiefHook, PrintStepHook

    with pytest.raises(UsageError, match="worker_index=2: expected an int in \\[0, 1\\]"):
        QueueManagementHook(1, 2, worker_index=2)
    with pytest.raises(UsageError, match="n_ps=0"):
        QueueManagementHook(0, 2, worker_index=0)
    with pytest.raises(UsageError, match="every_n_steps=0"):
        PrintStepHook(0)
    with pytest.raises(UsageError, match="timeout_s=0"):
        BarrierOnChiefHook(2, 0, True, timeout_s=0)
    with pytest.raises(UsageError, match="gpu_memory_fraction=1.5"):
        start_server(localhost_plan(["ps", "worker"], [1, 2], 0), gpu_memory_fraction=1.5)
    with pytest.raises(UsageError, match="train_fn=3"):
        launch(3, plan=localhost_plan(["ps", "worker"], [1, 2], 0))


def test_taken_port_is_refused_before_tensorflow(monkeypatch):
    from tf_for_slurm.runtime import start_server

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        plan = localhost_plan(["ps", "worker"], [free_ports(1)[0], port], my_rank=1)
        with pytest.raises(PlanError) as info:
            start_server(plan)
    msg = str(info.value)
    assert f"={port}:" in msg and "worker:0" in msg and "\n" not in msg


# --------------------------------------------------------------------------------------------
# Real clusters in subprocesses
# --------------------------------------------------------------------------------------------

class Cluster:
    """Start every task of a localhost cluster; record each process's exit time as seen here."""

    def __init__(self, tmp_path: Path, roles: list, mode: str = "async", steps: int = 100,
                 extra: tuple = ()):
        self.roles = roles
        self.ports = free_ports(len(roles))
        self.events = tmp_path / "events.jsonl"
        self.logs = [tmp_path / f"rank{r}.log" for r in range(len(roles))]
        self.procs = []
        for r in range(len(roles)):
            cmd = [sys.executable, str(TASK), "--roles", ",".join(roles), "--ports",
                   ",".join(map(str, self.ports)), "--rank", str(r), "--events", str(self.events),
                   "--mode", mode, "--steps", str(steps), *extra]
            self.procs.append(subprocess.Popen(cmd, env=CHILD_ENV, stdout=subprocess.DEVNULL,
                                               stderr=open(self.logs[r], "w")))
        self.exit_time: dict = {}

    def poll_until(self, cond, deadline_s: float) -> bool:
        end = time.time() + deadline_s
        while time.time() < end:
            for r, p in enumerate(self.procs):
                if r not in self.exit_time and p.poll() is not None:
                    self.exit_time[r] = time.time()
            if cond():
                return True
            time.sleep(0.02)
        return False

    def wait_all(self, deadline_s: float = 240.0) -> list:
        ok = self.poll_until(lambda: len(self.exit_time) == len(self.procs), deadline_s)
        if not ok:
            self.kill()
            pytest.fail(f"cluster did not finish within {deadline_s}s:\n{self.dump()}")
        return [p.returncode for p in self.procs]

    def read_events(self) -> list:
        if not self.events.exists():
            return []
        return [json.loads(line) for line in self.events.read_text().splitlines() if line.strip()]

    def event(self, rank: int, name: str):
        found = [e for e in self.read_events() if e["rank"] == rank and e["event"] == name]
        return found[0] if found else None

    def log(self, rank: int) -> str:
        return self.logs[rank].read_text()

    def dump(self) -> str:
        return "\n".join(f"--- rank {r} ({self.roles[r]}):\n{self.log(r)[-3000:]}" for r in range(len(self.roles)))

    def kill(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=30)


@pytest.fixture
def cluster_factory(tmp_path):
    made = []

    def make(*args, **kwargs):
        c = Cluster(tmp_path, *args, **kwargs)
        made.append(c)
        return c

    yield make
    for c in made:
        c.kill()


def _assert_clean_finish(c: Cluster) -> None:
    rcs = c.wait_all()
    assert rcs == [0] * len(rcs), c.dump()
    worker_ranks = [r for r, role in enumerate(c.roles) if role != "ps"]
    ps_ranks = [r for r, role in enumerate(c.roles) if role == "ps"]
    last_train_end = max(c.event(r, "train_end")["t"] for r in worker_ranks)
    last_report = max(c.event(r, "exit")["t"] for r in worker_ranks)  # launch returned: report done
    for r in ps_ranks:
        ps_exit = c.event(r, "exit")["t"]
        # the ps stayed until every worker finished training ...
        assert ps_exit >= last_train_end, c.dump()
        # ... and left because every report came (exit 0 and this line; not the late-start grace's 30 s,
        # which logs a WARNING, nor a lost worker's 69). How soon after the last report depends on the
        # machine: bench/bench_shutdown.py prints it ("TF1 ps exit latency", target <= 1 s)
        assert "every chief/worker reported done" in c.log(r)


@pytest.mark.tf
@pytest.mark.timeout(300)
def test_async_one_ps_two_workers(cluster_factory):
    # --first-steps-together: the chief waits after its first step until the other worker made one, so
    # both train however fast the chief would run through the 100 steps alone
    c = cluster_factory(["ps", "worker", "worker"], mode="async", steps=100, extra=("--first-steps-together",))
    _assert_clean_finish(c)
    # async: the two workers' local steps add up to (about) the global 100
    local = [c.event(r, "train_end")["local_steps"] for r in (1, 2)]
    assert 100 <= sum(local) <= 102 and min(local) >= 1, local
    assert c.event(1, "train_end")["loss"] < 1e-2


@pytest.mark.tf
@pytest.mark.timeout(300)
def test_sync_replicas_one_ps_two_workers(cluster_factory):
    c = cluster_factory(["ps", "worker", "worker"], mode="sync", steps=60,
                        extra=("--barrier", "--first-steps-together"))
    _assert_clean_finish(c)
    # sync: each global step aggregates 2 gradients (from either worker), so the local steps
    # add up to about twice the global steps (async: about once)
    local = [c.event(r, "train_end")["local_steps"] for r in (1, 2)]
    assert 2 * 60 - 2 <= sum(local) <= 2 * 60 + 8 and min(local) >= 1, local
    assert "chief: all 2 workers are up" in c.log(1), c.log(1)[-2000:]
    assert "global steps/s" in c.log(1)  # PrintStepHook from launch(print_every_n_steps=20)


@pytest.mark.tf
@pytest.mark.timeout(300)
def test_two_ps(cluster_factory):
    c = cluster_factory(["ps", "worker", "ps", "worker"], mode="async", steps=60)
    _assert_clean_finish(c)
    assert "worker:1" in c.log(0) and "worker:1" in c.log(2)


@pytest.mark.tf
@pytest.mark.timeout(300)
def test_killed_worker_makes_ps_fail_within_bound(cluster_factory):
    c = cluster_factory(["ps", "worker", "worker"], mode="async", steps=10**8, extra=("--liveness", "5"))
    assert c.poll_until(lambda: c.event(2, "training") is not None or 0 in c.exit_time, 240), c.dump()
    assert 0 not in c.exit_time, c.dump()
    c.procs[2].send_signal(signal.SIGKILL)
    t_kill = time.time()
    assert c.poll_until(lambda: 0 in c.exit_time, 30), c.dump()
    detect = c.exit_time[0] - t_kill
    assert c.procs[0].returncode == EXIT_WORKER_LOST == 69, c.dump()  # lost: batch-step requeues it
    assert detect <= 5.0, (detect, c.dump())
    ps_log = c.log(0)
    assert f"worker:1 at 127.0.0.1:{c.ports[2]}" in ps_log and "ERROR" in ps_log, ps_log[-2000:]
    assert f"worker:0 at 127.0.0.1:{c.ports[1]}" not in ps_log.split("lost")[-1].splitlines()[0]
    # the surviving worker then loses its ps and exits instead of hanging in session recovery
    assert c.poll_until(lambda: 1 in c.exit_time, 60), c.dump()
    assert c.procs[1].returncode != 0 and "lost ps:0" in c.log(1), c.dump()


@pytest.mark.tf
@pytest.mark.timeout(300)
def test_training_raises_still_reports(cluster_factory):
    c = cluster_factory(["ps", "worker", "worker"], mode="raise", steps=10**8, extra=("--raise-rank", "2"))
    assert c.poll_until(lambda: 0 in c.exit_time and 2 in c.exit_time, 240), c.dump()
    assert c.procs[2].returncode == 1 and "deliberate failure on rank 2" in c.log(2), c.dump()
    assert "reported done (FAILED)" in c.log(2)
    assert c.procs[0].returncode == EXIT_WORKER_FAILED == 1, c.dump()  # the program's verdict, not a loss
    assert "worker:1 at" in c.log(0) and "training failed" in c.log(0)
    # the ps left because of the report, not the liveness probe (which ends it 69, EXIT_WORKER_LOST): its
    # status 1 above and "training failed" say so, whatever the machine's speed
    # the surviving worker notices the ps is gone (watchdog) and exits non-zero, no hang
    assert c.poll_until(lambda: 1 in c.exit_time, 60), c.dump()
    assert c.procs[1].returncode == 1 and f"lost ps:0 at 127.0.0.1:{c.ports[0]}" in c.log(1), c.dump()


@pytest.mark.tf
@pytest.mark.timeout(200)
def test_taken_port_translated_from_tensorflow(tmp_path):
    """Even when the pre-check is bypassed (a race), TF's gRPC error becomes a PlanError."""
    code = f"""
import socket, sys
sys.path.insert(0, {str(ROOT)!r})
from tf_for_slurm.plan import localhost_plan
from tf_for_slurm.runtime import server as srv
from tf_for_slurm.errors import PlanError
held = socket.socket(); held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
held.bind(("0.0.0.0", 0)); held.listen(); port = held.getsockname()[1]
srv.check_port_free = lambda task: None
try:
    srv.start_server(localhost_plan(["ps", "worker"], [port, {free_ports(1)[0]}], 0))
except PlanError as e:
    print("PLANERROR", port, e)
"""
    out = subprocess.run([sys.executable, "-c", code], env=CHILD_ENV, capture_output=True, text=True,
                         timeout=180)
    line = [x for x in out.stdout.splitlines() if x.startswith("PLANERROR")]
    assert line, out.stdout + out.stderr[-3000:]
    _, port, msg = line[0].split(" ", 2)
    assert f"={port}:" in msg and "ps:0" in msg and "gRPC" in msg


@pytest.mark.tf
@pytest.mark.timeout(300)
def test_taken_port_end_to_end_exit_code(cluster_factory, tmp_path):
    with socket.socket() as held:
        held.bind(("0.0.0.0", 0))
        held.listen()
        port = held.getsockname()[1]
        cmd = [sys.executable, str(TASK), "--roles", "ps,worker", "--ports", f"{port},{free_ports(1)[0]}",
               "--rank", "0", "--events", str(tmp_path / "e.jsonl")]
        out = subprocess.run(cmd, env=CHILD_ENV, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr[-2000:]
    msg = [x for x in out.stderr.splitlines() if x.startswith("train_task:")]
    assert msg and f"={port}:" in msg[0] and "ps:0" in msg[0], out.stderr[-2000:]


PS_ONLY = """
import logging, sys, json, time
sys.path.insert(0, {root!r})
logging.basicConfig(level=logging.INFO)
from tf_for_slurm.plan import localhost_plan
from tf_for_slurm.runtime import start_server, wait_for_workers
plan = localhost_plan(["ps", "worker", "worker"], {ports}, 0)
server = start_server(plan)
print("READY", flush=True)
rc = wait_for_workers(server, plan, liveness_timeout=2.0, startup_grace={grace}, timeout={timeout})
print("RC", rc, time.time(), flush=True)
sys.exit(rc)
"""

REPORTER = """
import sys, time
sys.path.insert(0, {root!r})
from tf_for_slurm.plan import localhost_plan
from tf_for_slurm.runtime import device_filters, report_done, start_server
plan = localhost_plan(["ps", "worker", "worker"], {ports}, {rank})
server = start_server(plan)  # a worker reports through its own server, as launch() does
print("UP", flush=True)
sys.stdin.readline()  # the test says when to report
for _ in range({times}):
    assert report_done(server.target, 1, 2, {rank} - 1, device_filters=device_filters(plan), timeout_s=20)
    print("REPORTED", time.time(), flush=True)
"""


def _reporter(ports, rank: int, times: int, log) -> subprocess.Popen:
    """A worker that starts its server (TensorFlow's start-up: seconds), prints UP, then reports done
    `times` times once a line comes on its stdin, printing REPORTED <time> after each report."""
    return subprocess.Popen([sys.executable, "-c", REPORTER.format(root=str(ROOT), ports=ports, rank=rank,
                                                                   times=times)],
                            env=CHILD_ENV, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True)


def _ps_only(ports, grace, timeout):
    return subprocess.Popen([sys.executable, "-c", PS_ONLY.format(root=str(ROOT), ports=ports, grace=grace,
                                                                  timeout=timeout)],
                            env=CHILD_ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_line(proc, prefix: str, deadline_s: float) -> str:
    end = time.time() + deadline_s
    while time.time() < end:
        line = proc.stdout.readline()
        if line.startswith(prefix):
            return line
        if not line and proc.poll() is not None:
            break
    proc.kill()
    pytest.fail(f"no {prefix!r} line: {proc.communicate(timeout=30)}")


@pytest.mark.tf
@pytest.mark.timeout(300)
def test_duplicate_reports_do_not_end_ps_early(tmp_path):
    """Worker 0 reporting twice must not count as two workers (the original's constant 1 did)."""
    ports = free_ports(3)
    ps = _ps_only(ports, grace=200, timeout=200)
    # both workers start TensorFlow now, alongside the ps (seconds each); each reports only when told
    logs = [open(tmp_path / f"worker{i}.log", "w") for i in range(2)]
    twice, once = _reporter(ports, 1, 2, logs[0]), _reporter(ports, 2, 1, logs[1])
    try:
        _wait_line(ps, "READY", 150)
        _wait_line(twice, "UP", 150)
        twice.communicate("\n", timeout=150)
        assert twice.returncode == 0, (tmp_path / "worker0.log").read_text()[-3000:]
        # give a (buggy) ps a fair chance to exit on the duplicate: poll it for 3 s
        end = time.time() + 3.0
        while time.time() < end and ps.poll() is None:
            time.sleep(0.05)
        assert ps.poll() is None, "ps exited after a duplicate report"
        _wait_line(once, "UP", 150)
        out, _ = once.communicate("\n", timeout=150)
        assert once.returncode == 0, (tmp_path / "worker1.log").read_text()[-3000:]
        t_report = float(out.split()[-1])
        assert ps.wait(timeout=30) == 0
        t_exit = float(_wait_line(ps, "RC", 5).split()[2])  # stamped by the ps just before exiting
        # the second distinct report ended it (exit 0, RC stamped), not its grace or timeout (200 s); how
        # soon after is the machine's speed: bench/bench_shutdown.py prints the ps's exit latency
        assert t_exit - t_report < 200, t_exit - t_report
    finally:
        for p in (ps, twice, once):
            if p.poll() is None:
                p.kill()
            p.wait(timeout=30)
        for f in logs:
            f.close()


@pytest.mark.tf
@pytest.mark.timeout(200)
def test_worker_never_up_fails_after_startup_grace():
    ports = free_ports(3)
    ps = _ps_only(ports, grace=3, timeout=100)
    try:
        _wait_line(ps, "READY", 150)
        t_ready = time.time()
        out, err = ps.communicate(timeout=60)
        assert ps.returncode == EXIT_WORKER_LOST, err[-2000:]
        assert time.time() - t_ready >= 3.0
        assert "never came up within startup_grace=3.0s" in err
        assert f"worker:0 at 127.0.0.1:{ports[1]}" in err and f"worker:1 at 127.0.0.1:{ports[2]}" in err
    finally:
        if ps.poll() is None:
            ps.kill()
        ps.wait(timeout=30)


PS_EARLY_DEATH = """
import logging, socket, sys, time
sys.path.insert(0, {root!r})
logging.basicConfig(level=logging.INFO)
import tensorflow as tf
from tf_for_slurm.plan import localhost_plan
from tf_for_slurm.runtime import start_server, wait_for_workers
plan = localhost_plan(["ps", "worker"], {ports}, 0)
worker = socket.socket()  # stands in for worker:0's server: up when the ps starts waiting ...
worker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
worker.bind(("0.0.0.0", {ports}[1]))
worker.listen()
server = start_server(plan)
real_run = tf.compat.v1.Session.run

def run(self, *args, **kwargs):  # ... and gone before the ps's first dequeue deadline
    if worker.fileno() != -1:
        worker.close()
        print("WORKER_DIED", time.time(), flush=True)
    return real_run(self, *args, **kwargs)

tf.compat.v1.Session.run = run
rc = wait_for_workers(server, plan, liveness_timeout=5.0, startup_grace=60.0, timeout=100)
print("RC", rc, time.time(), flush=True)
sys.exit(rc)
"""


@pytest.mark.tf
@pytest.mark.timeout(200)
def test_worker_dying_before_first_dequeue_deadline_is_lost_within_bound():
    """Regression: the ps first probed its workers only after its first dequeue timed out.

    Workers waiting for the ps train within a fraction of a second of its server starting, so
    under load a worker could be up and SIGKILLed before that first look; never "seen up", it
    then counted as dead only after startup_grace (60-120 s) instead of liveness_timeout.
    """
    ports = free_ports(2)
    ps = subprocess.Popen([sys.executable, "-c", PS_EARLY_DEATH.format(root=str(ROOT), ports=ports)],
                          env=CHILD_ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = ps.communicate(timeout=150)
    finally:
        if ps.poll() is None:
            ps.kill()
            ps.wait(timeout=30)
    died = [float(x.split()[1]) for x in out.splitlines() if x.startswith("WORKER_DIED")]
    done = [x.split() for x in out.splitlines() if x.startswith("RC")]
    assert died and done, out + err[-3000:]
    assert done[0][1] == str(EXIT_WORKER_LOST), out + err[-3000:]  # lost: 69 since fdb1fa8
    assert float(done[0][2]) - died[0] <= 5.0, (float(done[0][2]) - died[0], err[-3000:])
    assert f"lost worker:0 at 127.0.0.1:{ports[1]}" in err, err[-3000:]


BARRIER = """
import sys, threading, time
import tensorflow as tf
from tf_for_slurm.runtime.hooks import BarrierOnChiefHook, BarrierTimeout

ports = sys.argv[1:]
cluster = tf.train.ClusterSpec({"ps": ["localhost:" + ports[0]], "worker": ["localhost:" + p for p in ports[1:]]})
servers = [tf.distribute.Server(cluster, job_name=j, task_index=i) for j, i in (("ps", 0), ("worker", 0), ("worker", 1))]


def session(server, hook):
    graph = tf.Graph()
    with graph.as_default():
        hook.begin()
    return tf.compat.v1.Session(server.target, graph=graph)


chief = BarrierOnChiefHook(3, 0, True, timeout_s=30, poll_ms=50)
chief_sess = session(servers[1], chief)
late = [(1.0, BarrierOnChiefHook(3, 1, False)), (2.0, BarrierOnChiefHook(3, 2, False))]
sessions = [(delay, hook, session(servers[2], hook)) for delay, hook in late]
t0 = time.monotonic()
for delay, hook, sess in sessions:  # the non-chiefs arrive after many empty polls
    threading.Timer(delay, hook.after_create_session, args=(sess, None)).start()
chief.after_create_session(chief_sess, None)
print("seen", sorted(chief.seen), "after %.1f s" % (time.monotonic() - t0), flush=True)

lonely = BarrierOnChiefHook(3, 0, True, timeout_s=1, poll_ms=50)
lonely_sess = session(servers[1], lonely)
t0 = time.monotonic()
try:
    lonely.after_create_session(lonely_sess, None)
except BarrierTimeout as exc:
    print("timeout after %.1f s: %s" % (time.monotonic() - t0, exc), flush=True)
"""


@pytest.mark.tf
@pytest.mark.timeout(120)
def test_barrier_waits_for_late_workers_and_times_out_naming_the_missing_ones():
    r = subprocess.run([sys.executable, "-c", BARRIER, *map(str, free_ports(3))], capture_output=True, text=True,
                       timeout=100, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    lines = r.stdout.splitlines()
    assert r.returncode == 0 and len(lines) == 2, r.stdout + r.stderr[-3000:]
    seen = re.fullmatch(r"seen \[1, 2\] after ([0-9.]+) s", lines[0])
    assert seen and 1.9 <= float(seen.group(1)) < 10, lines
    timeout = re.fullmatch(r"timeout after ([0-9.]+) s: .*still missing reporter indices \[1, 2\]", lines[1])
    assert timeout and 0.9 <= float(timeout.group(1)) < 5, lines
