"""A ps sidecar, so unmodified TF_CONFIG scripts (ps ends in `server.join()`) still let a job finish.

Why: `server.join()` never returns, so a step whose ps only joins runs until Slurm's time limit.
Under `tf-slurm exec`, a ps task's command runs as a child of `run_ps_with_sidecar`; every worker
(and chief) runs its command under `run_and_report`, which afterwards tells every ps sidecar its
exit status over TCP (no TensorFlow involved).  The sidecar ends the ps command with exit 0 once
every worker reported 0, and as soon as one reports a failure it ends it and exits with that
worker's (non-zero) status, so a launcher that keeps the first failing status reports the
worker's status whichever of the two tasks it sees end first.

A worker whose wrapper is SIGKILLed cannot report, so the sidecar also watches each worker's
TensorFlow port: once it was seen accepting connections, a port that stops accepting without a
report within `report_grace` seconds means the worker died; a worker never seen up and silent for
`startup_grace` seconds is given up too.  Either way the ps is ended and the sidecar exits 1.

Protocol (one TCP connection per report, to the ps task's `aux_port`):
  worker -> sidecar: ``report <role> <index> <status> <job_id>.<step_id>\\n``
  sidecar -> worker: ``ack\\n`` (recorded) or ``error <reason>\\n`` (rejected, not retried)
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Mapping, Optional, Sequence

from .errors import PlanError, UsageError, bad_value
from .liveness import port_accepts

log = logging.getLogger(__name__)

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
AWAITED_ROLES = ("chief", "worker")  # the tasks whose end ends the ps; evaluators never finish on cue

DEFAULT_STARTUP_GRACE = 600.0  # s a worker may stay unseen (no TF port, no report)
DEFAULT_REPORT_GRACE = 10.0  # s between a worker's port closing and its report arriving
DEFAULT_KILL_GRACE = 5.0  # s between SIGTERM and SIGKILL of the ps command
DEFAULT_PROBE_INTERVAL = 1.0  # s between liveness probes of the workers' ports
DEFAULT_REPORT_DEADLINE = 120.0  # s a worker keeps trying to reach a ps sidecar
DEFAULT_GONE_AFTER = 5.0  # s of "ps port and sidecar port both refuse" after which a worker stops trying
_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_MAX_LINE = 256


def check_log_level(level: object) -> str:
    """'debug' -> 'DEBUG'; anything but the five logging names is a UsageError."""
    if isinstance(level, str) and level.strip().upper() in LEVELS:
        return level.strip().upper()
    raise UsageError(bad_value("log_level", level, "one of " + ", ".join(LEVELS)))


def _exit_status(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def _aux_port(task, who: str) -> int:
    if task.aux_port is None:
        raise PlanError(
            f"aux_port of ps:{task.index} (rank {task.rank}, node {task.node}) is None: expected a second "
            f"port for the ps sidecar ({who}); reserve 2 ports per task (srun --resv-ports) or set "
            f"TF_SLURM_BASE_PORT"
        )
    return int(task.aux_port)


def _job_tag(plan) -> str:
    return f"{plan.job_id}.{plan.step_id}"


def _start_child(argv: Sequence[str], env: Mapping[str, str]) -> subprocess.Popen:
    """Run the command in its own process group (so its children can be ended with it) and make it
    die with us on Linux (so a SIGKILLed wrapper leaves no orphan)."""
    if not argv:
        raise UsageError(bad_value("argv", list(argv), "a command to run, e.g. ['python', 'train.py']"))
    prctl = None
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            prctl = ctypes.CDLL(None, use_errno=True).prctl
        except (OSError, AttributeError):
            prctl = None

    def preexec() -> None:  # runs in the child, before exec
        os.setpgid(0, 0)
        if prctl is not None:
            prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG

    return subprocess.Popen(list(argv), env=dict(env), preexec_fn=preexec)


def _cannot_run(argv: Sequence[str], exc: OSError) -> UsageError:
    return UsageError(bad_value("argv[0]", argv[0], f"a program that can be run ({exc.strerror})"))


def _signal_group(proc: subprocess.Popen, signo: int) -> None:
    try:
        os.killpg(proc.pid, signo)
    except (ProcessLookupError, PermissionError):
        pass


def _end_child(proc: subprocess.Popen, grace: float) -> int:
    """SIGTERM the command's process group, SIGKILL after `grace`; return its exit status."""
    if proc.poll() is None:
        _signal_group(proc, signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            log.warning("command pid %d still running %.1f s after SIGTERM: sending SIGKILL", proc.pid, grace)
            _signal_group(proc, signal.SIGKILL)
            proc.wait()
    _signal_group(proc, signal.SIGKILL)  # whatever it left behind in its group
    return _exit_status(proc.returncode)


class _Forwarder:
    """While active, SIGINT/SIGTERM/SIGHUP sent to us go to the child's process group (only from the
    main thread, where Python lets us install handlers)."""

    def __init__(self) -> None:
        self.proc: Optional[subprocess.Popen] = None
        self.received: Optional[int] = None
        self._previous: dict = {}

    def __enter__(self) -> "_Forwarder":
        if threading.current_thread() is threading.main_thread():
            for signo in _FORWARDED:
                self._previous[signo] = signal.signal(signo, self._handle)
        return self

    def _handle(self, signo: int, _frame: object) -> None:
        self.received = signo
        if self.proc is not None:
            log.info("forwarding %s to the command", signal.Signals(signo).name)
            _signal_group(self.proc, signo)

    def __exit__(self, *exc: object) -> None:
        for signo, handler in self._previous.items():
            signal.signal(signo, handler)


class _SidecarLogging:
    """The sidecar's own level and handler (like psSidecarLoggingLevel), undone on exit."""

    def __init__(self, level: str, who: str):
        self.level, self.who = level, who

    def __enter__(self) -> None:
        self.saved = (log.level, log.propagate)
        self.handler = logging.StreamHandler(sys.stderr)
        self.handler.setFormatter(logging.Formatter(f"ps-sidecar[{self.who}] %(levelname)s: %(message)s"))
        log.addHandler(self.handler)
        log.setLevel(self.level)
        log.propagate = False

    def __exit__(self, *exc: object) -> None:
        log.removeHandler(self.handler)
        log.setLevel(self.saved[0])
        log.propagate = self.saved[1]


def _listen(port: int, who: str) -> socket.socket:
    """Listen on all interfaces (IPv6 and IPv4 where the host allows both)."""
    attempts = []
    if socket.has_dualstack_ipv6():
        attempts.append(dict(family=socket.AF_INET6, dualstack_ipv6=True))
    attempts.append(dict(family=socket.AF_INET))
    error: Optional[OSError] = None
    for kwargs in attempts:
        try:
            return socket.create_server(("", port), backlog=128, **kwargs)
        except OSError as exc:
            error = exc
    raise PlanError(bad_value("aux_port", port, f"a free port for the sidecar of {who} "
                                                 f"(bind failed: {error.strerror if error else 'unknown'})"))


class _Receiver:
    """Accepts report connections on a thread and puts (role, index, status) on a queue."""

    def __init__(self, server: socket.socket, job_tag: str, known: set):
        self.server, self.job_tag, self.known = server, job_tag, known
        self.reports: "queue.Queue[tuple]" = queue.Queue()
        self.stopping = threading.Event()
        self.server.settimeout(0.2)
        self.thread = threading.Thread(target=self._accept, name="ps-sidecar-accept", daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, peer = self.server.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn, peer), daemon=True).start()

    def _serve(self, conn: socket.socket, peer: tuple) -> None:
        with conn:
            conn.settimeout(5.0)
            try:
                data = b""
                while b"\n" not in data and len(data) < _MAX_LINE:
                    chunk = conn.recv(_MAX_LINE)
                    if not chunk:
                        break
                    data += chunk
                reply, report = self._parse(data.split(b"\n", 1)[0].decode("ascii", "replace"), peer)
                if report is not None:
                    self.reports.put(report)  # recorded before the ack: an acked report is never lost
                conn.sendall(reply.encode() + b"\n")
            except OSError as exc:
                log.debug("report connection from %s failed: %s", peer[0], exc)

    def _parse(self, line: str, peer: tuple) -> tuple:
        parts = line.split()
        if len(parts) not in (4, 5) or parts[0] != "report":
            log.warning("ignored a malformed report %r from %s", line[:80], peer[0])
            return "error malformed", None
        role, index, status = parts[1], parts[2], parts[3]
        if len(parts) == 5 and parts[4] != self.job_tag:
            log.warning("ignored a report from job.step %s (this is %s) from %s", parts[4], self.job_tag, peer[0])
            return "error other-job", None
        try:
            key, code = (role, int(index)), int(status)
        except ValueError:
            log.warning("ignored a malformed report %r from %s", line[:80], peer[0])
            return "error malformed", None
        if key not in self.known:
            log.warning("ignored a report from %s:%s, a task this sidecar does not wait for", role, index)
            return "error unknown-task", None
        return "ack", (key, code)

    def stop(self) -> None:
        self.stopping.set()
        try:
            self.server.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept() now (Linux)
        except OSError:
            pass
        self.thread.join(timeout=2.0)
        self.server.close()


class _Watch:
    """What the sidecar knows about one awaited task."""

    def __init__(self, task) -> None:
        self.task = task
        self.status: Optional[int] = None
        self.seen_up = False
        self.down_since: Optional[float] = None

    @property
    def name(self) -> str:
        return f"{self.task.role} {self.task.index} ({self.task.address})"


def _seconds(value: Optional[float], env: Mapping[str, str], name: str, default: float) -> float:
    """A keyword value, else the environment variable `name`, else the default; must be > 0."""
    source, raw = ("argument", value) if value is not None else (name, env.get(name))
    if raw is None or raw == "":
        return default
    try:
        seconds = float(raw)
    except (TypeError, ValueError):
        seconds = -1.0
    if not seconds > 0:
        shown = name if source == name else name.replace("TF_SLURM_SIDECAR_", "").lower()
        raise UsageError(bad_value(shown, raw, "a number of seconds > 0"))
    return seconds


def run_ps_with_sidecar(plan, argv: list, env: dict, log_level: str = "WARNING", *,
                        startup_grace: Optional[float] = None, report_grace: Optional[float] = None,
                        kill_grace: Optional[float] = None, probe_interval: Optional[float] = None) -> int:
    """Run this ps task's command under the sidecar; return the exit status the ps task should have.

    0: every worker/chief reported 0 and the ps was ended on purpose (or it exited 0 itself).
    A worker's non-zero status: it reported that failure.  1: a worker died without reporting.
    Otherwise: the ps command's own status.
    Timings not given come from TF_SLURM_SIDECAR_STARTUP_GRACE / _REPORT_GRACE / _KILL_GRACE /
    _PROBE_INTERVAL in `env` (seconds), else the module defaults.
    """
    level = check_log_level(log_level)
    startup_grace = _seconds(startup_grace, env, "TF_SLURM_SIDECAR_STARTUP_GRACE", DEFAULT_STARTUP_GRACE)
    report_grace = _seconds(report_grace, env, "TF_SLURM_SIDECAR_REPORT_GRACE", DEFAULT_REPORT_GRACE)
    kill_grace = _seconds(kill_grace, env, "TF_SLURM_SIDECAR_KILL_GRACE", DEFAULT_KILL_GRACE)
    probe_interval = _seconds(probe_interval, env, "TF_SLURM_SIDECAR_PROBE_INTERVAL", DEFAULT_PROBE_INTERVAL)
    me = plan.me
    if me.role != "ps":
        raise UsageError(bad_value("plan.me.role", me.role, "'ps' (workers and chiefs use run_and_report)"))
    who = f"ps:{me.index}"
    port = _aux_port(me, who)
    with _SidecarLogging(level, who):
        awaited = [_Watch(t) for role in AWAITED_ROLES for t in plan.tasks_with_role(role)]
        if not awaited:
            log.warning("the plan has no worker or chief to wait for: running the ps command unwatched")
            with _Forwarder() as fwd:
                try:
                    fwd.proc = _start_child(argv, env)
                except OSError as exc:
                    raise _cannot_run(argv, exc) from None
                return _exit_status(fwd.proc.wait())
        server = _listen(port, who)  # before the command starts: reports are never refused by us
        receiver = _Receiver(server, _job_tag(plan), {(w.task.role, w.task.index) for w in awaited})
        log.info("listening on port %d for reports from %d tasks", port, len(awaited))
        try:
            with _Forwarder() as fwd:
                try:
                    fwd.proc = _start_child(argv, env)
                except OSError as exc:
                    raise _cannot_run(argv, exc) from None
                return _supervise(fwd, receiver, awaited, startup_grace=startup_grace,
                                  report_grace=report_grace, kill_grace=kill_grace,
                                  probe_interval=probe_interval)
        finally:
            receiver.stop()


def _supervise(fwd: _Forwarder, receiver: _Receiver, awaited: list, *, startup_grace: float,
               report_grace: float, kill_grace: float, probe_interval: float) -> int:
    proc = fwd.proc
    by_key = {(w.task.role, w.task.index): w for w in awaited}
    start = time.monotonic()
    next_probe = start
    with ThreadPoolExecutor(max_workers=min(32, len(awaited)), thread_name_prefix="ps-sidecar-probe") as pool:
        while True:
            code = proc.poll()
            if code is not None:
                status = _exit_status(code)
                pending = [w.name for w in awaited if w.status is None]
                log.log(logging.INFO if status == 0 else logging.WARNING,
                        "the ps command exited by itself with status %d (%d tasks had not reported)",
                        status, len(pending))
                _signal_group(proc, signal.SIGKILL)
                return status
            if fwd.received is not None:
                log.warning("got %s: passed it to the ps command, waiting %g s for it to end",
                            signal.Signals(fwd.received).name, kill_grace)
                try:
                    proc.wait(timeout=kill_grace)
                except subprocess.TimeoutExpired:
                    pass
                return _end_child(proc, kill_grace)
            try:
                key, status = receiver.reports.get(timeout=0.1)
            except queue.Empty:
                pass
            else:
                watch = by_key[key]
                if watch.status is None:
                    watch.status = status
                    log.info("%s reported exit status %d", watch.name, status)
                    if status != 0:
                        log.error("%s failed with exit status %d: ending the ps command", watch.name, status)
                        _end_child(proc, kill_grace)
                        return status  # the worker's: the step's status is the same whoever is seen first
                    if all(w.status is not None for w in awaited):
                        log.info("all %d workers finished: ending the ps command", len(awaited))
                        _end_child(proc, kill_grace)
                        return 0
                continue
            now = time.monotonic()
            if now < next_probe:
                continue
            next_probe = now + probe_interval
            pending = [w for w in awaited if w.status is None]
            results = list(pool.map(lambda w: port_accepts(w.task.host, w.task.port), pending))
            if not receiver.reports.empty():
                continue  # a report may explain a closed port: read it first
            now = time.monotonic()
            for watch, up in zip(pending, results):
                dead = _judge(watch, up, now, start, startup_grace, report_grace)
                if dead:
                    log.error("%s: ending the ps command", dead)
                    _end_child(proc, kill_grace)
                    return 1
                log.debug("%s: port %s", watch.name, "up" if up else "down")


def _judge(watch: _Watch, up: bool, now: float, start: float, startup_grace: float,
           report_grace: float) -> Optional[str]:
    """None while the task may still be fine, else the reason it is taken for dead."""
    if up:
        if not watch.seen_up:
            log.info("%s is up", watch.name)
        watch.seen_up, watch.down_since = True, None
        return None
    if watch.seen_up:
        if watch.down_since is None:
            watch.down_since = now
        elif now - watch.down_since >= report_grace:
            return (f"{watch.name} stopped accepting connections on its TensorFlow port and sent no exit "
                    f"status within {report_grace:g} s: it died")
        return None
    if now - start >= startup_grace:
        return (f"{watch.name} never opened its TensorFlow port and sent no exit status within "
                f"{startup_grace:g} s")
    return None


def report_status(plan, status: int, *, deadline: float = DEFAULT_REPORT_DEADLINE,
                  gone_after: float = DEFAULT_GONE_AFTER) -> dict:
    """Tell every ps sidecar this task's exit status; return {ps index: 'ack' | reason} per ps.

    Retries with backoff until `deadline`, since a sidecar may start later than this worker ends;
    stops early for a ps whose TF port and sidecar port have both refused for `gone_after` seconds
    (that ps has exited, e.g. a done-queue ps that ended on its own).
    """
    me = plan.me
    ps_tasks = plan.tasks_with_role("ps")
    targets = [(t, _aux_port(t, f"reports from {me.role}:{me.index}")) for t in ps_tasks]
    message = f"report {me.role} {me.index} {status} {_job_tag(plan)}\n".encode()
    if not targets:
        return {}
    with ThreadPoolExecutor(max_workers=min(32, len(targets))) as pool:
        answers = pool.map(lambda target: _report_one(target[0], target[1], message, deadline, gone_after),
                           targets)
        return {t.index: a for (t, _), a in zip(targets, answers)}


def _report_one(ps, port: int, message: bytes, deadline: float, gone_after: float) -> str:
    end = time.monotonic() + deadline
    delay = 0.05
    refused_since: Optional[float] = None
    last = "no answer"
    while True:
        try:
            with socket.create_connection((ps.host, port), timeout=2.0) as conn:
                conn.settimeout(5.0)
                conn.sendall(message)
                reply = conn.makefile("rb").readline(_MAX_LINE).decode("ascii", "replace").strip()
            if reply == "ack":
                log.debug("ps:%d acknowledged the report", ps.index)
                return "ack"
            if reply.startswith("error"):
                log.warning("ps:%d rejected the report: %s", ps.index, reply)
                return reply
            last = f"unexpected reply {reply!r}"
            refused_since = None
        except ConnectionRefusedError:
            last = "connection refused"
            now = time.monotonic()
            if port_accepts(ps.host, ps.port):
                refused_since = None  # the ps is up; its sidecar should be too, soon
            elif refused_since is None:
                refused_since = now
            elif now - refused_since >= gone_after:
                log.info("ps:%d (%s) is gone (TF port and sidecar port refuse): not reporting", ps.index, ps.address)
                return "gone"
        except OSError as exc:
            last = str(exc) or type(exc).__name__
            refused_since = None
        if time.monotonic() + delay > end:
            log.warning("could not report to the sidecar of ps:%d at %s:%d within %g s (%s)",
                        ps.index, ps.host, port, deadline, last)
            return last
        time.sleep(delay)  # backoff between tries, not a wait for a race
        delay = min(delay * 2, 1.0)


def run_and_report(plan, argv: list, env: dict) -> int:
    """Run a worker/chief command, then report its exit status to every ps sidecar; return the status.

    The report never changes the status: a ps that cannot be reached is only logged.
    """
    me = plan.me
    if me.role == "ps":
        raise UsageError(bad_value("plan.me.role", me.role, "a worker, chief or evaluator (ps use run_ps_with_sidecar)"))
    reports = me.role in AWAITED_ROLES and plan.count("ps") > 0
    if reports:  # fail on a plan without sidecar ports before the command runs, not after
        for ps in plan.tasks_with_role("ps"):
            _aux_port(ps, f"reports from {me.role}:{me.index}")
    with _Forwarder() as fwd:
        try:
            fwd.proc = _start_child(argv, env)
        except OSError as exc:
            if not reports:
                raise _cannot_run(argv, exc) from None
            log.error("%s", _cannot_run(argv, exc))  # still report, or the ps would wait for us
            status = 127
        else:
            status = _exit_status(fwd.proc.wait())
    log.info("%s:%d command exited with status %d", me.role, me.index, status)
    if reports and fwd.received is not None:
        # the step is being torn down (Ctrl-C, scancel, the launcher ending tasks): the ps sidecars
        # get the same signal, so a report would only wait for sidecars that are going away
        log.info("not reporting: this task was ended by %s", signal.Signals(fwd.received).name)
    elif reports:
        report_status(plan, status)
    return status
