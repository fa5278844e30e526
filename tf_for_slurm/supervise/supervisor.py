"""The supervisor every task runs under `tf-slurm exec`: the step ends when training ends, or fails fast.

Why: with unmodified TF_CONFIG scripts some tasks never end (a ps or a ParameterServerStrategy
worker `join()`s forever) and, under `srun` without `--kill-on-bad-exit`, one task's failure
leaves the others holding the allocation.  No TensorFlow here: each task's command runs as a child
(child_process.py: own process group, killed with us, its exit seen by waiting on it), and the
supervisors talk over TCP.

Topology (events, no polling): the chief's supervisor is the hub.  It listens on the chief's
auxiliary port; every other task's supervisor keeps ONE connection to it, says `hello`, sends a
heartbeat every few seconds and, when its command exits by itself, `exit <status>`.  The hub feeds
what it sees into a `StepWatch` (step_watch.py) and sends `end <status>` to the tasks it decides to
end.  A killed supervisor closes its connection at once (the kernel does it); a dead node is a
missed heartbeat (and TCP keepalive on both sides); a dead hub is an error on the spokes' socket.

Wire protocol, one ASCII line per message:
  spoke -> hub: ``hello <rank> <job>.<step>``, ``hb``, ``exit <status>``, ``bye <status>``
  hub -> spoke: ``ok <heartbeat seconds>``, ``error <reason>``, ``end <status> <why>``, ``ack`` (for exit/bye)
"""

from __future__ import annotations

import errno
import logging
import os
import selectors
import socket
import time
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence

from tf_for_slurm.supervise.child_process import Child, ForwardSignals, Wake, start_command
from tf_for_slurm.errors import PlanError, UsageError, bad_value
from tf_for_slurm.plan.cluster import ClusterPlan, Task
from tf_for_slurm.plan.strategy import StepRoles
from tf_for_slurm.plan.step_watch import LOST_STATUS, End, StepWatch

log = logging.getLogger(__name__)

_MAX_LINE = 256


@dataclass(frozen=True)
class Timing:
    """Seconds; each comes from an option, else TF_SLURM_<NAME>, else the default."""

    drain: float = 30.0  # a TF1 worker still running after the chief finished
    kill_grace: float = 3.0  # between SIGTERM and SIGKILL of a command
    heartbeat: float = 2.0  # between a spoke's heartbeats
    silence: float = 10.0  # without a heartbeat: the task's node is taken for dead
    connect_grace: float = 300.0  # for a spoke to reach the hub (the chief's node may start late)
    report_wait: float = 5.0  # a spoke waits this long for the hub's ack of its exit

    @classmethod
    def from_env(cls, env: Mapping[str, str], **given: Optional[float]) -> "Timing":
        values = {}
        for name, default in cls().__dict__.items():
            var = f"TF_SLURM_{name.upper()}"
            raw = given.get(name)
            shown = f"--{name.replace('_', '-')}"
            if raw is None:
                raw, shown = env.get(var), var
            if raw is None or raw == "":
                values[name] = default
                continue
            try:
                seconds = float(raw)
            except (TypeError, ValueError):
                seconds = -1.0
            if not (seconds >= 0 if name == "drain" else seconds > 0):
                raise UsageError(bad_value(shown, raw, "a number of seconds" + (" >= 0" if name == "drain" else " > 0")))
            values[name] = seconds
        if values["silence"] <= values["heartbeat"]:
            raise UsageError(bad_value("TF_SLURM_SILENCE", values["silence"],
                                       f"more seconds than TF_SLURM_HEARTBEAT ({values['heartbeat']:g})"))
        return cls(**values)


MAX_HEARTBEATS_PER_SECOND = 1000  # what the hub should receive, whatever the step's size


def heartbeat_interval(tasks: int, timing: "Timing") -> float:
    """Seconds between a spoke's heartbeats: the configured value, longer for large steps (the
    hub then receives about MAX_HEARTBEATS_PER_SECOND), but at most a third of `silence`, so
    two lost heartbeats never look like a dead node."""
    return round(min(max(timing.heartbeat, tasks / MAX_HEARTBEATS_PER_SECOND), timing.silence / 3), 3)


def _keepalive(sock: socket.socket, timing: Timing) -> None:
    """On a spoke's connection: let the kernel notice a hub whose node is gone (unacknowledged
    heartbeats time out after `silence`; idle, keepalive probes do).  The hub needs none: a
    spoke's silence is what it watches, and 16k connections probed at once swamp loopback."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in (("TCP_KEEPIDLE", max(1, int(timing.silence / 2))), ("TCP_KEEPINTVL", 1),
                        ("TCP_KEEPCNT", max(1, int(timing.silence / 2))),
                        ("TCP_USER_TIMEOUT", int(timing.silence * 1000))):
        opt = getattr(socket, name, None)
        if opt is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, opt, value)
            except OSError:
                pass
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _Conn:
    """One non-blocking connection: lines in, bytes out."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.inbuf = b""
        self.outbuf = b""
        self.rank: Optional[int] = None
        self.pending_eof = False  # the peer closed: handle what it sent first, then the close

    def read_lines(self) -> Optional[List[str]]:
        """Lines available now; None at EOF or error."""
        if self.pending_eof:
            data = b""
        else:
            try:
                data = self.sock.recv(65536)
            except (BlockingIOError, InterruptedError):
                data = None
            except OSError:
                return None
            if data == b"":
                self.pending_eof = True
        if data is None:
            data = b""
        elif not data and not self.inbuf:
            return None
        self.inbuf += data
        *lines, self.inbuf = self.inbuf.split(b"\n")
        if len(self.inbuf) > _MAX_LINE:
            return None
        return [line.decode("ascii", "replace").strip() for line in lines]

    def send(self, text: str) -> bool:
        """Queue and try to send; False when the connection is broken."""
        self.outbuf += text.encode() + b"\n"
        return self.flush()

    def flush(self) -> bool:
        while self.outbuf:
            try:
                sent = self.sock.send(self.outbuf)
            except (BlockingIOError, InterruptedError):
                return True
            except OSError:
                return False
            self.outbuf = self.outbuf[sent:]
        return True


def _listen(port: int, who: str) -> socket.socket:
    attempts = []
    if socket.has_dualstack_ipv6():
        attempts.append(dict(family=socket.AF_INET6, dualstack_ipv6=True))
    attempts.append(dict(family=socket.AF_INET))
    error: Optional[OSError] = None
    for kwargs in attempts:
        try:
            server = socket.create_server(("", port), backlog=socket.SOMAXCONN, reuse_port=False, **kwargs)
            server.setblocking(False)
            return server
        except OSError as exc:
            error = exc
    raise PlanError(bad_value("aux_port", port, f"a free port for the step's supervisor on {who} "
                                                 f"(bind failed: {error.strerror if error else 'unknown'})"))


def _raise_fd_limit(wanted: int) -> None:
    """A hub of N tasks holds N sockets: lift the soft descriptor limit toward the hard one."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = wanted + 64
        if soft != resource.RLIM_INFINITY and soft < want:
            new = want if hard == resource.RLIM_INFINITY else min(want, hard)
            resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
            if new < want:
                log.warning("descriptor limit %d is below the %d this hub needs (ulimit -n)", hard, want)
    except (ImportError, ValueError, OSError):
        pass


def _note_failure(path: Optional[str], rank: int, status: int) -> None:
    """Tell a launcher (tf-slurm local) which task failed first: one appended line, written before
    anyone else hears of the failure, so its first line is the true origin."""
    if not path:
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, f"{rank} {status}\n".encode())
        finally:
            os.close(fd)
    except OSError as exc:
        log.debug("could not write the launch report %s: %s", path, exc)


class Hub:
    """The chief's supervisor: runs the chief's command and decides the step's fate."""

    def __init__(self, plan: ClusterPlan, roles: StepRoles, argv: Sequence[str], env: Mapping[str, str],
                 timing: Timing, launch_report: Optional[str] = None):
        self.plan, self.roles, self.argv, self.env, self.timing = plan, roles, argv, env, timing
        self.launch_report = launch_report
        me = plan.me
        if me.rank != roles.chief_rank:
            raise UsageError(bad_value("rank", me.rank, f"the chief's rank {roles.chief_rank} for the hub"))
        if me.aux_port is None:
            raise PlanError(f"aux_port of {me.role}:{me.index} (rank {me.rank}) is None: expected a second port "
                            "for the step's supervisor; reserve 2 ports per task (srun --resv-ports) or set "
                            "TF_SLURM_BASE_PORT")
        self.tag = f"{plan.job_id}.{plan.step_id}"
        self.names = {t.rank: f"{t.role} {t.index} (rank {t.rank}, {t.node})" for t in plan.tasks}
        self.conns: Dict[int, _Conn] = {}  # rank -> joined connection
        self.accepted = 0  # connections accepted (one per task: the benchmark checks it)
        self._failure_noted = False
        self.child: Optional[Child] = None
        self.watch: Optional[StepWatch] = None
        self.heartbeat = heartbeat_interval(plan.size, timing)

    def run(self) -> int:
        plan, timing = self.plan, self.timing
        _raise_fd_limit(plan.size)
        server = _listen(self.plan.me.aux_port, self.names[plan.my_rank])
        wake = Wake()
        sel = selectors.DefaultSelector()
        sel.register(server, selectors.EVENT_READ, "listen")
        sel.register(wake.r, selectors.EVENT_READ, "wake")
        watch = StepWatch(self.roles, [t.rank for t in plan.tasks], self.names, local_rank=plan.my_rank,
                          now=time.monotonic(), drain=timing.drain, silence=timing.silence,
                          connect_grace=timing.connect_grace, end_grace=timing.kill_grace + 2.0)
        self.watch = watch
        log.info("supervising %d tasks from %s, port %d", plan.size, self.names[plan.my_rank], plan.me.aux_port)
        child_reported = False
        child: Optional[Child] = None
        try:
            with ForwardSignals(wake) as sigs:
                child = start_command(self.argv, self.env, wake)
                if child is None:
                    _note_failure(self.launch_report, plan.my_rank, 127)
                    self._apply(watch.exit(plan.my_rank, 127, time.monotonic()))
                    child_reported = True
                sigs.child = self.child = child
                next_tick = 0.0
                while True:
                    now = time.monotonic()
                    timeout = max(0.0, min(next_tick, self._kill_time(child, now)) - now)
                    events = sel.select(timeout)
                    now = time.monotonic()  # one clock read per batch: heartbeats are most events
                    heard = watch.heard
                    for key, _mask in events:
                        conn = key.data
                        if conn == "listen":
                            self._accept(server, sel)
                        elif conn == "wake":
                            wake.drain()
                        elif conn.rank is not None and not conn.inbuf and self._heartbeat_only(conn):
                            heard[conn.rank] = now  # the common case, kept cheap
                        else:
                            self._serve(conn, sel, watch)
                    now = time.monotonic()
                    if child is not None and child.status is not None and not child_reported:
                        child_reported = True
                        if child.ending:
                            watch.bye(plan.my_rank)
                        else:
                            if child.status != 0:
                                _note_failure(self.launch_report, plan.my_rank, child.status)
                            self._apply(watch.exit(plan.my_rank, child.status, now))
                    if now >= next_tick:
                        self._apply(watch.tick(now))
                        next_tick = now + 0.5
                    self._log(watch, plan.my_rank)
                    if child is not None:
                        child.tick(now)
                    if watch.finished(now) and (child is None or child.status is not None):
                        break
        finally:
            if child is not None:
                child.reap_group()
            for conn in self.conns.values():
                conn.sock.close()
            sel.close()
            server.close()
            wake.close()
        if watch.unsettled():
            log.warning("%d tasks had not confirmed their end: %s", len(watch.unsettled()),
                        ", ".join(self.names[r] for r in watch.unsettled()[:5]))
        return watch.status

    def _kill_time(self, child: Optional[Child], now: float) -> float:
        if child is not None and child.status is None and child.kill_at is not None:
            return child.kill_at
        return now + 0.5

    def _log(self, watch: StepWatch, my_rank: int) -> None:
        for level, message in watch.take_notes():
            log.log(level, message)
        failure = watch.failure
        if failure is not None and not self._failure_noted:
            self._failure_noted = True
            if failure.rank != my_rank and failure.rank not in watch.exited:  # lost: nobody else can say
                _note_failure(self.launch_report, failure.rank, failure.status)

    def _accept(self, server: socket.socket, sel: selectors.BaseSelector) -> None:
        for _ in range(1024):  # a burst of connections: take what is queued, then serve others
            try:
                sock, _peer = server.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE):
                    log.error("out of file descriptors accepting task connections (ulimit -n)")
                return
            self.accepted += 1
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sel.register(sock, selectors.EVENT_READ, _Conn(sock))

    def _drop(self, conn: _Conn, sel: selectors.BaseSelector) -> None:
        try:
            sel.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        conn.sock.close()
        if conn.rank is not None and self.conns.get(conn.rank) is conn:
            del self.conns[conn.rank]

    @staticmethod
    def _heartbeat_only(conn: _Conn) -> bool:
        """Read what is waiting; True when it was only heartbeats (else it is left in conn.inbuf
        for _serve, or the connection is marked for it)."""
        try:
            data = conn.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return True
        except OSError:
            conn.pending_eof = True
            return False
        if data and data.count(b"hb\n") * 3 == len(data):
            return True
        if not data:
            conn.pending_eof = True
        conn.inbuf += data
        return False

    def _serve(self, conn: _Conn, sel: selectors.BaseSelector, watch: StepWatch) -> None:
        lines = conn.read_lines()
        now = time.monotonic()
        if lines is None:
            rank = conn.rank
            self._drop(conn, sel)
            if rank is not None:
                self._apply(watch.closed(rank, now))
            return
        for line in lines:
            parts = line.split()
            if not parts:
                continue
            if conn.rank is None:
                reason = self._hello(parts)
                if reason:
                    log.warning("refused a connection: %s (%r)", reason, line[:80])
                    conn.send(f"error {reason}")
                    self._drop(conn, sel)
                    return
                conn.rank = int(parts[1])
                self.conns[conn.rank] = conn
                conn.send(f"ok {self.heartbeat:g}")
                log.debug("%s joined", self.names[conn.rank])
                self._apply(watch.join(conn.rank, now))
                continue
            watch.hear(conn.rank, now)
            if parts[0] == "hb":
                continue
            if parts[0] in ("exit", "bye") and len(parts) == 2 and parts[1].lstrip("-").isdigit():
                conn.send("ack")
                if parts[0] == "exit":
                    self._apply(watch.exit(conn.rank, int(parts[1]), now))
                else:
                    log.debug("%s ended its command (status %s)", self.names[conn.rank], parts[1])
                    watch.bye(conn.rank)
                continue
            log.warning("ignored a malformed message %r from %s", line[:80], self.names[conn.rank])

    def _hello(self, parts: List[str]) -> Optional[str]:
        """None when `hello <rank> <job>.<step>` names a task of this step not yet joined."""
        if len(parts) != 3 or parts[0] != "hello" or not parts[1].isdigit():
            return "malformed"
        if parts[2] != self.tag:
            return "other-job"
        rank = int(parts[1])
        if rank >= self.plan.size or rank == self.plan.my_rank:
            return "unknown-task"
        if rank in self.conns:
            return "duplicate-task"
        return None

    def _reason(self, status: int) -> str:
        """One line for the ended task's log: why the step ends (ASCII, no newline)."""
        failure = self.watch.failure if self.watch is not None else None
        text = failure.reason if failure is not None and status != 0 else "training is over"
        return text.encode("ascii", "replace").decode()[:200]

    def _apply(self, actions: List[End]) -> None:
        for action in actions:
            for rank in action.ranks:
                if rank == self.plan.my_rank:
                    if self.child is not None:
                        self.child.end(self.timing.kill_grace)
                    continue
                conn = self.conns.get(rank)
                if conn is not None:
                    conn.send(f"end {action.status} {self._reason(action.status)}")


class Spoke:
    """Every other task's supervisor: runs its command, keeps one connection to the hub."""

    def __init__(self, plan: ClusterPlan, hub_task: Task, argv: Sequence[str], env: Mapping[str, str],
                 timing: Timing, launch_report: Optional[str] = None):
        self.plan, self.hub, self.argv, self.env, self.timing = plan, hub_task, argv, env, timing
        self.launch_report = launch_report
        if hub_task.aux_port is None:
            raise PlanError(f"aux_port of the chief {hub_task.role}:{hub_task.index} is None: expected a second "
                            "port for the step's supervisor; reserve 2 ports per task or set TF_SLURM_BASE_PORT")
        self.hello = f"hello {plan.my_rank} {plan.job_id}.{plan.step_id}"
        self.heartbeat = timing.heartbeat  # the hub may ask for a longer interval in its `ok`
        self.hub_name = (f"the step's supervisor on {hub_task.role} {hub_task.index} "
                         f"({hub_task.host}:{hub_task.aux_port})")
        # connection state
        self.conn: Optional[_Conn] = None
        self.connecting: Optional[socket.socket] = None
        self.connect_by = 0.0
        self.next_try = 0.0
        self.delay = 0.05
        self.joined = False  # the hub said ok
        self.given_up = False  # no more connection attempts
        # outcome state
        self.told: Optional[int] = None  # the hub told us to end with this status
        self.lost = False  # the hub went away (or never came): we end our command
        self.sent = False  # exit/bye sent
        self.acked = False
        self.ack_by = 0.0

    def run(self) -> int:
        timing = self.timing
        wake = Wake()
        sel = selectors.DefaultSelector()
        sel.register(wake.r, selectors.EVENT_READ, "wake")
        start = time.monotonic()
        self.next_try = start
        next_hb = float("inf")
        noted = False
        child: Optional[Child] = None
        try:
            with ForwardSignals(wake) as sigs:
                child = start_command(self.argv, self.env, wake)
                sigs.child = child
                while True:
                    now = time.monotonic()
                    status = 127 if child is None else child.status
                    if status is not None:
                        result = self._finished(status, now, start)
                        if not noted and self.told is None and not self.lost:
                            noted = True
                            log.info("command exited with status %d", status)
                            if status != 0:
                                _note_failure(self.launch_report, self.plan.my_rank, status)
                        if result is not None:
                            return result
                    elif not self.joined and not self.lost and now - start > timing.connect_grace:
                        self._lose(sel, child, f"not reachable within {timing.connect_grace:g} s")
                    if child is not None:
                        child.tick(now)
                    self._connect_step(sel, now, start)
                    if self.joined and self.conn is not None and status is None and now >= next_hb:
                        if not self.conn.send("hb"):
                            self._lose(sel, child, "the connection failed")
                        next_hb = now + self.heartbeat
                    deadlines = [now + 1.0]
                    if self.joined and status is None:
                        deadlines.append(next_hb)
                    if self.conn is None and self.connecting is None and not self.given_up:
                        deadlines.append(self.next_try)
                    if self.connecting is not None:
                        deadlines.append(self.connect_by)
                    if self.sent:
                        deadlines.append(self.ack_by)
                    if child is not None and child.kill_at is not None:
                        deadlines.append(child.kill_at)
                    for key, _mask in sel.select(max(0.0, min(deadlines) - time.monotonic())):
                        if key.data == "wake":
                            wake.drain()
                        elif key.data == "connecting":
                            self._connected(sel)
                        elif key.data == "conn":
                            if self._read(sel, child):
                                next_hb = time.monotonic() + self.heartbeat
        finally:
            if child is not None:
                child.reap_group()
            if self.conn is not None:
                self.conn.sock.close()
            if self.connecting is not None:
                self.connecting.close()
            sel.close()
            wake.close()

    # -- outcome ---------------------------------------------------------------------------
    def _finished(self, status: int, now: float, start: float) -> Optional[int]:
        """The command has ended: the exit status to return once the hub knows, else None."""
        timing = self.timing
        if self.told is not None or self.lost:
            final = self.told if self.told is not None else LOST_STATUS
            if self.told is not None and self.conn is not None and self.joined and not self.sent:
                self.sent = self.conn.send(f"bye {status}")
                self.ack_by = now + timing.report_wait
            if self.conn is None or self.acked or not self.sent or now >= self.ack_by:
                return final
            return None
        if self.conn is not None and self.joined and not self.sent:
            self.sent = self.conn.send(f"exit {status}")
            self.ack_by = now + timing.report_wait
            if not self.sent:
                log.warning("could not tell %s this task's status %d (connection failed)", self.hub_name, status)
                return status
        if self.acked:
            return status
        if self.sent and (self.conn is None or now >= self.ack_by):
            if self.conn is not None:
                log.warning("no acknowledgement from %s within %g s", self.hub_name, timing.report_wait)
            return status
        if not self.sent and (self.given_up or now - start > timing.connect_grace):
            log.error("could not tell %s this task's status %d: never reached it", self.hub_name, status)
            return status
        return None

    def _lose(self, sel: selectors.BaseSelector, child: Optional[Child], why: str) -> None:
        """The hub is gone (or never came): end our command; we exit with LOST_STATUS."""
        if self.conn is not None:
            self._close(sel)
        self.given_up = True
        if self.told is None and not self.lost:
            self.lost = True
            log.error("lost %s (%s): ending this task", self.hub_name, why)
            if child is not None:
                child.end(self.timing.kill_grace)

    # -- connection ------------------------------------------------------------------------
    def _connect_step(self, sel: selectors.BaseSelector, now: float, start: float) -> None:
        if self.given_up or self.conn is not None:
            return
        if self.connecting is not None:
            if now >= self.connect_by:
                sel.unregister(self.connecting)
                self.connecting.close()
                self.connecting = None
                self._backoff(now)
            return
        if now < self.next_try or now - start > self.timing.connect_grace:
            return
        try:
            family, socktype, proto, _canon, addr = socket.getaddrinfo(
                self.hub.host, self.hub.aux_port, type=socket.SOCK_STREAM)[0]
            sock = socket.socket(family, socktype, proto)
        except OSError as exc:
            log.debug("cannot reach %s yet: %s", self.hub_name, exc)
            self._backoff(now)
            return
        sock.setblocking(False)
        rc = sock.connect_ex(addr)
        if rc not in (0, errno.EINPROGRESS):
            sock.close()
            self._backoff(now)
            return
        sel.register(sock, selectors.EVENT_WRITE, "connecting")
        self.connecting, self.connect_by = sock, now + 2.0

    def _backoff(self, now: float) -> None:
        self.next_try, self.delay = now + self.delay, min(self.delay * 2, 1.0)

    def _connected(self, sel: selectors.BaseSelector) -> None:
        sock, self.connecting = self.connecting, None
        sel.unregister(sock)
        if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
            sock.close()
            self._backoff(time.monotonic())
            return
        _keepalive(sock, self.timing)
        self.conn = _Conn(sock)
        sel.register(sock, selectors.EVENT_READ, "conn")
        if not self.conn.send(self.hello):
            self._close(sel)
            self._backoff(time.monotonic())
        else:
            log.debug("connected to %s", self.hub_name)

    def _close(self, sel: selectors.BaseSelector) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            try:
                sel.unregister(conn.sock)
            except (KeyError, ValueError):
                pass
            conn.sock.close()

    def _read(self, sel: selectors.BaseSelector, child: Optional[Child]) -> bool:
        """Handle what the hub sent; True when it just accepted us."""
        lines = self.conn.read_lines()
        if lines is None:
            if not self.joined and not self.sent and self.told is None:
                self._close(sel)  # refused before joining: the hub may still be starting
                self._backoff(time.monotonic())
            elif self.sent or self.told is not None:
                self._close(sel)  # it knows what it needs: a hub that has finished
                self.given_up = True
            else:
                self._lose(sel, child, "it closed the connection")
            return False
        accepted = False
        for line in lines:
            parts = line.split()
            if parts[:1] == ["ok"]:
                self.joined = accepted = True
                if len(parts) == 2:
                    try:
                        self.heartbeat = min(max(float(parts[1]), 0.05), self.timing.silence / 2)
                    except ValueError:
                        pass
            elif len(parts) >= 2 and parts[0] == "end" and parts[1].lstrip("-").isdigit():
                if self.told is None and not self.lost:
                    self.told = int(parts[1])
                    why = line.split(None, 2)[2] if len(parts) > 2 else ""
                    log.log(logging.INFO if self.told == 0 else logging.ERROR,
                            "ending this task: %s (step status %d)", why or "told by the step's supervisor", self.told)
                    if child is not None:
                        child.end(self.timing.kill_grace)
            elif parts == ["ack"]:
                self.acked = True
            elif parts[:1] == ["error"]:
                log.error("%s refused this task: %s", self.hub_name, " ".join(parts[1:]))
                self._lose(sel, child, "refused")
                return False
        return accepted
