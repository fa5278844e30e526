"""`tf-slurm batch-step -- srun ...`: run a batch job's training step, pass it the time-limit
warning at the right moment, and requeue the job when the warning stopped training early.

Why a wrapper and not more bash: the templates need the same logic (signal timing, the first
failing task's status, the requeue decision), and Python can be tested.  `--signal=B:USR1@N`
signals only the batch shell, possibly the moment it starts: the shell's first command is a trap
that appends "USR1 <time>" to `--warn-file`, read here every 0.2 s, so no warning is lost while
this process starts.  SIGTERM (scancel, preemption) reaches every process of the job directly.
Other users see job ids and can write to /tmp: the file counts only when it is ours, in a folder
only we can write (the shell's `mktemp -d`), and names a signal passed on here (USR1, USR2, TERM).

- SIGUSR1 (the warning): Slurm may send it up to 60 s early, so the step is told only
  when `--warn-margin` seconds are left before the job's EndTime (at once if fewer are left or
  EndTime is unknown); the tasks stop at their next step, the chief checkpoints, the ps exit 0.
- No warning by then (Slurm's is lost when sent before the batch shell runs, e.g. as a requeued run
  starts): the step is told all the same, --warn-margin s before EndTime, as if warned.
- SIGUSR2 (`scancel --batch --signal=USR2`: stop, checkpoint and requeue now): passed on at once.
- SIGTERM (scancel, preemption): passed on at once; no requeue follows.
- When the step ended: `tf_for_slurm.requeue.decide` with the checkpoint's step; a requeue runs
  `scontrol requeue $SLURM_JOB_ID` (the job must be requeueable: `#SBATCH --requeue`).
The printed lines say when each thing happened, so the delays can be read from the job's log.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from tf_for_slurm.errors import UsageError, bad_value
from tf_for_slurm.host import settings, threads
from tf_for_slurm.host.job_folder import batch_path, write_json
from tf_for_slurm.host.step_secret import with_secret
from tf_for_slurm.plan.batch_settings import first_failure
from tf_for_slurm.plan.requeue import (
    NOW_SIGNAL,
    START_GRACE,
    checkpoint_step,
    decide,
    effective_margin,
    stop_delay,
)
from tf_for_slurm.supervise.child_process import exit_status

log = logging.getLogger("tf_for_slurm.batch_step")

WARN_POLL = 0.2  # seconds between looks at --warn-file
WARN_READ = 256  # bytes of --warn-file read: its first line is "USR1 <epoch seconds>"
PASSED_ON = ("USR1", NOW_SIGNAL, "TERM")  # the signals a line of --warn-file may name (as handle() takes them)


def _say(message: str) -> None:
    """One line in the job's log (stderr), with the wall-clock time the delays are read from."""
    sys.stderr.write(f"tf-slurm batch-step: {time.strftime('%H:%M:%S')} {message}\n")
    sys.stderr.flush()


def job_times(job_id: str, run: Callable[..., Any] = subprocess.run) -> Tuple[Optional[float], Optional[float]]:
    """The job's (StartTime, EndTime) in epoch seconds from squeue, each None when Slurm does not say."""
    try:
        res = run(["squeue", "-h", "-j", job_id, "-O", "StartTime,EndTime"], capture_output=True, text=True,
                  timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None, None
    fields = res.stdout.split() if res.returncode == 0 else []
    times: List[Optional[float]] = []
    for text in fields[-2:]:
        try:
            times.append(time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S")))
        except ValueError:
            times.append(None)
    while len(times) < 2:  # EndTime alone (one column): no start
        times.insert(0, None)
    return times[0], times[1]


def job_end_time(job_id: str, run: Callable[..., Any] = subprocess.run) -> Optional[float]:
    """The job's EndTime (epoch seconds) from squeue, or None when Slurm does not say."""
    return job_times(job_id, run)[1]


def read_checkpoint_step(directory: Optional[str]) -> Optional[int]:
    """The step of the last checkpoint in `directory` (its TensorFlow 'checkpoint' file), if any."""
    if not directory:
        return None
    try:
        with open(os.path.join(directory, "checkpoint"), encoding="utf-8", errors="replace") as fh:
            return checkpoint_step(fh.read())
    except OSError:
        return None


def _private_bytes(path: str) -> bytes:
    """The first WARN_READ bytes of `path` when it is a regular file of ours in a folder of ours only we
    can write; else OSError (why: a file planted by another user must never stop, requeue or freeze the
    job).  No symlink is followed; O_NONBLOCK: a planted FIFO cannot block the step's wait loop."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    folder = os.open(os.path.dirname(os.path.abspath(path)), flags | os.O_DIRECTORY)
    try:
        st = os.fstat(folder)
        if st.st_uid != os.getuid() or st.st_mode & 0o022:
            raise OSError(f"its folder is not ours alone (owner uid {st.st_uid}, mode {st.st_mode & 0o7777:o})")
        fd = os.open(os.path.basename(path), flags, dir_fd=folder)
    finally:
        os.close(folder)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
            raise OSError(f"not a regular file of ours (owner uid {st.st_uid}, mode {st.st_mode:o})")
        return os.read(fd, WARN_READ)
    finally:
        os.close(fd)


def read_warn_file(path: str) -> Tuple[Optional[str], Optional[float], str]:
    """(signal name, epoch seconds or None, '') from --warn-file's first line, or (None, None, why not)."""
    try:
        first = _private_bytes(path).decode("ascii", "replace").split("\n", 1)[0].split()
    except FileNotFoundError:
        return None, None, ""
    except OSError as exc:
        return None, None, f"{path} ignored: {exc.strerror or exc}"
    if not first:
        return None, None, ""
    if first[0] not in PASSED_ON:
        return None, None, f"{path} ignored: {first[0][:16]!r} is not a signal batch-step passes on {PASSED_ON}"
    try:
        when: Optional[float] = float(first[1]) if len(first) > 1 else None
    except ValueError:
        when = None
    return first[0], when if when is not None and math.isfinite(when) else None, ""


class _Step:
    """srun as a child: stderr copied through (and kept for the first failure), signals passed on."""

    def __init__(self, job_id: str, warn_margin: float, start_grace: float = START_GRACE):
        self.job_id, self.warn_margin, self.start_grace = job_id, warn_margin, start_grace
        self.signal: str = ""
        self.signal_time: Optional[float] = None
        self.told_time: Optional[float] = None
        self.errors: List[str] = []
        self.proc: Optional[subprocess.Popen] = None
        self._early: Optional[int] = None  # a signal to pass on once srun's tasks can take it
        self.started: Optional[float] = None  # when srun was started (epoch seconds)
        self.end_time: Optional[float] = None  # the job's EndTime, once a warning asked for it
        self._copier = threading.Thread(target=self._copy, daemon=True)  # started by threads.start
        self._ignored: set = set()  # why --warn-file was ignored, each logged once

    def start(self, command: List[str]) -> None:
        # every task of the step shares the secret its supervisors prove to each other (host/step_secret.py);
        # it goes only into srun's environment: never into our own, argv, the log or batch.json
        env = settings.environ()
        self.proc = subprocess.Popen(command, stderr=subprocess.PIPE,
                                     env=None if env.get(settings.SECRET) else with_secret(env))
        self.started = time.time()
        threads.start(self._copier)
        if self._early is not None:  # a stop asked for before srun existed: not during its tasks' start-up
            delay = stop_delay(self.started, self.end_time, 0.0, step_started=self.started,
                               grace=self.start_grace)
            _say(f"the step just started: telling its tasks to stop in {delay:.0f} s, once they can take it")
            self._later(self._early, delay)

    def _copy(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        for raw in iter(self.proc.stderr.readline, b""):
            sys.stderr.buffer.write(raw)
            sys.stderr.flush()
            line = raw.decode("utf-8", "replace")
            if line.startswith("srun: error:"):
                self.errors.append(line)

    def handle(self, signo: int, _frame: object, when: Optional[float] = None) -> None:
        name = signal.Signals(signo).name[3:]
        if self.signal and (name != "TERM" or self.signal == "TERM"):  # a TERM after a warning still counts
            _say(f"SIG{name} again: already handling SIG{self.signal}")
            return
        self.signal, self.signal_time = name, time.time() if when is None else when
        if when is not None:
            _say(f"SIG{name} reached the batch shell at {time.strftime('%H:%M:%S', time.localtime(when))}")
        if name == "TERM":
            _say("SIGTERM (scancel or preemption): passing it on to the step now; no requeue will follow")
            self._tell(signo)
            return
        if name == NOW_SIGNAL:
            delay = stop_delay(self.signal_time, None, 0.0, step_started=self.started, grace=self.start_grace)
            _say(f"SIG{name} (a stop asked for now, e.g. scancel --batch --signal={name}): passing it on to the step"
                 + (f" in {delay:.0f} s, once its tasks have started" if delay > 0 else ""))
            self._later(signo, delay)
            return
        start, end = job_times(self.job_id)
        self.end_time = end
        margin = effective_margin(self.warn_margin, start, end)
        delay = stop_delay(self.signal_time, end, self.warn_margin, start_time=start, step_started=self.started,
                           grace=self.start_grace)
        left = f"{end - self.signal_time:.0f} s before the time limit" if end else "time limit unknown"
        short = start is not None and end is not None and margin < self.warn_margin
        shortened = f", a quarter of the job's {end - start:.0f} s limit" if short and start and end else ""
        _say(f"SIG{name} ({left}): telling the step's tasks to stop at their next step in {delay:.0f} s "
             f"({margin:g} s before the limit: WARN_MARGIN={self.warn_margin:g}{shortened})")
        self._later(signo, delay)

    def arm_backstop(self) -> None:
        """Tell the step to stop --warn-margin s before EndTime even if no warning comes: Slurm's warning
        is lost when it is sent before the batch shell runs (it may be sent as a requeued run starts),
        and a step nobody stops just times out (state TIMEOUT, no requeue)."""
        start, end = job_times(self.job_id)
        if end is None or self.started is None:
            return
        delay = stop_delay(time.time(), end, self.warn_margin, start_time=start, step_started=self.started,
                           grace=self.start_grace)
        if delay >= threading.TIMEOUT_MAX:
            return
        timer = threading.Timer(delay, self._backstop, args=(end,))
        timer.daemon = True
        threads.start(timer)

    def _backstop(self, end: float) -> None:
        if self.signal or (self.proc is not None and self.proc.poll() is not None):
            return
        now_end = job_times(self.job_id)[1]
        if now_end is not None and now_end > end + 1:  # the limit was raised (scontrol update TimeLimit)
            self.arm_backstop()
            return
        _say(f"no time-limit warning came by {max(0.0, end - time.time()):.0f} s before the limit (Slurm's is "
             f"lost when sent before the batch shell runs): stopping the step as the warning would")
        self.handle(signal.SIGUSR1, None)

    def _later(self, signo: int, delay: float) -> None:
        """Pass `signo` on to the step now, or in `delay` seconds."""
        if delay <= 0:
            self._tell(signo)
            return
        timer = threading.Timer(delay, self._tell, args=(signo,))
        timer.daemon = True
        threads.start(timer)

    def _read_warn_file(self, path: Optional[str]) -> None:
        """The batch shell's trap appends 'USR1 <epoch>' here (--signal=B: signals only that shell)."""
        if self.signal or not path:
            return
        name, when, why = read_warn_file(path)
        if why and why not in self._ignored:
            self._ignored.add(why)
            log.debug("%s", why)
        if name is not None:
            self.handle(getattr(signal, f"SIG{name}"), None, when)

    def _tell(self, signo: int) -> None:
        if self.proc is None:
            self._early = signo
            return
        if self.proc.poll() is not None:
            return
        self.told_time = time.time()
        _say(f"passed SIG{signal.Signals(signo).name[3:]} on to the step (srun pid {self.proc.pid})")
        try:
            self.proc.send_signal(signo)
        except ProcessLookupError:
            pass

    def wait(self, warn_file: Optional[str] = None) -> int:
        """srun's status; meanwhile, every WARN_POLL s, a signal the batch shell wrote to `warn_file`
        (and, whichever thread the kernel gave a signal to, its handler runs within WARN_POLL s)."""
        assert self.proc is not None
        while True:
            try:
                rc = self.proc.wait(timeout=WARN_POLL)
                break
            except subprocess.TimeoutExpired:
                self._read_warn_file(warn_file)
        self._copier.join(timeout=10)
        return exit_status(rc)


def _result(line: str) -> None:
    """One line on stdout: the step's statuses, as the templates have always printed them."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


class _Record:
    """batch.json in the job folder (when there is one): the run, its checkpoint and the decision,
    for `tf-slurm status`.  Best effort: a folder that cannot be written costs one line."""

    def __init__(self, job: str, restarts: int, max_requeues: int, target: Optional[int],
                 checkpoint_dir: Optional[str], start_step: Optional[int]):
        self.path = batch_path()
        self.data: Dict[str, Any] = {
            "job": job, "run": restarts + 1, "max_requeues": max_requeues, "target": target,
            "checkpoint_dir": os.path.abspath(checkpoint_dir) if checkpoint_dir else None,
            "checkpoint_at_start": start_step, "started_at": round(time.time(), 3), "state": "running"}
        self._write()

    def _write(self) -> None:
        if self.path is None:
            return
        try:
            write_json(self.path, self.data)
        except OSError as exc:
            _say(f"cannot write {self.path}: {exc.strerror or exc}")
            self.path = None

    def end(self, status: int, checkpoint: Optional[int], reason: str, requeued: bool) -> None:
        self.data.update(state="requeued" if requeued else "ended", status=status, checkpoint=checkpoint,
                         decision=reason, ended_at=round(time.time(), 3))
        self._write()


def run_step(command: List[str], job: str, *, restarts: int, max_requeues: int, warn_margin: float,
             target: Optional[int] = None, checkpoint_dir: Optional[str] = None, warn_file: Optional[str] = None,
             requeue: bool = True, start_grace: float = START_GRACE) -> int:
    """Run the step (`command`, srun ...) of batch job `job`; return its first failure's status, or
    0 once the job is requeued (`requeue`: False only logs the decision).  The arguments are checked
    (tf_for_slurm.cli.batch_step); `restarts` is how often the job was requeued before."""
    start_step = read_checkpoint_step(checkpoint_dir)
    if restarts:
        _say(f"run {restarts + 1} of job {job} (requeued {restarts} time(s); checkpoint at {start_step})")
    record = _Record(job, restarts, max_requeues, target, checkpoint_dir, start_step)
    step = _Step(job, warn_margin, start_grace)
    for signo in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM):  # before srun starts: none is lost
        signal.signal(signo, step.handle)
    try:
        step.start(command)
    except OSError as exc:
        raise UsageError(bad_value("command", command[0], f"a program that runs ({exc.strerror})")) from None
    threads.start_daemon(step.arm_backstop, name="backstop")  # its squeue never delays reading the warn file
    rc = step.wait(warn_file)
    status = first_failure("".join(step.errors), rc)
    _result(f"job {job}: srun exit status {rc}")
    if rc != 0:
        _result(f"job {job}: exit status {status} (the first failing task's)")
    ckpt = read_checkpoint_step(checkpoint_dir)
    since = f", {time.time() - step.signal_time:.1f} s after the signal" if step.signal_time else ""
    _say(f"step ended with status {status}{since}; checkpoint at "
         f"{'global step %d' % ckpt if ckpt is not None else 'none'}")
    decision = decide(step.signal, status, restarts, max_requeues, checkpoint_step=ckpt, target=target,
                      start_step=start_step, limit_name=settings.MAX_REQUEUES, delivered=step.told_time is not None)
    record.end(status, ckpt, decision.reason, requeued=decision.requeue and requeue)
    if decision.requeue and requeue:
        res = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True, timeout=60)
        if res.returncode != 0:
            why = (res.stderr or res.stdout).strip().splitlines()
            _say(f"scontrol requeue {job} failed ({why[-1] if why else res.returncode}): is the job "
                 f"requeueable (#SBATCH --requeue)? ending with status 1")
            return 1
        told = f", {time.time() - step.told_time:.1f} s after the tasks were told" if step.told_time else ""
        _say(f"requeued job {job}{since}{told}: {decision.reason}")
        return 0
    _say(f"not requeued: {decision.reason}" if step.signal or status else decision.reason)
    return decision.exit_status if not (decision.requeue and not requeue) else 0


__all__ = ["job_end_time", "read_checkpoint_step", "read_warn_file", "run_step"]
