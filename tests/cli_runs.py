"""`python -m tf_for_slurm ARGS` many times for the price of one interpreter start-up.

Why: a fresh interpreter that imports the CLI costs ~0.15 s of CPU; tables of a hundred usage
errors paid that a hundred times.  A server process imports `tf_for_slurm.cli` once and forks a
child per call; the child takes the call's environment, argv and working directory, runs
tf_for_slurm/__main__.py as `python -m tf_for_slurm` does (stdin /dev/null, stdout and stderr
captured), and exits with the command's status.  What a fork cannot show: Python's own start-up
and anything tf_for_slurm would read at import time (it reads nothing then; the environment is read
when a command asks).  tests/faces/test_cli.py keeps real `python -m tf_for_slurm` runs for that.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Mapping, Optional, Sequence

ROOT = Path(__file__).resolve().parents[1]

# The server: one request a line on stdin, {"argv", "env", "cwd", "out", "err"}; it answers
# {"pid"} once the child runs and {"status"} (as subprocess's returncode) once it ended.
_SERVER = r"""
import json, os, runpy, sys, traceback
import tf_for_slurm.cli  # the one import every call shares

def child(req):
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, req["out"], os.O_WRONLY), (2, req["err"], os.O_WRONLY)):
        f = os.open(path, flags)
        os.dup2(f, fd)
        os.close(f)
    sys.argv = ["-m", *req["argv"]]
    code = 0
    try:
        runpy.run_module("tf_for_slurm", run_name="__main__", alter_sys=True)
    except SystemExit as exc:  # what the interpreter does with it
        if exc.code is None:
            code = 0
        elif isinstance(exc.code, int):
            code = exc.code
        else:
            sys.stderr.write(f"{exc.code}\n")
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)

for line in sys.stdin:
    req = json.loads(line)
    pid = os.fork()
    if pid == 0:
        child(req)
    os.write(1, (json.dumps({"pid": pid}) + "\n").encode())
    _, status = os.waitpid(pid, 0)
    os.write(1, (json.dumps({"status": os.waitstatus_to_exitcode(status)}) + "\n").encode())
"""


def clean_env(**extra: str) -> dict:
    """This process's environment without Slurm's and tf_for_slurm's variables, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SLURMD_", "TF_SLURM_", "TF_CONFIG"))}
    env["PYTHONPATH"] = str(ROOT)
    env.update(extra)
    return env


class CliRuns:
    """A server that forks `python -m tf_for_slurm` runs (see the module's docstring)."""

    def __init__(self) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="tf_slurm_cli_runs.")
        self._proc = subprocess.Popen([sys.executable, "-c", _SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      env=clean_env(), cwd=str(ROOT), start_new_session=True)
        self._sel = selectors.DefaultSelector()
        assert self._proc.stdout is not None
        self._sel.register(self._proc.stdout, selectors.EVENT_READ)
        self._buf = b""
        self._calls = 0

    def run(self, argv: Sequence[str], env: Mapping[str, str], *, cwd: Optional[str] = None,
            timeout: float = 60) -> subprocess.CompletedProcess:
        """`python -m tf_for_slurm *argv` with exactly `env` as its environment; output as text."""
        self._calls += 1
        out, err = (Path(self._dir.name) / f"{self._calls}.{name}" for name in ("out", "err"))
        out.write_bytes(b"")
        err.write_bytes(b"")
        req = {"argv": list(argv), "env": dict(env), "cwd": cwd or str(ROOT), "out": str(out), "err": str(err)}
        assert self._proc.stdin is not None
        self._proc.stdin.write((json.dumps(req) + "\n").encode())
        self._proc.stdin.flush()
        pid = self._answer(30)["pid"]
        try:
            status = self._answer(timeout)["status"]
        except subprocess.TimeoutExpired:
            os.kill(pid, signal.SIGKILL)  # the server reaps it and answers; the caller gets the timeout
            self._answer(30)
            raise
        return subprocess.CompletedProcess(["-m", "tf_for_slurm", *argv], status,
                                           out.read_text(errors="replace"), err.read_text(errors="replace"))

    def _answer(self, timeout: float) -> dict:
        while b"\n" not in self._buf:
            if not self._sel.select(timeout):
                raise subprocess.TimeoutExpired("tf_for_slurm (forked)", timeout)
            assert self._proc.stdout is not None
            chunk = os.read(self._proc.stdout.fileno(), 65536)
            if not chunk:
                raise RuntimeError(f"the fork server ended (status {self._proc.wait()})")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return json.loads(line)

    def close(self) -> None:
        """End the server and remove the captured output."""
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        try:
            self._proc.wait(10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._sel.close()
        if self._proc.stdout is not None:
            self._proc.stdout.close()
        self._dir.cleanup()
