"""Faults on the library path (`runtime.launch`, TF1 ps/worker on 127.0.0.1), each repeated, with the
step's processes counted afterwards: nothing may be left running.

- a worker whose training raises ends the whole step within 5 s, every time;
- a worker that exits 0 at once, before starting its server, does not fail the job (the ps exits 0
  once every task that came up reported, after late_start_grace, not after startup_grace);
- the ps's wait for done reports is quiet (no TensorFlow C++ lines per poll) without
  TF_CPP_MIN_LOG_LEVEL.
"""

from __future__ import annotations

import os
import random
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from test_runtime_tf1 import CHILD_ENV, ROOT, Cluster, free_ports

from tf_for_slurm.runtime.ps_wait import EXIT_WORKER_LOST

pytestmark = pytest.mark.tf
REPEAT = 2  # each run repeats a race that once failed 1 time in 3


def processes_of(marker: str) -> list:
    """Pids of live (non-zombie) processes whose command line holds `marker` (the run's event file)."""
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (d / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if marker in cmd and state != "Z":
            pids.append(int(d.name))
    return pids


def window_ports(n: int) -> list:
    """n free ports below Linux's ephemeral range (32768+): a port the OS hands out for bind(0) can be
    taken by any outgoing connection on this busy machine while the task still imports TensorFlow."""
    rng = random.Random()
    ports: list = []
    while len(ports) < n:
        port = rng.randrange(20000, 32768)
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("0.0.0.0", port))
            except OSError:
                continue
        if port not in ports:
            ports.append(port)
    return ports


@pytest.fixture
def run_cluster(tmp_path, monkeypatch):
    import test_runtime_tf1

    monkeypatch.setattr(test_runtime_tf1, "free_ports", window_ports)
    made: list = []

    def make(n: int, *args, **kwargs) -> Cluster:
        d = tmp_path / f"run{n}"
        d.mkdir()
        c = Cluster(d, *args, **kwargs)
        made.append(c)
        return c

    yield make
    for c in made:
        c.kill()


@pytest.mark.timeout(REPEAT * 200)
@pytest.mark.parametrize("run", range(REPEAT))
def test_worker_raising_ends_the_step_within_5s(run_cluster, run):
    c = run_cluster(run, ["ps", "worker", "worker"], mode="raise", steps=10**8, extra=("--raise-rank", "2"))
    rcs = c.wait_all(deadline_s=180)
    raised = c.event(2, "training")  # the failing worker raises right after this event (5th step)
    assert raised is not None, c.dump()
    took = max(c.exit_time.values()) - raised["t"]
    assert rcs[2] == 1 and "deliberate failure on rank 2" in c.log(2), c.dump()
    assert rcs[0] == 1 and "reported that its training failed" in c.log(0), c.dump()
    assert rcs[1] == 1 and "lost ps:0" in c.log(1), c.dump()
    assert took <= 5.0, (took, c.dump())
    assert processes_of(str(c.events)) == []


@pytest.mark.timeout(REPEAT * 200)
@pytest.mark.parametrize("run", range(REPEAT))
def test_worker_exiting_0_before_its_server_does_not_fail_the_job(run_cluster, run):
    grace = 2.0  # any value well under startup_grace (100 s) tells the two apart
    c = run_cluster(run, ["ps", "worker", "worker"], mode="exit0", steps=60,
                    extra=("--raise-rank", "2", "--late-start-grace", str(grace), "--startup-grace", "100"))
    rcs = c.wait_all(deadline_s=150)
    assert rcs == [0, 0, 0], c.dump()
    reported = c.event(1, "exit")["t"]
    ps_left = c.event(0, "exit")["t"]
    # the ps waited late_start_grace for the task that never came up, not startup_grace (100 s)
    assert grace - 0.5 <= ps_left - reported <= grace + 3.0, (ps_left - reported, c.dump())
    assert re.search(r"WARNING .*worker:1 at 127\.0\.0\.1:\d+ never came up", c.log(0)), c.log(0)[-3000:]
    assert processes_of(str(c.events)) == []


PS_ALONE = """
import logging, sys
sys.path.insert(0, {root!r})
logging.basicConfig(level=logging.INFO)
from tf_for_slurm.plan import localhost_plan
from tf_for_slurm.runtime import start_server, wait_for_workers
plan = localhost_plan(["ps", "worker"], {ports}, 0)
server = start_server(plan)
print("WAITING", flush=True)
sys.exit(wait_for_workers(server, plan, startup_grace=3.0))
"""


@pytest.mark.timeout(200)
def test_ps_wait_writes_no_tensorflow_lines_per_poll():
    env = {k: v for k, v in CHILD_ENV.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    proc = subprocess.run([sys.executable, "-c", PS_ALONE.format(root=str(ROOT), ports=free_ports(2))],
                          env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == EXIT_WORKER_LOST and "never came up within startup_grace=3.0s" in proc.stderr, \
        proc.stderr[-3000:]
    cpp = [line for line in proc.stderr.splitlines() if re.match(r"^[IWEF]\d{4} ", line)]
    # 3 s of waiting polled the queue ~60 times; TensorFlow's start-up lines are all that may remain
    assert not [line for line in cpp if "ancel" in line], cpp[:10]
    assert len(cpp) < 15, cpp
