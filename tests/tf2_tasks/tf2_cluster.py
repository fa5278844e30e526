"""Start local TF2 jobs (one subprocess per task on 127.0.0.1) and watch them exit.

Shared by tests/test_runtime_tf2.py and bench/bench_shutdown_tf2.py. Every wait has a deadline:
a task still running at the deadline is SIGKILLed and reported, so nothing hangs a test run.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Optional

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def free_ports(n: int) -> list:
    """n distinct free TCP ports on 127.0.0.1 (bind to port 0, note the port, close)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass
class Proc:
    name: str  # e.g. 'chief0', 'ps0', 'worker1'
    popen: subprocess.Popen
    log_path: str
    exit_time: Optional[float] = None  # time.time() when the exit was first seen
    killed_at_deadline: bool = False

    @property
    def returncode(self) -> Optional[int]:
        return self.popen.returncode

    def log(self) -> str:
        with open(self.log_path, errors="replace") as f:
            return f.read()


@dataclass
class Job:
    procs: list = field(default_factory=list)
    ports: list = field(default_factory=list)

    def by_name(self, name: str) -> Proc:
        return next(p for p in self.procs if p.name == name)

    def wait(self, timeout: float, names: Optional[list] = None, poll: float = 0.005) -> None:
        """Poll until the named tasks (default: all) exit, noting exit times; kill the rest at timeout."""
        watch = [p for p in self.procs if names is None or p.name in names]
        deadline = time.monotonic() + timeout
        while True:
            for p in watch:
                if p.exit_time is None and p.popen.poll() is not None:
                    p.exit_time = time.time()
            if all(p.exit_time is not None for p in watch) or time.monotonic() >= deadline:
                break
            time.sleep(poll)
        for p in watch:
            if p.exit_time is None:
                p.killed_at_deadline = True
                p.popen.kill()
                p.popen.wait()

    def kill_all(self) -> None:
        for p in self.procs:
            if p.popen.poll() is None:
                p.popen.send_signal(signal.SIGKILL)
                p.popen.wait()


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    return env


def start(script: str, roles: list, out: str, extra: tuple = (), skip: tuple = ()) -> Job:
    """Start `script` once per role on fresh ports (except ranks in `skip`); logs in out/log.<name>."""
    ports = free_ports(len(roles))
    job = Job(ports=ports)
    counters: dict = {}
    for rank, role in enumerate(roles):
        index = counters.get(role, 0)
        counters[role] = index + 1
        name = f"{role}{index}"
        if rank in skip:
            continue
        log_path = os.path.join(out, f"log.{name}")
        with open(log_path, "w") as log:
            popen = subprocess.Popen(
                [sys.executable, os.path.join(HERE, script), "--roles", ",".join(roles),
                 "--ports", ",".join(map(str, ports)), "--rank", str(rank), "--out", out, *extra],
                stdout=log, stderr=subprocess.STDOUT, cwd=REPO, env=_env())
        job.procs.append(Proc(name=name, popen=popen, log_path=log_path))
    return job


def wait_for_file(path: str, timeout: float, job: Optional[Job] = None) -> bool:
    """True once `path` exists; False at the deadline or as soon as any task of `job` has exited."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(path):
            return True
        if job is not None and any(p.popen.poll() is not None for p in job.procs):
            return os.path.exists(path)
        time.sleep(0.05)
    return False
