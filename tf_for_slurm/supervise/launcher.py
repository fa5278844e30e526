"""`tf-slurm local`: run N tasks on this machine with the environment a Slurm step would give them.

Why: a laptop or a CI runner has no Slurm, but the library (and `tf-slurm exec`) plan from Slurm's
variables.  The launcher emulates a step `node[1-K]` in Slurm's block layout (emulated_step.py),
so the very code that runs under `srun` runs here unchanged.  All emulated nodes are this one
host, so it asks the planner for ports unique across the step (`TF_SLURM_PORT_SCOPE=step`) and
loopback addresses.

It behaves like `srun -l --kill-on-bad-exit=1`: every output line is prefixed with the task's
rank, the first failing task ends the others (SIGTERM, then SIGKILL after a grace), Ctrl-C is
forwarded to every task, SIGUSR1/SIGUSR2 are passed to every task without ending the step, and
the exit status is the first failing task's (128+signo when a task
died of a signal).  Each task runs in its own process group, so its children die with it.

Under exec, a task killed by SIGKILL (its supervisor and command gone at once, as when its emulated
node is lost) does not end the step by itself: the step's supervisors decide, as they do under
`srun --no-kill` when a node fails (plan.lost_task: the step may go on without it; else the hub
ends every task, and a task whose hub is gone exits with the lost status).
The options are tf_for_slurm.cli.local's.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import IO, BinaryIO, Callable, List, Mapping, Optional, Sequence, Set

from tf_for_slurm.errors import UsageError, bad_value
from tf_for_slurm.host import settings, threads
from tf_for_slurm.host.step_secret import with_secret
from tf_for_slurm.supervise.child_process import exit_status, parent_death_signal
from tf_for_slurm.supervise.emulated_step import (
    Layout,
    check_job_id,
    check_roles,
    make_layout,
    new_job_id,
    output_path,
    task_env,
)

log = logging.getLogger(__name__)

DEFAULT_KILL_GRACE = settings.default_seconds(settings.KILL_GRACE)  # seconds between SIGTERM and SIGKILL
POLL_INTERVAL = 0.05  # seconds between checks of the children
LOST_NODE_STATUS = 128 + signal.SIGKILL  # a task's supervisor killed outright: its emulated node was lost
_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_PASSED_ON = (signal.SIGUSR1, signal.SIGUSR2)  # passed to every task, the step goes on (as srun does)

__all__ = ["DEFAULT_KILL_GRACE", "Layout", "launch", "make_layout", "output_path", "task_env"]


class _Prefixer:
    """Copies one child's stream to ours line by line, each line prefixed with the rank."""

    def __init__(self, stream: IO[bytes], out: BinaryIO, prefix: bytes, lock: threading.Lock):
        self.thread = threading.Thread(target=self._run, args=(stream, out, prefix, lock), daemon=True)
        threads.start(self.thread)

    @staticmethod
    def _run(stream: IO[bytes], out: BinaryIO, prefix: bytes, lock: threading.Lock) -> None:
        try:
            for line in iter(stream.readline, b""):
                if not line.endswith(b"\n"):
                    line += b"\n"
                with lock:  # one whole line at a time: no interleaving within a line
                    try:
                        out.write(prefix + line)
                        out.flush()
                    except (OSError, ValueError):
                        pass
        finally:
            stream.close()


class _Step:
    """The running tasks of one launch."""

    def __init__(self, procs: list, kill_grace: float, report: str = "", supervised: bool = False):
        self.procs = procs
        self.supervised = supervised  # tasks run under exec: their supervisors decide a lost task's fate
        self.lost: List[int] = []  # ranks killed outright and left to the supervisors (LOST_NODE_STATUS)
        self.kill_grace = kill_grace
        self.status: dict = {}  # rank -> exit status, in the order seen
        self.first_failure: Optional[tuple] = None  # (rank, status)
        self.signal_received: Optional[int] = None
        self.kill_deadline: Optional[float] = None  # when SIGKILL follows the SIGTERM
        self.report = report  # file where supervisors name the task that failed first ("": none)

    def signal_all(self, signo: int) -> None:
        for rank, proc in enumerate(self.procs):
            if rank not in self.status or signo == signal.SIGKILL:
                _killpg(proc.pid, signo)

    def poll(self) -> None:
        for rank, proc in enumerate(self.procs):
            if rank in self.status:
                continue
            code = proc.poll()
            if code is None:
                continue
            status = exit_status(code)
            self.status[rank] = status
            log.debug("task %d exited with status %d", rank, status)
            if status == LOST_NODE_STATUS and self.supervised and self.first_failure is None \
                    and self.reported() is None:  # no supervisor named a failure first: nobody could say
                log.warning("task %d was killed (status %d): taken for a lost node; the step's supervisors decide "
                            "whether it goes on", rank, status)
                self.lost.append(rank)
                continue
            if status != 0 and self.first_failure is None:
                self.first_failure = self.origin(rank, status)
                if self.signal_received is None:
                    first, first_status = self.first_failure
                    log.error("task %d exited with status %d%s: ending the other tasks", first, first_status,
                              "" if first == rank else f" (task {rank} passed it on)")
                self.terminate()

    def origin(self, rank: int, status: int) -> tuple:
        """(rank, status) of the task that failed first: the supervisors' report when there is one
        (written before any other task hears of the failure), else the first task seen failing."""
        return self.reported() or (rank, status)

    def reported(self) -> Optional[tuple]:
        """(rank, status) from the supervisors' report, or None when none was written."""
        if self.report:
            try:
                with open(self.report, encoding="ascii") as fh:
                    first = fh.readline().split()
                if len(first) == 2 and first[0].isdigit() and first[1].isdigit():
                    return int(first[0]), int(first[1])
            except OSError:
                pass
        return None

    def terminate(self, signo: int = signal.SIGTERM) -> None:
        """Send `signo` to every running task; SIGKILL follows after the grace."""
        self.signal_all(signo)
        if self.kill_deadline is None:
            self.kill_deadline = time.monotonic() + self.kill_grace

    def pass_on(self, signo: int, _frame: object) -> None:
        """SIGUSR1/SIGUSR2: to every running task; the step goes on (as srun does)."""
        log.info("launcher got %s: passing it to %d tasks", signal.Signals(signo).name, len(self.procs))
        for rank, proc in enumerate(self.procs):
            if rank not in self.status:
                _killpg(proc.pid, signo)

    def on_signal(self, signo: int, _frame: object) -> None:
        """SIGINT/SIGTERM/SIGHUP: forwarded, the step ends; a second one kills at once."""
        if self.signal_received is None:
            self.signal_received = signo
            log.warning("launcher got %s: forwarding it to %d tasks", signal.Signals(signo).name, len(self.procs))
            self.terminate(signo)
        else:  # a second Ctrl-C: do not wait for the grace
            self.signal_all(signal.SIGKILL)

    def wait(self) -> None:
        """Until every started task has exited; SIGKILL once the grace after a SIGTERM is over."""
        started = len(self.procs)
        while True:
            self.poll()
            if all(r in self.status for r in range(started)):
                break
            if self.kill_deadline is not None and time.monotonic() >= self.kill_deadline:
                log.warning("tasks still running %.1f s after SIGTERM: sending SIGKILL", self.kill_grace)
                self.signal_all(signal.SIGKILL)
                self.kill_deadline = float("inf")
            time.sleep(POLL_INTERVAL)

    def exit_status(self) -> int:
        """The first failing task's status, else 128 + the signal that ended the step, else 0 (a task
        lost on the way included, when the others ended 0; none did: the lost status, 137)."""
        if self.first_failure is not None:
            return self.first_failure[1]
        if self.signal_received is not None:
            return 128 + self.signal_received
        if self.lost and 0 not in self.status.values():
            return LOST_NODE_STATUS
        return 0


def _killpg(pgid: int, signo: int) -> None:
    try:
        os.killpg(pgid, signo)
    except (ProcessLookupError, PermissionError):
        pass


@dataclass(frozen=True)
class _Output:
    """Where the tasks' output goes: rank-prefixed lines on our streams, or srun-style per-task files."""

    stdout: BinaryIO
    stderr: BinaryIO
    width: int  # digits of the highest rank (the prefix is right-aligned)
    pattern: Optional[str]  # --output's pattern, None: our own streams
    lock: threading.Lock = field(default_factory=threading.Lock)


def launch(command: Sequence[str], layout: Layout, *, job_id: Optional[str] = None,
           ps: Optional[int] = None, tasks: Optional[str] = None,
           base_env: Optional[Mapping[str, str]] = None, kill_grace: float = DEFAULT_KILL_GRACE,
           stdout: Optional[BinaryIO] = None, stderr: Optional[BinaryIO] = None,
           under_exec: bool = True, output: Optional[str] = None, job_dir: Optional[str] = None,
           on_start: Optional[Callable[[], None]] = None) -> int:
    """Run `command` as every task of the emulated step; return the first failing status (or 0).

    under_exec: run each task as `tf-slurm exec -- command` (TF_CONFIG, the supervisor), as
    `srun tf-slurm exec` would; False gives the command the Slurm variables only.
    output: a per-task log file pattern in srun's form (%j job, %t rank, %n node index, %N node name)
    instead of rank-prefixed lines on our own stdout/stderr.
    job_dir: the job folder (under exec, the step's status.json is written there).
    on_start: called once the arguments are checked, before the tasks start (the CLI's first line).
    Signal forwarding is installed only when called from the main thread.
    """
    job_id = _checked_arguments(command, layout, job_id, ps, tasks, output, kill_grace)
    if on_start is not None:
        on_start()
    base_env = settings.environ() if base_env is None else base_env
    if job_dir is not None:
        base_env = {**base_env, settings.JOB_DIR: os.path.abspath(job_dir)}
    base_env = with_secret(base_env)  # every task's supervisor proves this step's secret to the others
    out = _Output(stdout if stdout is not None else sys.stdout.buffer,
                  stderr if stderr is not None else sys.stderr.buffer, len(str(layout.ntasks - 1)), output)
    report_dir = tempfile.mkdtemp(prefix="tf_slurm_local.")
    step = _Step([], kill_grace, report=os.path.join(report_dir, "first_failure"), supervised=under_exec)
    argv = [sys.executable, "-m", "tf_for_slurm", "exec", "--", *command] if under_exec else list(command)
    previous = _install_handlers(step) if threading.current_thread() is threading.main_thread() else {}
    log.info("job %s: %d tasks on %s (%s tasks per node)", job_id, layout.ntasks, layout.nodelist,
             ",".join(map(str, layout.tasks_per_node)))
    prefixers: List[_Prefixer] = []
    try:
        _start_tasks(step, command, argv, layout, str(job_id), base_env, ps, tasks, out, prefixers)
        step.wait()
    finally:
        _reap_leftovers(step.procs, kill_grace)
        shutil.rmtree(report_dir, ignore_errors=True)
        for p in prefixers:
            p.thread.join(timeout=2.0)
        for signo, handler in previous.items():
            signal.signal(signo, handler)
    return step.exit_status()


def _checked_arguments(command: Sequence[str], layout: Layout, job_id: Optional[str], ps: Optional[int],
                       tasks: Optional[str], output: Optional[str], kill_grace: float) -> str:
    """Every argument checked before anything starts; the job id (a new one when none is given)."""
    if not command:
        raise UsageError(bad_value("command", list(command), "a command after '--', e.g. -- python train.py"))
    job_id = new_job_id() if job_id is None else check_job_id(job_id)
    check_roles(layout.ntasks, ps, tasks)
    if output is not None:
        output_path(output, "0", 0, 0, layout.nodes[0])  # a bad pattern fails before anything starts
    if kill_grace < 0:
        raise UsageError(bad_value("--kill-grace", kill_grace, "seconds >= 0"))
    return job_id


def _install_handlers(step: _Step) -> dict:
    """Our signal handlers (main thread only); the previous ones, for `launch` to put back."""
    previous: dict = {}
    for signo in _FORWARDED:
        previous[signo] = signal.signal(signo, step.on_signal)
    for signo in _PASSED_ON:
        previous[signo] = signal.signal(signo, step.pass_on)
    return previous


def _start_tasks(step: _Step, command: Sequence[str], argv: List[str], layout: Layout, job_id: str,
                 base_env: Mapping[str, str], ps: Optional[int], tasks: Optional[str], out: _Output,
                 prefixers: List[_Prefixer]) -> None:
    """Start every task in rank order (each in its own session); stop starting on a signal or on a
    command that cannot run (status 127, the others are ended)."""
    preexec = parent_death_signal()
    for rank in range(layout.ntasks):
        if step.signal_received is not None:
            break
        env = task_env(layout, rank, job_id, base_env, ps, tasks)
        env[settings.LAUNCH_REPORT] = step.report
        log_file = None
        try:
            if out.pattern is not None:
                node_index = layout.placement(rank)[0]
                log_file = open(output_path(out.pattern, job_id, rank, node_index, layout.nodes[node_index]), "wb")
            proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL,
                                    stdout=log_file or subprocess.PIPE,
                                    stderr=subprocess.STDOUT if log_file else subprocess.PIPE,
                                    start_new_session=True, preexec_fn=preexec)
        except OSError as exc:
            step.first_failure = (rank, 127)
            log.error("task %d: cannot run %r: %s: ending the other tasks", rank, command[0], exc.strerror)
            step.terminate()
            break
        finally:
            if log_file is not None:
                log_file.close()  # the task holds its own copy
        step.procs.append(proc)
        if proc.stdout is not None and proc.stderr is not None:  # pipes: no --output file
            prefix = f"{rank:>{out.width}}: ".encode()
            prefixers.append(_Prefixer(proc.stdout, out.stdout, prefix, out.lock))
            prefixers.append(_Prefixer(proc.stderr, out.stderr, prefix, out.lock))
    if step.signal_received is not None:  # a signal raced with the start of a task
        step.signal_all(step.signal_received)


def _reap_leftovers(procs: Sequence[subprocess.Popen], grace: float) -> None:
    """End whatever the tasks left behind: every process of their sessions (each task is a session
    leader; its command and the command's children stay in that session even in process groups of
    their own), as Slurm ends every process of a step."""
    for proc in procs:
        if proc.poll() is None:
            _killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    sessions = {p.pid for p in procs}
    alive = _session_members(sessions)
    if not alive:
        return
    log.info("ending %d leftover processes of the tasks", len(alive))
    for pid in alive:
        _kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and _session_members(sessions):
        time.sleep(POLL_INTERVAL)
    for pid in _session_members(sessions):
        _kill(pid, signal.SIGKILL)


def _kill(pid: int, signo: int) -> None:
    try:
        os.kill(pid, signo)
    except (ProcessLookupError, PermissionError):
        pass


def _session_members(sessions: Set[int]) -> List[int]:
    """Live (not zombie) processes whose session id is one of `sessions` (Linux /proc)."""
    found: List[int] = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return found
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != b"Z" and int(fields[3]) in sessions:  # state, ppid, pgrp, session
            found.append(int(name))
    return found
