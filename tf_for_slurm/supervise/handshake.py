"""The handshake: before a line of the other side counts, each proves it holds the step's key.

Why a module of its own: it is the door of the supervision channel, which every user of the
cluster can reach; keeping it apart keeps the hub and the spoke about the step, and this about
who may speak.  The hub proves first (`challenge`), so a spoke never obeys a program that merely
answers at the hub's address; then the spoke (`proof`).  Proofs are HMAC-SHA256 under the step's
key (host/step_secret.py) over the side, the step, the rank and both fresh nonces: a proof is
good for one connection, one rank and one side only.  The hub's door (`Gate`) bounds what an
unproven peer costs: a deadline, a cap on connections still proving themselves, a pause when
descriptors run out, and refusals logged without flooding the job's log.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import secrets
import selectors
import socket
import time
from typing import Dict, List, Optional, Union

from tf_for_slurm.supervise.child_process import LOGGER
from tf_for_slurm.supervise.wire import Conn, parse_rank

log = logging.getLogger(LOGGER)

MAX_PENDING = 128  # connections still proving themselves beyond one per task: the oldest is dropped for a new one
HELLO_DEADLINE = 5.0  # seconds from accept to a proven hello (a real spoke needs one round trip)
PAUSE = 0.5  # seconds the hub stops accepting when it is out of descriptors
GRACE = 0.25  # seconds a connection that said hello has to prove itself before a newer one may push it out
_NONCE = re.compile(r"[0-9a-f]{32}")
_MAC = re.compile(r"[0-9a-f]{64}")


def new_nonce() -> str:
    """A fresh nonce for one handshake (128 random bits, hex)."""
    return secrets.token_hex(16)


def proof(key: bytes, side: str, tag: str, rank: int, first: str, second: str) -> str:
    """What `side` ("hub" or "spoke") sends to prove it holds the step's key: bound to the step,
    the rank and both nonces, and to the side (a hub's proof is never a spoke's)."""
    return hmac.new(key, f"tf_slurm {side} {tag} {rank} {first} {second}".encode(), hashlib.sha256).hexdigest()


def proof_ok(key: bytes, given: str, side: str, tag: str, rank: int, first: str, second: str) -> bool:
    """True when `given` is `side`'s proof (constant-time comparison)."""
    if not _MAC.fullmatch(given):
        return False
    return hmac.compare_digest(given, proof(key, side, tag, rank, first, second))


def is_nonce(text: str) -> bool:
    """A nonce as new_nonce makes them (a peer's is checked before it is used)."""
    return bool(_NONCE.fullmatch(text))


class RefusalLog:
    """Refused connections, logged without flooding the job's log: the first from each peer
    host, then one count a minute; the rest at debug level."""

    def __init__(self, logger: logging.Logger, interval: float = 60.0, max_hosts: int = 1024):
        self.log, self.interval, self.max_hosts = logger, interval, max_hosts
        self.hosts: Dict[str, int] = {}
        self.count = 0
        self.unreported = 0
        self.next_report = 0.0

    def refused(self, host: str, why: str, now: Optional[float] = None) -> None:
        now = time.monotonic() if now is None else now
        self.count += 1
        if host not in self.hosts and len(self.hosts) < self.max_hosts:
            self.hosts[host] = 1
            self.log.warning("refused a connection from %s: %s (later refusals are counted)", host or "?", why)
            self.next_report = now + self.interval
            return
        self.hosts[host] = self.hosts.get(host, 0) + 1
        self.unreported += 1
        self.log.debug("refused a connection from %s: %s", host or "?", why)
        if now >= self.next_report:
            self.log.warning("refused %d more connections (%d in all)", self.unreported, self.count)
            self.unreported, self.next_report = 0, now + self.interval


def hello_line(rank: int, tag: str, nonce: str) -> str:
    """The spoke's first line on a new connection."""
    return f"hello {rank} {tag} {nonce}"


def answer_challenge(key: bytes, tag: str, rank: int, nonce: str, parts: List[str]) -> Optional[str]:
    """The spoke's `proof` line when `parts` is the hub's good challenge to our `nonce`, else None
    (whatever answered is not the step's supervisor: nothing it says counts)."""
    if len(parts) != 3 or parts[0] != "challenge" or not is_nonce(parts[1]) \
            or not proof_ok(key, parts[2], "hub", tag, rank, nonce, parts[1]):
        return None
    return f"proof {proof(key, 'spoke', tag, rank, parts[1], nonce)}"


class Gate:
    """The hub's door: connections accepted but not yet proven to be a task of this step.

    `line` takes each of their lines: the hello (answered with our challenge), then the proof.
    What to drop, the hub drops (`drop` is its function: it also forgets the connection here).
    When more connections are unproven than the step has tasks (plus MAX_PENDING), one must go
    for a new one.  A real spoke says hello as soon as it is connected, so the first to go is the
    oldest that said nothing although the hub has read it since it came (it was accepted by an
    earlier `accept`, and the hub serves reads before accepting); else the oldest that said hello
    but has not proved itself for GRACE seconds (a real spoke needs one round trip).  When none
    may go, accepting pauses until one may: new connections wait in the kernel's queue, unread
    and never closed.  A flood of silent connections thus costs each of them one read, and never
    pushes out a task that is proving itself."""

    def __init__(self, key: bytes, tag: str, size: int, my_rank: int):
        self.key, self.tag, self.size, self.my_rank = key, tag, size, my_rank
        self.idle: Dict[Conn, None] = {}  # no hello yet; oldest first
        self.greeted: Dict[Conn, None] = {}  # a hello, no proof yet; oldest first
        self.refusals = RefusalLog(log)
        self.paused_until: Optional[float] = None
        self.accepted = 0  # connections accepted (one per task: the benchmark checks it)
        self.epoch = 0  # calls of accept: a connection of an earlier one has been read since

    @property
    def pending(self) -> int:
        return len(self.idle) + len(self.greeted)

    def accept(self, server: socket.socket, sel: selectors.BaseSelector, now: float, drop) -> None:
        """Take what is queued (at most a burst) while there is room; else pause accepting."""
        self.epoch += 1
        for _ in range(1024):
            if self.pending >= self.size + MAX_PENDING:
                victim = self._victim(now)
                if victim is None:
                    oldest = next(iter(self.greeted), None)
                    wait = GRACE if oldest is None else max(0.01, oldest.deadline - HELLO_DEADLINE + GRACE - now)
                    self._pause(server, sel, now + min(wait, GRACE))
                    return
                self.refusals.refused(victim.peer, "too many connections still proving themselves", now)
                drop(victim)
            try:
                sock, peer = server.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                log.error("cannot accept task connections (%s; ulimit -n?): pausing for %g s", exc.strerror, PAUSE)
                self._pause(server, sel, now + PAUSE)  # no busy loop: expired handshakes free descriptors meanwhile
                return
            self.accepted += 1
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = Conn(sock)
            conn.peer = str(peer[0]).removeprefix("::ffff:") if isinstance(peer, tuple) and peer else ""
            conn.deadline = now + HELLO_DEADLINE
            conn.epoch = self.epoch
            self.idle[conn] = None
            sel.register(sock, selectors.EVENT_READ, conn)

    def _victim(self, now: float) -> Optional[Conn]:
        oldest = next(iter(self.idle), None)
        if oldest is not None and oldest.epoch < self.epoch:
            return oldest
        oldest = next(iter(self.greeted), None)
        if oldest is not None and now - (oldest.deadline - HELLO_DEADLINE) >= GRACE:
            return oldest
        return None

    def _pause(self, server: socket.socket, sel: selectors.BaseSelector, until: float) -> None:
        if self.paused_until is None:
            sel.unregister(server)
        self.paused_until = until

    def resume(self, server: socket.socket, sel: selectors.BaseSelector, now: float) -> Optional[float]:
        """Accept again once a pause is over; the time it ends (for the hub's wake-up), else None."""
        if self.paused_until is not None and now >= self.paused_until:
            self.paused_until = None
            sel.register(server, selectors.EVENT_READ, "listen")
        return self.paused_until

    def expire(self, sel: selectors.BaseSelector, server: socket.socket, now: float, drop) -> None:
        """Drop the connections that did not prove themselves in time."""
        for group in (self.idle, self.greeted):
            for conn in [c for c in group if now >= c.deadline]:
                self.refusals.refused(conn.peer, f"no proven hello within {HELLO_DEADLINE:g} s", now)
                drop(conn)

    def line(self, conn: Conn, parts: List[str], now: float) -> Union[bool, int]:
        """One line of an unproven connection: True (go on), False (drop it), or the rank it proved."""
        if conn.claim is None:
            reason = self._hello(parts)
            if reason:
                if reason != "malformed":
                    conn.send(f"error {reason}")  # a task of another step learns it at once
                self.refusals.refused(conn.peer, reason, now)
                return False
            conn.claim, conn.peer_nonce, conn.nonce = int(parts[1]), parts[3], new_nonce()
            self.idle.pop(conn, None)
            self.greeted[conn] = None
            mine = proof(self.key, "hub", self.tag, conn.claim, conn.peer_nonce, conn.nonce)
            conn.send(f"challenge {conn.nonce} {mine}")
            return True
        rank = conn.claim
        if len(parts) != 2 or parts[0] != "proof" or \
                not proof_ok(self.key, parts[1], "spoke", self.tag, rank, conn.nonce, conn.peer_nonce):
            self.refusals.refused(conn.peer, f"failed authentication as rank {rank}", now)
            return False
        self.forget(conn)
        return rank

    def _hello(self, parts: List[str]) -> Optional[str]:
        """None when `hello <rank> <job>.<step> <nonce>` names another task of this step, else why not."""
        if len(parts) != 4 or parts[0] != "hello" or not is_nonce(parts[3]):
            return "malformed"
        rank = parse_rank(parts[1], self.size)
        if parts[2] != self.tag:
            return "other-job"
        if rank is None or rank == self.my_rank:
            return "unknown-task"
        return None

    def forget(self, conn: Conn) -> None:
        self.idle.pop(conn, None)
        self.greeted.pop(conn, None)

    def close(self) -> None:
        for conn in [*self.idle, *self.greeted]:
            conn.sock.close()
        self.idle.clear()
        self.greeted.clear()
