"""Another user attacks a step's supervision channel: the step's outcome does not change.

The attacker runs as `nobody` (another Unix user, as on a shared cluster), with `python3 -I`
from `/`, so it imports nothing of ours and knows only what any user knows: the job and step id
(squeue) and the hub's port (`ss -ltn` on the node, or computed from the job id).  The step is
the issue's: 3 tasks of `exec --ps 0 -- sh -c 'sleep 3; exit 3'`, one task starting late, so the
attacker speaks both before and after that task joins.  Each test compares the statuses, the
end time and the absence of restarts with the same step run without an attacker.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

import pytest

from envs import step_env
from ports import free_base_port
from tf_for_slurm.host.environment import plan_from_env

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
SYSTEM_PY = "/usr/bin/python3"
BODY = "sleep 3; exit 3"
LATE = 1.5  # seconds: the late task starts this long after the others

pytestmark = [
    pytest.mark.timeout(90),
    pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv") or not os.path.exists(SYSTEM_PY),
                       reason="needs root, setpriv and /usr/bin/python3 to run the attacker as nobody"),
]

# The attacker: stdlib only, run as nobody.  argv: host port tag mode [seconds]
ATTACKER = r'''
import os, random, resource, select, socket, sys, time
host, port, tag, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
N = "0" * 32
SEQS = [
    [f"hello 2 {tag}", "exit 256"],                    # the old protocol: ended every task with 0
    [f"hello 2 {tag}", "exit --1"],
    [f"hello 2 {tag} {N}", "exit 256"],
    [f"hello 2 {tag} {N}", "proof " + "0" * 64, "exit 1"],
    [f"hello 1 {tag} {N}", "proof " + "a" * 64, "exit 137"],
    [f"hello 2 {tag} {N}", "exit 42"],
    [f"hello 2 {tag} {N}", "started", "bye 0"],
    ["exit --1"], ["end --1"], ["exit 0"], ["bye 0"] * 1000,
    [f"hello -1 {tag} {N}"], [f"hello 99999999999999999999 {tag} {N}"], [f"hello 2 {tag} " + "g" * 32],
    [f"hello 0 {tag} {N}"], [f"hello 2 1.0 {N}"], ["x" * 10000],
]

def connect():
    s = socket.socket()
    s.settimeout(1)
    s.connect((host, port))
    return s

def lines():
    while True:
        for seq in SEQS:
            try:
                s = connect()
                s.sendall("".join(l + "\n" for l in seq).encode())
                select.select([s], [], [], 0.05)
                s.close()
            except OSError:
                time.sleep(0.02)

HELLOS = [f"hello 2 {tag}", f"hello 2 {tag} {N}"]  # the old protocol's and today's

def hold():  # claim rank 2 and keep the connection busy with heartbeats
    n = 0
    while True:
        n += 1
        try:
            s = connect()
            s.sendall(f"{HELLOS[n % 2]}\n".encode())
            while True:
                s.sendall(b"hb\n")
                time.sleep(0.1)
        except OSError:
            time.sleep(0.02)

def flood():  # never read: every `bye` would queue an `ack`
    n = 0
    while True:
        n += 1
        try:
            s = connect()
            s.setblocking(True)
            s.sendall(f"{HELLOS[n % 2]}\nproof {'0' * 64}\n".encode() + b"bye 0\n" * 200000)
        except OSError:
            time.sleep(0.02)

def junk():  # about 1 MB/s of junk lines on one connection, reconnecting when dropped
    chunk = bytes(random.getrandbits(8) for _ in range(10000)).replace(b"\0", b"\n")
    while True:
        try:
            s = connect()
            while True:
                s.sendall(chunk)
                time.sleep(0.01)
        except OSError:
            time.sleep(0.02)

def idle(count=1000):  # connections that never say anything, reopened when dropped
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    socks = []
    while True:
        while len(socks) < count:
            try:
                s = socket.socket()
                s.setblocking(False)
                s.connect_ex((host, port))
                socks.append(s)
            except OSError:
                break
        r, _, _ = select.select(socks[:1000], [], [], 0.05)
        for s in r:
            try:
                if s.recv(4096) == b"":
                    raise OSError
            except OSError:
                s.close()
                socks.remove(s)

def fakehub(seconds):  # takes the hub's port first and answers like a hub would
    srv = socket.create_server(("", port))
    srv.settimeout(0.05)
    print("bound", flush=True)
    answers = [f"ok 0.2", "end 0 training is over", "regroup 0", f"restart 0", f"challenge {N} {'0' * 64}",
               "error duplicate-task"]
    end = time.monotonic() + seconds
    i = 0
    while time.monotonic() < end:
        try:
            c, _ = srv.accept()
        except OSError:
            continue
        try:
            c.sendall((answers[i % len(answers)] + "\n" + "ok 0.2\nend 0 x\n").encode())
        except OSError:
            pass
        i += 1
        c.close()
    srv.close()
    print("released", i, flush=True)

if mode == "fakehub":
    fakehub(float(sys.argv[5]))
else:
    {"lines": lines, "hold": hold, "flood": flood, "junk": junk, "idle": idle}[mode]()
'''


def attacker(port: int, tag: str, mode: str, *extra: str) -> subprocess.Popen:
    cmd = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", SYSTEM_PY, "-I", "-c", ATTACKER,
           "127.0.0.1", str(port), tag, mode, *extra]
    return subprocess.Popen(cmd, cwd="/", stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def task_envs(n: int) -> List[Dict[str, str]]:
    """The environment srun gives each task: the step's ids, one base port, one fresh secret."""
    job = str(int(time.time() * 1000) % 9_000_000 + 1_000_000)
    base, secret = str(free_base_port(n)), secrets.token_hex(32)
    envs = []
    for slot in range(n):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "TF_SLURM"))}
        env.update(step_env("node[1-%d]" % n, "1(x%d)" % n, slot=slot, job_id=job, TF_SLURM_PS="0",
                            TF_SLURM_ADDRESS="template:127.0.0.1", TF_SLURM_PORT_SCOPE="step",
                            TF_SLURM_BASE_PORT=base, TF_SLURM_SECRET=secret, TF_SLURM_LOG_LEVEL="INFO"))
        envs.append(env)
    return envs


def start_task(env: Dict[str, str], logs: Path) -> subprocess.Popen:
    err = (logs / f"err.{env['SLURM_PROCID']}").open("w")
    return subprocess.Popen([PY, "-m", "tf_for_slurm", "exec", "--", "sh", "-c", BODY], env=env, cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)


def run_step(logs: Path, late: int, mode: Optional[str] = None) -> dict:
    """The step with task `late` starting LATE s after the others, and the attacker in `mode`
    (started before any task; `fakehub` holds the hub's port for its first second)."""
    logs.mkdir(parents=True, exist_ok=True)
    envs = task_envs(3)
    plan = plan_from_env(envs[0], check=False)
    port, tag = plan.tasks[0].aux_port, f"{plan.job_id}.{plan.step_id}"
    evil = None
    answered = 0
    if mode == "fakehub":
        evil = attacker(port, tag, mode, "1.0")
        assert evil.stdout is not None and evil.stdout.readline().strip() == "bound"  # before any task starts
    elif mode is not None:
        evil = attacker(port, tag, mode)
    procs: Dict[int, subprocess.Popen] = {}
    t0 = time.monotonic()
    try:
        for rank in range(3):
            if rank != late:
                procs[rank] = start_task(envs[rank], logs)
        if mode == "fakehub":
            assert evil is not None and evil.stdout is not None
            released = evil.stdout.readline().split()
            assert released[:1] == ["released"], evil.stderr.read() if evil.stderr else ""
            answered = int(released[1])
        while time.monotonic() - t0 < LATE:
            time.sleep(0.05)
        procs[late] = start_task(envs[late], logs)
        ends = {}
        deadline = t0 + 40
        while len(ends) < 3 and time.monotonic() < deadline:
            for rank, proc in procs.items():
                if rank not in ends and proc.poll() is not None:
                    ends[rank] = (proc.returncode, time.monotonic() - t0)
            time.sleep(0.02)
        assert len(ends) == 3, f"tasks still running after 40 s: {sorted(set(procs) - set(ends))}"
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
        if evil is not None:
            evil.kill()
            evil.wait()
    text = "".join((logs / f"err.{r}").read_text() for r in range(3))
    return {"codes": [ends[r][0] for r in range(3)], "chief_end": ends[0][1], "log": text, "answered": answered}


@pytest.fixture(scope="module")
def baseline(tmp_path_factory) -> dict:
    """The same steps without an attacker: the late task a worker, or the chief."""
    root = tmp_path_factory.mktemp("baseline")
    return {late: run_step(root / str(late), late) for late in (2, 0)}


def check_same(got: dict, want: dict) -> None:
    assert got["codes"] == want["codes"] == [3, 3, 3], got["log"][-3000:]
    # not earlier (nothing another user sends ends the step), not much later
    assert want["chief_end"] - 0.5 < got["chief_end"] < want["chief_end"] + 2.5, (got["chief_end"], want["chief_end"])
    for word in ("Traceback", "started again", "restarts every task", "restarts this task"):
        assert word not in got["log"], got["log"][-3000:]


@pytest.mark.parametrize("mode", ["lines", "hold", "flood", "junk", "idle"])
def test_another_users_connections_change_nothing(tmp_path, baseline, mode):
    """Before and after the late worker joins: fake hellos, fake exits (256, --1, 1, 137, 42),
    a held rank, acks never read, 1 MB/s of junk, 1000 idle connections."""
    got = run_step(tmp_path, 2, mode)
    check_same(got, baseline[2])
    assert "refused a connection from 127.0.0.1" in got["log"]  # the attack reached the hub


def test_a_fake_hub_that_takes_the_port_first_is_not_obeyed(tmp_path, baseline):
    """Another user binds the hub's port before the chief starts and answers the spokes with
    `ok`, `end 0`, `regroup 0`, `restart 0`, a forged challenge: they try again until the real
    hub comes, and the step ends as without it."""
    got = run_step(tmp_path, 0, "fakehub")
    check_same(got, baseline[0])
    assert got["answered"] >= 2  # both spokes met the impostor first


def test_refusals_are_logged_once_per_host_then_counted(tmp_path, baseline):
    got = run_step(tmp_path, 2, "lines")
    check_same(got, baseline[2])
    assert got["log"].count("refused a connection from") == 1, got["log"][-3000:]
