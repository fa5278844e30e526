"""The check before the command starts, with real sockets and processes (supervise/preflight.py).

In-process: every task's `Check` on a thread of this process (the plan's tasks all on 127.0.0.1, one
port each), so a case costs the check's own time.  Processes: `tf-slurm exec` per task, as srun starts
them, and `tf-slurm local`.  Every wait is bounded; every subprocess has a hard timeout.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional

import pytest
from envs import step_env
from ports import free_base_port

from tf_for_slurm.host.network import ensure_bindable
from tf_for_slurm.host.reach import FIX_NAMES
from tf_for_slurm.plan import preflight as pf
from tf_for_slurm.plan.cluster import ClusterPlan, localhost_plan
from tf_for_slurm.supervise.preflight import GO, HELLO, Check

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
KEY = b"k" * 32
pytestmark = pytest.mark.timeout(120)


def plans(n: int, base: int, roles: Optional[List[str]] = None) -> List[ClusterPlan]:
    """Task r's plan of n tasks on 127.0.0.1, port base + r; worker 0 (rank 0) the chief."""
    plan = localhost_plan(roles or ["worker"] * n, [base + r for r in range(n)])
    return [dataclasses.replace(plan, my_rank=r) for r in range(n)]


def run_checks(step: List[ClusterPlan], ranks, timeout: float = 1.0, keys: Optional[Dict[int, bytes]] = None,
               chief: int = 0, late: Optional[Dict[int, float]] = None) -> Dict[int, tuple]:
    """{rank: (its line, seconds it took)} of the checks of `ranks`, run on threads, at once or `late` s later."""
    out: Dict[int, tuple] = {}

    def one(rank: int) -> None:
        time.sleep((late or {}).get(rank, 0.0))
        t0 = time.monotonic()
        line = Check(step[rank], (keys or {}).get(rank, KEY), chief, timeout, FIX_NAMES).run()
        out[rank] = (line, time.monotonic() - t0)

    threads = [threading.Thread(target=one, args=(r,), daemon=True) for r in ranks]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout + 3 * pf.grace(timeout) + 5 + max((late or {0: 0}).values()))
    assert set(out) == set(ranks), f"checks still running: {sorted(set(ranks) - set(out))}"
    return out


def bound(timeout: float) -> float:
    """When every task must have ended: its deadline, then the verdict's wait, then some slack."""
    return timeout + 2 * pf.grace(timeout) + 1.0


# -- in-process -----------------------------------------------------------------------------------
def test_a_healthy_step_passes_in_milliseconds_and_leaves_the_ports_free():
    base = free_base_port(6)
    step = plans(6, base)
    got = run_checks(step, range(6))
    assert {line for line, _ in got.values()} == {GO}
    assert max(took for _, took in got.values()) < 0.5
    for rank in range(6):  # TensorFlow binds the same way (SO_REUSEADDR) right after
        ensure_bindable(base + rank, f"rank {rank}")


@pytest.mark.procs  # waits for the check's deadline: left out of the fast subset
def test_a_task_that_never_starts_is_named_refused_and_every_other_task_ends_in_time():
    step = plans(4, free_base_port(4))
    got = run_checks(step, [0, 1, 3])  # rank 2 never starts: nothing listens on its port
    want = (f"preflight: worker 0 (rank 0, localhost) cannot reach worker 2 (rank 2, localhost) at "
            f"{step[0].tasks[2].address}: connection refused for 1 s; fix: ")
    for rank, (line, took) in got.items():
        assert line.startswith(want), (rank, line)
        assert took < bound(1.0), (rank, took)


def test_a_port_another_process_holds_is_named_in_use():
    step = plans(3, free_base_port(3))
    with socket.create_server(("127.0.0.1", step[0].tasks[1].port)):  # a stranger's server on rank 1's port
        got = run_checks(step, range(3))
    for line, took in got.values():
        assert "worker 1 (rank 1, localhost) cannot listen on its planned address" in line
        assert "is held by a process that is not this step's supervisor (another job?); fix: a port range free" in line
        assert took < 1.5  # known at once: no deadline to wait for


@pytest.mark.procs  # waits for the check's deadline: left out of the fast subset
@pytest.mark.parametrize("says,why", [(b"SSH-2.0-OpenSSH_9.2\r\n", "it does not speak the check's protocol"),
                                      (None, "it said nothing"),
                                      (f"{HELLO} 9.9 1 {'a' * 32}\n".encode(), "it names another step")])
def test_a_stranger_answering_at_a_planned_address_is_not_this_steps_supervisor(says, why):
    step = plans(3, free_base_port(3))
    stranger = socket.create_server(("127.0.0.1", step[0].tasks[2].port))
    stop = threading.Event()

    def serve():  # accepts, says its piece, holds the connection
        held = []
        stranger.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = stranger.accept()
            except OSError:
                continue
            held.append(conn)
            if says:
                conn.sendall(says)
        for conn in held:
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    try:
        got = run_checks(step, [0, 1])  # rank 2's supervisor is not there: a stranger holds its address
    finally:
        stop.set()
        time.sleep(0.2)
        stranger.close()
    line = got[0][0]
    assert "cannot reach worker 2 (rank 2, localhost)" in line, line
    assert f"answered but is not this step's supervisor ({why}): a port in use by another job" in line


@pytest.mark.procs  # waits for the check's deadline: left out of the fast subset
def test_a_peer_without_the_steps_key_does_not_pass():
    step = plans(3, free_base_port(3))
    got = run_checks(step, range(3), keys={2: b"x" * 32})
    assert all(line != GO for line, _ in got.values())
    assert "answered but is not this step's supervisor" in got[0][0]


def test_a_name_that_leads_to_another_task_is_named():
    base = free_base_port(3)
    step = plans(3, base)
    tasks = list(step[0].tasks)
    tasks[2] = tasks[2]._replace(port=tasks[1].port)  # rank 0's plan: rank 2's address is rank 1's
    got = run_checks([dataclasses.replace(step[0], tasks=tuple(tasks)), step[1], step[2]], range(3))
    assert "worker 0 (rank 0, localhost) cannot reach worker 2 (rank 2, localhost)" in got[0][0]
    assert "worker 1 (rank 1, localhost) of this step answered there" in got[0][0]


@pytest.mark.procs  # waits for the check's deadline: left out of the fast subset
def test_strangers_connecting_to_our_ports_neither_block_nor_fail_the_check():
    step = plans(3, free_base_port(3))
    flood: List[socket.socket] = []
    stop = threading.Event()

    def attack():  # silent connections, junk and overlong lines, to every task's port, while the check runs
        while not stop.is_set():
            for task in step[0].tasks:
                try:
                    s = socket.create_connection(("127.0.0.1", task.port), timeout=0.2)
                except OSError:
                    continue
                flood.append(s)
                if len(flood) % 3 == 1:
                    s.sendall(b"pf 1 " + b"a" * 32 + b" " + b"0" * 64 + b"\n")  # a forged proof
                elif len(flood) % 3 == 2:
                    s.sendall(b"x" * 5000)
            time.sleep(0.002)

    attacker = threading.Thread(target=attack, daemon=True)
    attacker.start()
    try:  # rank 2 starts late: the others wait for it under the flood
        got = run_checks(step, range(3), timeout=5.0, late={2: 1.0})
    finally:
        stop.set()
        attacker.join(5)
        for s in flood:
            s.close()
    assert {line for line, _ in got.values()} == {GO}, got
    assert len(flood) > 3 * 30


@pytest.mark.procs  # waits for the check's deadline: left out of the fast subset
def test_nobody_answering_is_no_answer_in_n_seconds(tmp_path):
    """nftables drops the SYNs to one task's port (this worker's own network namespace where the
    tests run side by side): a connection to it times out, and the check says so."""
    nft = shutil.which("nft")
    if os.geteuid() != 0 or nft is None:
        pytest.skip("needs root and nft (apt-get install nftables)")
    step = plans(3, free_base_port(3))
    port = step[0].tasks[2].port
    table = f"tfs_test_{os.getpid()}"
    rules = [["add", "table", "inet", table],
             ["add", "chain", "inet", table, "in", "{ type filter hook input priority 0 ; }"],
             ["add", "rule", "inet", table, "in", "iif", "lo", "tcp", "dport", str(port), "tcp", "flags", "syn",
              "drop"]]
    try:
        for rule in rules:
            r = subprocess.run([nft, *rule], capture_output=True, text=True, timeout=10)
            if r.returncode != 0:
                pytest.skip(f"nft cannot add the rule here: {r.stderr.strip()}")
        with socket.create_server(("127.0.0.1", port)), pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=1.0)  # the rule works: a timeout
        got = run_checks(step, range(3))
    finally:
        subprocess.run([nft, "delete", "table", "inet", table], capture_output=True, timeout=10)
    line, took = got[0]
    assert line.startswith(f"preflight: worker 0 (rank 0, localhost) cannot reach worker 2 (rank 2, localhost) at "
                           f"127.0.0.1:{port}: no answer in 1 s; fix: "), line
    assert all(t < bound(1.0) for _, t in got.values())


# -- processes: exec per task, and tf-slurm local -------------------------------------------------
def exec_tasks(n: int, tmp_path: Path, skip=(), **extra: str) -> Dict[int, subprocess.Popen]:
    """`tf-slurm exec` for each task but `skip`, as srun starts them (nobody ends the others); the
    command writes tmp_path/ran.RANK if it ever starts."""
    job = str(int(time.time() * 1000) % 9_000_000 + 1_000_000)
    base = str(free_base_port(n))
    procs = {}
    for slot in range(n):
        if slot in skip:
            continue
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "TF_SLURM"))}
        env.update(step_env("node[1-%d]" % n, "1(x%d)" % n, slot=slot, job_id=job, TF_SLURM_PS="0",
                            TF_SLURM_ADDRESS="template:127.0.0.1", TF_SLURM_PORT_SCOPE="step", TF_SLURM_BASE_PORT=base,
                            TF_SLURM_SECRET="s" * 64, TF_SLURM_PREFLIGHT_TIMEOUT="1", **extra))
        procs[slot] = subprocess.Popen([PY, "-m", "tf_for_slurm", "exec", "--", "sh", "-c",
                                        f"touch {tmp_path}/ran.$SLURM_PROCID"], env=env, cwd=tmp_path,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return procs


@pytest.mark.procs
def test_without_a_launcher_every_task_ends_in_time_with_one_line_and_no_command_runs(tmp_path):
    procs = exec_tasks(4, tmp_path, skip=(2,))  # rank 2 never starts (its node is down, say)
    t0 = time.monotonic()
    errs = {}
    try:
        for rank, proc in procs.items():
            errs[rank] = proc.communicate(timeout=30)[1]
    finally:
        for proc in procs.values():
            proc.kill()
    assert time.monotonic() - t0 < bound(1.0) + 3  # + the python start-up of the tasks
    assert {proc.returncode for proc in procs.values()} == {2}
    assert not list(tmp_path.glob("ran.*"))
    lines = [line for err in errs.values() for line in err.splitlines()]
    assert len(lines) == 1, errs  # the chief's: the others were told
    assert lines[0].startswith("tf-slurm: ERROR: preflight: worker 0 (rank 0, node1) cannot reach worker 2 (rank 2, "
                               "node3) at 127.0.0.1:"), lines
    assert ": connection refused for 1 s; fix: " in lines[0]


@pytest.mark.procs
def test_a_healthy_local_step_runs_its_command_after_a_quick_check(tmp_path):
    t0 = time.monotonic()
    # no ps: every task is a trainer the step waits for (a ps is ended once training is over, maybe before
    # its command ran: its file would say nothing of the check)
    r = subprocess.run([PY, "-m", "tf_for_slurm", "local", "-n", "4", "--nodes", "2", "--ps", "0", "--", "sh", "-c",
                        f"touch {tmp_path}/ran.$SLURM_PROCID"], cwd=tmp_path, capture_output=True, text=True,
                       timeout=60, env={**os.environ, "TF_SLURM_LOG_LEVEL": "INFO"})
    assert r.returncode == 0, r.stderr
    assert len(list(tmp_path.glob("ran.*"))) == 4
    took = [float(x) for x in __import__("re").findall(r"every planned address answered \(4 tasks, (\d+) ms\)",
                                                       r.stderr)]
    assert len(took) == 1 and took[0] < 2000, r.stderr  # the chief's; mostly the other tasks' start-up
    assert time.monotonic() - t0 < 30


@pytest.mark.procs
def test_a_local_step_whose_port_another_user_holds_fails_at_once_with_the_line(tmp_path):
    base = free_base_port(3)
    holder = [sys.executable, "-c", "import socket,sys,time; s=socket.create_server(('0.0.0.0', int(sys.argv[1])));"
              " print('bound', flush=True); time.sleep(60)", str(base + 1)]
    if os.geteuid() == 0 and shutil.which("setpriv"):  # another Unix user, as on a shared node
        holder = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "/usr/bin/python3", "-I",
                  *holder[1:]]
    hold = subprocess.Popen(holder, stdout=subprocess.PIPE, text=True, cwd="/")
    try:
        assert hold.stdout is not None and hold.stdout.readline().strip() == "bound"
        t0 = time.monotonic()
        r = subprocess.run([PY, "-m", "tf_for_slurm", "local", "-n", "3", "--", "sh", "-c",
                            f"touch {tmp_path}/ran.$SLURM_PROCID"], cwd=tmp_path, capture_output=True, text=True,
                           timeout=60, env={**os.environ, "TF_SLURM_BASE_PORT": str(base)})
        took = time.monotonic() - t0
    finally:
        hold.kill()
        hold.wait(10)
    assert r.returncode == 2, r.stderr
    assert took < 10
    assert not list(tmp_path.glob("ran.*"))
    ours = [line for line in r.stderr.splitlines() if "preflight:" in line]
    assert len(ours) == 1, r.stderr
    assert f"worker 0 (rank 1, node1) cannot listen on its planned address 127.0.0.1:{base + 1}: port {base + 1} on " \
           "node1 is held by a process that is not this step's supervisor (another job?)" in ours[0]
