"""What the hub and the spokes share: their timing, the line protocol, its proofs and its sockets.

Wire protocol, one ASCII line per message.  First the handshake: each side proves it holds the
step's key (host/step_secret.py) before a line of the other counts; the hub proves first, so a
spoke never obeys a program that merely answers at the hub's address:
  spoke -> hub: ``hello <rank> <job>.<step> <spoke nonce>``
  hub -> spoke: ``challenge <hub nonce> <hub proof>``  (HMAC-SHA256 over "hub", the tag, the rank, both nonces)
  spoke -> hub: ``proof <spoke proof>``               (the same over "spoke" and the nonces the other way round)
  hub -> spoke: ``ok <heartbeat seconds>`` or ``error <reason>``
Then:
  spoke -> hub: ``hb``, ``exit <status>``, ``bye <status>``, ``started`` (its command runs again after a restart)
  spoke -> hub: ``progress <json>`` (its command's newest progress report, plan.train_progress; one a second)
  spoke -> hub: ``phase <json>`` (its command's start-up phase, plan.start_phase; at most one a second)
  hub -> spoke: ``end <status> <why>``, ``ack`` (for exit/bye), ``hang`` (its command is hung: stacks, then its end),
                ``stacks`` (its command is hung and its group's restart ends it: its stacks only),
                ``restart <delay seconds>`` (instead of ``ack`` for an exit: start the command again in place),
                ``regroup <delay seconds>`` (its group restarts: end the command, start it again that long after
                it ended, no exit report)
A status is 0-255 in plain digits; a delay 0-3600 s.  Anything else is a protocol error: the
connection is dropped, never a crash.  Every buffer is bounded (a line, a connection's queued
output, the connections still proving themselves).

Why a module of its own: both ends must agree on these; the hub (hub.py) and the spokes
(spoke.py) each keep only their side of the conversation.
"""

from __future__ import annotations

import logging
import math
import os
import re
import resource
import socket
from dataclasses import dataclass, field, fields
from typing import Any, Dict, List, Mapping, Optional, Tuple

from tf_for_slurm.errors import PlanError, UsageError, bad_value
from tf_for_slurm.host import settings
from tf_for_slurm.supervise.child_process import LOGGER

log = logging.getLogger(LOGGER)

MAX_LINE = 256  # a longer unfinished line is not the protocol: the connection is dropped
MAX_OUTBUF = 64 * 1024  # bytes queued for a peer that does not read: it is dropped
MAX_DELAY = 3600.0  # a restart or regroup delay
_STATUS = re.compile(r"[0-9]{1,3}")
MAX_HEARTBEATS_PER_SECOND = 1000  # what the hub should receive, whatever the step's size


def _seconds(setting: str) -> Any:
    """A Timing field: its setting's registry default, and the setting's name for from_env."""
    return field(default=settings.default_seconds(setting), metadata={"setting": setting})


@dataclass(frozen=True)
class Timing:
    """Seconds; each comes from an option, else its TF_SLURM_* setting, else the registry's default."""

    drain: float = _seconds(settings.DRAIN)  # a TF1 worker still running after the chief finished
    kill_grace: float = _seconds(settings.KILL_GRACE)  # between SIGTERM and SIGKILL of a command
    heartbeat: float = _seconds(settings.HEARTBEAT)  # between a spoke's heartbeats
    silence: float = _seconds(settings.SILENCE)  # without a heartbeat: the task's node is taken for dead
    connect_grace: float = _seconds(settings.CONNECT_GRACE)  # for a spoke to reach the hub (it may start late)
    report_wait: float = _seconds(settings.REPORT_WAIT)  # a spoke waits this long for the ack of its exit
    progress_deadline: float = _seconds(settings.PROGRESS_DEADLINE)  # a command without progress: hung (0: off)
    hang_after: float = _seconds(settings.HANG_AFTER)  # a training without progress: hung (0: off; hang_watch)
    hang_factor: float = _seconds(settings.HANG_FACTOR)  # ... after this many median step times, if longer
    start_wait: float = _seconds(settings.START_WAIT)  # waiting for peers, no step: named (0: off; start_wait.py)
    start_fault: float = _seconds(settings.START_FAULT)  # ... then a fault (0: only named)

    @classmethod
    def from_env(cls, env: Mapping[str, str], **given: Optional[float]) -> "Timing":
        """The timing of this step: `given` options (None: not given) win over `env`'s settings."""
        values: Dict[str, float] = {}
        for f in fields(cls):
            var = f.metadata["setting"]
            # no drain: end the workers once the chief is done; 0 deadlines: off
            zero_ok = f.name in ("drain", "progress_deadline", "hang_after", "start_wait", "start_fault")
            value = settings.seconds(env, var, lo_open=not zero_ok, given=given.get(f.name),
                                     given_name=f"--{f.name.replace('_', '-')}")
            values[f.name] = settings.default_seconds(var) if value is None else value
        if values["silence"] <= values["heartbeat"]:
            raise UsageError(bad_value(settings.SILENCE, values["silence"],
                                       f"more seconds than {settings.HEARTBEAT} ({values['heartbeat']:g})"))
        return cls(**values)

    @property
    def end_grace(self) -> float:
        """How long the hub waits, once the step's end is decided, for every task to confirm it:
        the kill grace (a command that ignores SIGTERM), plus time for a task still starting to
        join and be told: 2 s, at most `silence` (a task not heard from for that long is gone)."""
        return self.kill_grace + min(2.0, self.silence)


def heartbeat_interval(tasks: int, timing: Timing) -> float:
    """Seconds between a spoke's heartbeats: the configured value, longer for large steps (the
    hub then receives about MAX_HEARTBEATS_PER_SECOND), but at most a third of `silence`, so
    two lost heartbeats never look like a dead node."""
    return round(min(max(timing.heartbeat, tasks / MAX_HEARTBEATS_PER_SECOND), timing.silence / 3), 3)


def keepalive(sock: socket.socket, timing: Timing) -> None:
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


class Conn:
    """One non-blocking connection: lines in, bytes out."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.inbuf = b""
        self.outbuf = bytearray()
        self.rank: Optional[int] = None  # set once the peer proved it is this task
        self.pending_eof = False  # the peer closed: handle what it sent first, then the close
        # the handshake (hub side): the rank the hello claims, both nonces, when it must be done
        self.claim: Optional[int] = None
        self.peer_nonce = ""
        self.nonce = ""
        self.deadline = 0.0
        self.epoch = 0
        self.peer = ""

    def read_lines(self) -> Tuple[List[str], Optional[str]]:
        """(the complete lines available now, why the connection is over or None): "closed" (the
        peer closed, once every line it sent was handed out), "error" (the socket failed) or
        "overlong line" (an unfinished line longer than MAX_LINE is not the protocol)."""
        data: Optional[bytes]
        if self.pending_eof:
            data = b""
        else:
            try:
                data = self.sock.recv(65536)
            except (BlockingIOError, InterruptedError):
                data = None
            except OSError:
                return [], "error"
            if data == b"":
                self.pending_eof = True
        if data is None:
            data = b""
        elif not data and not self.inbuf:
            return [], "closed"
        self.inbuf += data
        *lines, self.inbuf = self.inbuf.split(b"\n")
        if len(self.inbuf) > MAX_LINE:
            return [], "overlong line"
        return [line.decode("ascii", "replace").strip() for line in lines], None

    def send(self, text: str) -> bool:
        """Queue and try to send; False when the connection is broken, or the peer does not read
        (more than MAX_OUTBUF queued)."""
        self.outbuf += text.encode("ascii", "replace") + b"\n"
        return self.flush() and len(self.outbuf) <= MAX_OUTBUF

    def flush(self) -> bool:
        """Send what the socket takes now; False when the connection is broken."""
        while self.outbuf:
            try:
                sent = self.sock.send(self.outbuf)
            except (BlockingIOError, InterruptedError):
                return True
            except OSError:
                return False
            del self.outbuf[:sent]
        return True


def parse_status(text: str) -> Optional[int]:
    """An exit status on the wire: 0-255 in plain ASCII digits, else None (a protocol error)."""
    if not _STATUS.fullmatch(text):
        return None
    value = int(text)
    return value if value <= 255 else None


def parse_delay(text: str) -> Optional[float]:
    """A restart or regroup delay: finite seconds 0-MAX_DELAY, else None (a protocol error)."""
    if len(text) > 16:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) and 0.0 <= value <= MAX_DELAY else None


def parse_rank(text: str, size: int) -> Optional[int]:
    """A rank of a step of `size` tasks in plain digits, else None."""
    if not (text.isascii() and text.isdigit()) or len(text) > 9:
        return None
    value = int(text)
    return value if value < size else None


def listen(port: int, who: str) -> socket.socket:
    """The hub's non-blocking listening socket on `port` (IPv4 and IPv6 where the host has both)."""
    attempts: List[Dict[str, Any]] = []
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


def note_failure(path: Optional[str], rank: int, status: int) -> None:
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


def raise_fd_limit(wanted: int) -> None:
    """A hub of N tasks holds N sockets: lift the soft descriptor limit toward the hard one."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = wanted + 64
        if soft != resource.RLIM_INFINITY and soft < want:
            new = want if hard == resource.RLIM_INFINITY else min(want, hard)
            resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
            if new < want:
                log.warning("descriptor limit %d is below the %d this hub needs (ulimit -n)", hard, want)
    except (ValueError, OSError):
        pass


def read_heartbeats(conn: Conn) -> bool:
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
