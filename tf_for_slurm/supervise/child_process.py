"""A task's command as a child process of its supervisor: own process group, killed with us,
its exit seen by a waiting thread, and the signals sent to us passed on to it.

Why a module of its own: `tf-slurm exec` runs a command this way with peers (hub.py, spoke.py)
and without (task_exec's plain run), and `tf-slurm local` starts its tasks with the same rules
(`exit_status`, `parent_death_signal`); neither the TCP side nor TensorFlow is needed here.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Callable, List, Mapping, Optional, Sequence

from tf_for_slurm.host import threads

# exec's supervision logs under one name (here, the hub and the spokes): --supervisor-log-level sets it
LOGGER = "tf_for_slurm.supervisor"
SUMMARY_LOGGER = "tf_for_slurm.summary"  # the step's end, in the job's log at the default level (INFO)
log = logging.getLogger(LOGGER)

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)


def exit_status(returncode: int) -> int:
    """Popen's returncode -> a shell's exit status (a signal s becomes 128+s)."""
    return 128 - returncode if returncode < 0 else returncode


class Wake:
    """A self-pipe: threads and signal handlers wake the selector loop through it."""

    def __init__(self) -> None:
        self.r, self.w = os.pipe()
        os.set_blocking(self.r, False)
        os.set_blocking(self.w, False)

    def poke(self) -> None:
        try:
            os.write(self.w, b"x")
        except (BlockingIOError, OSError):
            pass

    def drain(self) -> None:
        try:
            while os.read(self.r, 4096):
                pass
        except (BlockingIOError, OSError):
            pass

    def close(self) -> None:
        os.close(self.r)
        os.close(self.w)


_PR_SET_PDEATHSIG = 1


def parent_death_signal() -> Optional[Callable[[], None]]:
    """A preexec function that has the kernel SIGKILL the child when its parent dies (Linux), else None.

    Why: a supervisor or launcher that is itself SIGKILLed runs no clean-up; without this its
    children would outlive it and hold the step's ports and GPUs.
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None

    def preexec() -> None:  # in the child, before exec
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)

    return preexec


class Child:
    """The task's command: its own process group, SIGKILLed if we die, its exit seen by waiting."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str], wake: Wake):
        die_with_us = parent_death_signal()

        def preexec() -> None:  # in the child, before exec
            os.setpgid(0, 0)
            if die_with_us is not None:
                die_with_us()

        self.proc = subprocess.Popen(list(argv), env=dict(env), preexec_fn=preexec)
        self.status: Optional[int] = None
        self.ending = False  # we asked it to end (its status is then not news)
        self.kill_at: Optional[float] = None
        self._wake = wake
        threads.start_daemon(self._wait, name="command-wait")

    def _wait(self) -> None:
        code = self.proc.wait()
        self.kill_at = None
        self.status = exit_status(code)
        self._wake.poke()

    def signal(self, signo: int) -> None:
        try:
            os.killpg(self.proc.pid, signo)
        except (ProcessLookupError, PermissionError):
            pass

    def end(self, grace: float) -> None:
        """SIGTERM now; `tick` sends SIGKILL after `grace`."""
        if self.status is None and not self.ending:
            self.ending = True
            self.signal(signal.SIGTERM)
            self.kill_at = time.monotonic() + grace

    def tick(self, now: float) -> Optional[float]:
        """SIGKILL when the grace is over; returns when to look again."""
        if self.status is None and self.kill_at is not None:
            if now >= self.kill_at:
                log.warning("command (pid %d) still running after SIGTERM: sending SIGKILL", self.proc.pid)
                self.signal(signal.SIGKILL)
                self.kill_at = None
                return None
            return self.kill_at
        return None

    def reap_group(self) -> None:
        """Whatever the command left in its process group dies with the task."""
        self.signal(signal.SIGKILL)


def start_command(argv: Sequence[str], env: Mapping[str, str], wake: Wake) -> Optional[Child]:
    """The task's command as a Child, or None (after one line on stderr) when it cannot run."""
    try:
        return Child(argv, env, wake)
    except OSError as exc:
        sys.stderr.write(f"tf-slurm exec: cannot run {argv[0]!r}: {exc.strerror}\n")
        return None


# the step is being stopped (scancel, srun, Ctrl-C, a time-limit warning passed on): restart nothing
STOPPING = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)


class ForwardSignals:
    """While active, signals sent to us go to the command's process group (main thread only); after,
    a stop is only recorded and a time-limit warning ignored (see __exit__)."""

    def __init__(self, wake: Wake):
        self.child: Optional[Child] = None
        self.received: List[int] = []
        self._wake = wake
        self._installed: List[int] = []  # the signals whose handler is ours
        self._unsent: List[int] = []  # came while no command was there to take them: for the next one

    def __enter__(self) -> "ForwardSignals":
        if threading.current_thread() is threading.main_thread():
            for signo in FORWARDED:
                signal.signal(signo, self._handle)
                self._installed.append(signo)
        return self

    def stop_since(self, seen: int) -> Optional[int]:
        """The first stopping signal (STOPPING: scancel, srun, Ctrl-C, a time-limit warning) among those
        received after the first `seen`, else None: a command ended by one is not restarted."""
        return next((s for s in self.received[seen:] if s in STOPPING), None)

    def detach(self) -> None:
        """A command is about to start (again): until `attach`, a signal is kept for it."""
        self.child = None

    def attach(self, child: Optional[Child]) -> None:
        """`child` runs now (None: it could not start): a signal that came while there was no command (before
        the first, or while this one started: a shell's first line can run before Popen returns) goes to it
        now; else a Ctrl-C or scancel that the supervisor recorded would never reach the command."""
        self.child = child
        if child is not None:
            unsent, self._unsent = self._unsent, []
            for signo in unsent:
                child.signal(signo)

    def _handle(self, signo: int, _frame: object) -> None:
        self.received.append(signo)
        if self.child is not None:
            self.child.signal(signo)
        elif signo not in self._unsent:  # bounded: each signal once
            self._unsent.append(signo)
        self._wake.poke()

    def __exit__(self, *exc: object) -> None:
        # The command is gone and the supervisor is finishing (its final status file, its private
        # files, its exit status: bounded work).  A late signal must not kill it half-way: Slurm's
        # step cancel (srun --kill-on-bad-exit, scancel) can send its SIGTERM just then, and a
        # supervisor killed by it leaves the status file at "ending" (seen in CI: the hub died by 15).
        # So a late stop is only recorded (Slurm's SIGKILL after KillWait still bounds a hung end)
        # and a late time-limit warning ignored (the task would end 138, a failure).
        for signo in self._installed:
            signal.signal(signo, signal.SIG_IGN if signo in (signal.SIGUSR1, signal.SIGUSR2) else self._late)

    def _late(self, signo: int, _frame: object) -> None:
        self.received.append(signo)
