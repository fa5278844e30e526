"""A batch job's step command (srun ...) as batch-step's child: its stderr copied through to ours,
its `srun: error:` lines kept, signals sent to it, its exit waited for while batch-step keeps busy.

Why not `child_process.Child`: exec's commands run in a process group of their own, signalled whole,
and die with their supervisor; srun is signalled alone (it passes signals on to its tasks itself), and
its stderr is read, because the task srun reports failing first gives the job its exit status.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from typing import Callable, List, Mapping, Optional, Sequence

from tf_for_slurm.host import threads
from tf_for_slurm.plan.slurm_outage import STEP_CREATED, STEP_DELAYED
from tf_for_slurm.supervise.child_process import exit_status

ERROR_PREFIX = "srun: error:"  # the lines plan.batch_settings.first_failure reads


class StepCommand:
    """srun as a child; nothing runs until `start`."""

    def __init__(self) -> None:
        self.proc: Optional[subprocess.Popen] = None
        self.errors: List[str] = []  # srun's error lines, in order
        self.delayed_since: Optional[float] = None  # monotonic time srun began waiting to create its step
        self._copier: Optional[threading.Thread] = None

    def start(self, argv: Sequence[str], env: Optional[Mapping[str, str]]) -> int:
        """Start `argv` (OSError when it cannot run) and copy its stderr; its pid."""
        self.proc = subprocess.Popen(list(argv), stderr=subprocess.PIPE, env=env)
        self._copier = threads.start(threading.Thread(target=self._copy, daemon=True))
        return self.proc.pid

    def _copy(self) -> None:
        """stderr through to ours as it comes (the job's log), the error lines kept."""
        assert self.proc is not None and self.proc.stderr is not None
        for raw in iter(self.proc.stderr.readline, b""):
            sys.stderr.buffer.write(raw)
            sys.stderr.flush()
            line = raw.decode("utf-8", "replace")
            if line.startswith(ERROR_PREFIX):
                self.errors.append(line)
            low = line.lower()
            if STEP_DELAYED in low and self.delayed_since is None:
                self.delayed_since = time.monotonic()
            elif STEP_CREATED in low:
                self.delayed_since = None

    def ended(self) -> bool:
        """Whether it started and has ended."""
        return self.proc is not None and self.proc.poll() is not None

    def creation_overdue(self, limit: float) -> bool:
        """srun has waited more than `limit` s to create its step ('step creation temporarily disabled':
        its own wait has no bound) and still runs: True once."""
        since = self.delayed_since
        if since is None or time.monotonic() - since <= limit or self.ended():
            return False
        self.delayed_since = None
        return True

    def send(self, signo: int) -> None:
        """Send `signo`; gone already is fine."""
        assert self.proc is not None
        try:
            self.proc.send_signal(signo)
        except ProcessLookupError:
            pass

    def wait(self, every: float, meanwhile: Callable[[], bool]) -> Optional[int]:
        """Its exit status (a signal s: 128+s), calling `meanwhile` every `every` s until then (and, whichever
        thread the kernel gave a signal to, its handler runs in the main thread within `every` s); None as
        soon as `meanwhile` says to stop waiting (it still runs)."""
        assert self.proc is not None
        while True:
            try:
                rc = self.proc.wait(timeout=every)
                break
            except subprocess.TimeoutExpired:
                if meanwhile():
                    return None
        if self._copier is not None:
            self._copier.join(timeout=10)
        return exit_status(rc)


__all__ = ["StepCommand"]
