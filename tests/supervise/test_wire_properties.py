"""Property tests of the supervision channel's line handling (wire.py, handshake.py, hub.py, spoke.py).

Why: the hub's port is reachable by every user of the cluster, and a spoke may reach a program
that merely answers at the hub's address.  Whatever bytes arrive, from a peer that never proved it
holds the step's key or from one that did, neither side may raise or buffer without bound, and an
unproven peer may change nothing.  The real Hub and Spoke run in this process and are driven as
their loops drive them, over socketpairs: no subprocess, no TensorFlow, each example milliseconds.
"""

from __future__ import annotations

import dataclasses
import logging
import select
import selectors
import socket
import time
from typing import List, Optional, Tuple

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from wire_peer import key_for

from tf_for_slurm.errors import UsageError
from tf_for_slurm.plan import localhost_plan
from tf_for_slurm.plan.restart_policy import RestartPolicy
from tf_for_slurm.plan.step_watch import StepWatch
from tf_for_slurm.plan.strategy import step_roles
from tf_for_slurm.supervise.child_process import LOGGER
from tf_for_slurm.supervise.handshake import HELLO_DEADLINE, new_nonce, proof, proof_ok
from tf_for_slurm.supervise.hub import Hub
from tf_for_slurm.supervise.spoke import Spoke
from tf_for_slurm.supervise.wire import MAX_DELAY, MAX_LINE, MAX_OUTBUF, Conn, Timing, read_heartbeats

pytestmark = pytest.mark.hostile  # left out of the fast subset (tests/conftest.py)

TAG = "local.0"  # localhost_plan's <job>.<step>
KEY = key_for(TAG)
RECV = 65536  # what one recv takes (Conn.read_lines, wire.read_heartbeats)
LONGEST_SENT = 512  # longer than any line the hub or a spoke sends (`end S <why, at most 200>`)
PROPERTY = settings(max_examples=200, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.fixture(autouse=True, scope="module")
def _quiet():
    """Thousands of refused connections and protocol errors: logged, but not worth printing here."""
    logger = logging.getLogger(LOGGER)
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    yield
    logger.setLevel(level)


# -- what a peer may send -----------------------------------------------------------------------
WORDS = ["hello", "proof", "exit", "bye", "hb", "started", "ok", "end", "ack", "restart", "regroup", "error",
         "challenge", TAG, "local.1", "0", "1", "2", "3", "-1", "--1", "01", "255", "256", "999", "1e9", "nan",
         "inf", "-0", "0x1", "1_0", "3600", "3601", "0.05", "\u0661", "\xff"]
HEX32 = st.text("0123456789abcdef", min_size=32, max_size=32)
HEX64 = st.text("0123456789abcdef", min_size=64, max_size=64)
TOKEN = st.one_of(st.sampled_from(WORDS), HEX32, HEX64, st.text(st.characters(max_codepoint=127), max_size=12),
                  st.text(max_size=6))
SPACE = st.sampled_from([" ", "  ", "\t", "\x0b", "\x1c", "\r"])


@st.composite
def a_line(draw) -> bytes:
    """One line's bytes (no newline): words of the protocol, numbers, junk and raw bytes."""
    kind = draw(st.integers(0, 9))
    if kind == 0:
        return draw(st.binary(max_size=40))
    if kind == 1:  # a hello that looks right, for a rank, step or nonce that may not be
        rank = draw(st.sampled_from(["0", "1", "2", "3", "-1", "01", "1e0"]))
        tag = draw(st.sampled_from([TAG, "local.1", "x.0"]))
        return f"hello {rank} {tag} {draw(st.one_of(HEX32, TOKEN))}".encode()
    words = draw(st.lists(TOKEN, max_size=5))
    sep = draw(SPACE)
    return sep.join(words).encode("utf-8", "surrogateescape")


STATUS = st.sampled_from(["0", "1", "42", "69", "137", "143", "255"])
DELAY = st.sampled_from(["0", "0.01", "2", "3600"])
WHY = st.lists(st.sampled_from(["training", "is", "over", "\u2603", "x" * 300]), max_size=3).map(" ".join)
# lines the side under test takes as they come (from a peer that proved itself: it stays connected)
TO_HUB = st.one_of(st.just("hb"), st.just("started"), st.builds("exit {}".format, STATUS),
                   st.builds("bye {}".format, STATUS)).map(str.encode)
TO_SPOKE = st.one_of(st.builds("ok {}".format, DELAY), st.builds("end {} {}".format, STATUS, WHY), st.just("ack"),
                     st.builds("restart {}".format, DELAY), st.builds("regroup {}".format, DELAY)).map(str.encode)
# lines an impostor would try: a right-looking hello, proofs and challenges with made-up MACs
HELLO = st.builds("hello {} {} {}".format, st.sampled_from(["1", "2"]), st.just(TAG), HEX32).map(str.encode)
FORGED = st.one_of(st.builds("proof {}".format, HEX64), st.builds("challenge {} {}".format, HEX32, HEX64)
                   ).map(str.encode)


@st.composite
def a_stream(draw, friendly) -> List[bytes]:
    """What a peer sends: pieces delivered one after another (each piece may end mid-line); most
    lines drawn from `friendly` (so a stream gets past its first line), the rest junk."""
    line = st.one_of(friendly, friendly, friendly, a_line())
    pieces: List[bytes] = []
    for _ in range(draw(st.integers(1, 12))):
        kind = draw(st.integers(0, 9))
        if kind == 0:  # a long line, maybe never finished
            pieces.append(draw(st.sampled_from([b"x", b"0", b" ", b"hb"])) * draw(st.integers(MAX_LINE - 4, 140000))
                          + draw(st.sampled_from([b"", b"\n"])))
        elif kind == 1:  # the same line many times (a flood of heartbeats, reports, hellos)
            pieces.append((draw(line) + b"\n") * draw(st.integers(2, 20000)))
        else:
            lines = draw(st.lists(line, min_size=1, max_size=8))
            end = draw(st.sampled_from([b"\n", b"\r\n", b""]))
            pieces.append(b"\n".join(lines) + end)
    return pieces


# -- the hub, as Hub.run drives it ----------------------------------------------------------------
def _plan(me: int):
    """chief + 2 workers on 127.0.0.1; the chief's auxiliary port set (a hub and a spoke need it)."""
    plan = localhost_plan(["chief", "worker", "worker"], [1, 2, 3], my_rank=me)
    return dataclasses.replace(plan, tasks=(plan.tasks[0]._replace(aux_port=4),) + plan.tasks[1:])


def _pair(small_send: bool) -> Tuple[socket.socket, socket.socket]:
    """(ours: non-blocking, the side under test; theirs: the peer's).  A small send buffer on ours makes
    a peer that does not read fill the side's queued output quickly."""
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    theirs.setblocking(False)
    if small_send:
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    return ours, theirs


def _alive(conn: Conn) -> bool:
    return conn.sock.fileno() != -1


def _drain(sock: socket.socket, into: Optional[bytearray] = None) -> None:
    """Read what is there (a peer that reads what it is sent)."""
    while True:
        try:
            data = sock.recv(RECV)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            return
        if not data:
            return
        if into is not None:
            into += data


def _admit(gate, conn: Conn) -> None:
    """File a new connection as Gate.accept does (with no hello yet)."""
    waiting = getattr(gate, "idle", None)
    (waiting if isinstance(waiting, dict) else gate.pending)[conn] = None


def _unproven(gate) -> set:
    """The connections the gate still holds."""
    groups = [g for g in (getattr(gate, name, None) for name in ("idle", "greeted", "pending")) if isinstance(g, dict)]
    return {c for g in groups for c in g}


class HubSide:
    """A real Hub for the 3-task plan, its StepWatch set up as Hub.run sets it, and one connection."""

    def __init__(self, restarts: bool, small_send: bool):
        plan = _plan(0)
        timing = Timing.from_env({})
        policy = RestartPolicy(max_restarts=5, retry_on="any") if restarts else RestartPolicy()
        self.hub = hub = Hub(plan, step_roles(plan.tasks, "mwms"), ["true"], {}, timing, policy=policy, key=KEY)
        self.sel = selectors.DefaultSelector()
        self.watch = StepWatch(hub.roles, [t.rank for t in plan.tasks], hub.names, local_rank=hub.rank,
                               now=time.monotonic(), drain=timing.drain, silence=timing.silence,
                               connect_grace=timing.connect_grace, end_grace=timing.end_grace,
                               policy=hub.policy, role_of={t.rank: t.role for t in plan.tasks})
        hub.watch = self.watch
        ours, self.peer = _pair(small_send)
        self.conn = Conn(ours)  # as Gate.accept makes it
        self.conn.deadline = time.monotonic() + HELLO_DEADLINE
        _admit(hub.gate, self.conn)
        self.sel.register(ours, selectors.EVENT_READ, self.conn)
        self.max_inbuf = 0
        self.max_outbuf = 0

    def close(self) -> None:
        self.peer.close()
        if _alive(self.conn):
            self.conn.sock.close()
        self.sel.close()

    def pump(self) -> None:
        """One readable event of the connection, handled as Hub.run handles it."""
        conn, hub = self.conn, self.hub
        if conn.rank is not None and not conn.inbuf and read_heartbeats(conn):
            self.watch.heard[conn.rank] = time.monotonic()
        else:
            hub._serve(conn, self.sel, self.watch)
        self.max_inbuf = max(self.max_inbuf, len(conn.inbuf))
        self.max_outbuf = max(self.max_outbuf, len(conn.outbuf))
        if _alive(conn):
            assert len(conn.inbuf) <= MAX_LINE, "a live connection keeps at most one unfinished line"

    def readable(self) -> bool:
        return _alive(self.conn) and bool(select.select([self.conn.sock], [], [], 0)[0])

    def deliver(self, pieces: List[bytes], reads: bool, close: bool, got: Optional[bytearray] = None) -> None:
        """The peer sends `pieces` (reading the answers when `reads`), then maybe closes; the hub
        handles each readable event until the connection is idle or dropped."""
        for piece in pieces:
            view = memoryview(piece)
            while view and _alive(self.conn):
                try:
                    sent = self.peer.send(view[:RECV])
                except (BlockingIOError, InterruptedError):
                    sent = 0
                except OSError:  # the hub dropped us
                    return
                view = view[sent:]
                while self.readable():
                    self.pump()
                if reads:
                    _drain(self.peer, got)
        if close:
            try:
                self.peer.shutdown(socket.SHUT_WR)
            except OSError:  # already dropped
                pass
        for _ in range(100):
            if not self.readable():
                break
            self.pump()

    def join(self, rank: int) -> None:
        """The handshake as a spoke that holds the step's key makes it (tests/wire_peer.py)."""
        buf = bytearray()
        mine = new_nonce()
        self.deliver([f"hello {rank} {TAG} {mine}\n".encode()], reads=True, close=False, got=buf)
        _, hub_nonce, hub_proof = bytes(buf).decode().split()
        assert proof_ok(KEY, hub_proof, "hub", TAG, rank, mine, hub_nonce)
        buf.clear()
        self.deliver([f"proof {proof(KEY, 'spoke', TAG, rank, hub_nonce, mine)}\n".encode()], reads=True,
                     close=False, got=buf)
        assert bytes(buf).startswith(b"ok "), buf
        assert self.hub.conns == {rank: self.conn} and self.conn not in _unproven(self.hub.gate)


def _statuses_ok(watch: StepWatch) -> None:
    for status in [*watch.exited.values(), *watch.told.values()] + \
                  ([watch.failure.status] if watch.failure is not None else []):
        assert 0 <= status <= 255, watch.exited


@pytest.mark.timeout(120)
@PROPERTY
@given(pieces=a_stream(st.one_of(HELLO, FORGED, TO_HUB)), reads=st.booleans(), close=st.booleans(),
       restarts=st.booleans())
def test_hub_unproven_peer_changes_nothing(pieces, reads, close, restarts):
    side = HubSide(restarts, small_send=not reads)
    try:
        side.deliver(pieces, reads, close)
        event(f"dropped: {not _alive(side.conn)}; challenged: {side.conn.claim is not None}")
        w = side.watch
        assert side.hub.conns == {} and side.conn.rank is None
        assert w.joined == {0} and w.heard == {} and w.exited == {} and w.told == {} and w.settled == set()
        assert w.failure is None and not w.decided and w.restarting == {} and w.regrouping == {}
        assert side.max_inbuf <= MAX_LINE + RECV
        assert side.max_outbuf <= 2 * LONGEST_SENT  # a challenge, perhaps an error: it never earned more
        if not _alive(side.conn):
            assert side.conn not in _unproven(side.hub.gate)
    finally:
        side.close()


@pytest.mark.timeout(120)
@PROPERTY
@given(pieces=a_stream(TO_HUB), reads=st.booleans(), close=st.booleans(), restarts=st.booleans(),
       rank=st.sampled_from([1, 2]))
def test_hub_proven_peer_is_bounded(pieces, reads, close, restarts, rank):
    side = HubSide(restarts, small_send=not reads)
    try:
        side.join(rank)
        side.deliver(pieces, reads, close)
        event(f"dropped: {not _alive(side.conn)}; decided: {side.watch.decided}; "
              f"queued output over 32 KiB: {side.max_outbuf > 32768}; inbuf over {RECV}: {side.max_inbuf > RECV}")
        _statuses_ok(side.watch)
        assert set(side.watch.exited) <= {rank}  # a task speaks for itself only
        # wire.read_heartbeats reads once (<= RECV) before read_lines reads again: at most two reads
        # beyond one unfinished line, and then only on the way to the drop
        assert side.max_inbuf <= MAX_LINE + 2 * RECV
        assert side.max_outbuf <= MAX_OUTBUF + 2 * LONGEST_SENT  # send() drops it past MAX_OUTBUF
        if not _alive(side.conn):
            assert side.hub.conns == {}
    finally:
        side.close()


# -- the spoke, as Spoke.run drives it ------------------------------------------------------------
class SpokeSide:
    """A real Spoke (rank 1) connected to a peer at the hub's address: the hello sent, nothing proven."""

    def __init__(self, restarts: bool, sent: bool):
        plan = _plan(1)
        policy = RestartPolicy(max_restarts=5, retry_on="any") if restarts else RestartPolicy()
        self.spoke = spoke = Spoke(plan, plan.tasks[0], ["true"], {}, Timing.from_env({}), policy=policy,
                                   strategy="mwms", key=KEY)
        self.sel = selectors.DefaultSelector()
        ours, self.peer = _pair(small_send=False)
        spoke.conn = Conn(ours)  # as Spoke._connected sets it up
        spoke.nonce, spoke.verified = new_nonce(), False
        spoke.watch.sent = sent  # its command's exit report is on its way (a `restart` then counts)
        self.sel.register(ours, selectors.EVENT_READ, "conn")
        self.max_inbuf = 0

    def close(self) -> None:
        self.peer.close()
        if self.spoke.conn is not None:
            self.spoke.conn.sock.close()
        self.sel.close()

    def deliver(self, pieces: List[bytes], close: bool) -> None:
        for piece in pieces:
            view = memoryview(piece)
            while view and self.spoke.conn is not None:
                try:
                    sent = self.peer.send(view[:RECV])
                except (BlockingIOError, InterruptedError):
                    sent = 0
                except OSError:
                    return
                view = view[sent:]
                self.pump()
                _drain(self.peer)
        if close:
            try:
                self.peer.shutdown(socket.SHUT_WR)
            except OSError:  # already dropped
                pass
        for _ in range(100):
            conn = self.spoke.conn
            if conn is None or not select.select([conn.sock], [], [], 0)[0]:
                break
            self.pump()

    def pump(self) -> None:
        conn = self.spoke.conn
        if conn is None or not select.select([conn.sock], [], [], 0)[0]:
            return
        self.spoke._read(self.sel)
        self.max_inbuf = max(self.max_inbuf, len(conn.inbuf))
        if self.spoke.conn is not None:
            assert len(conn.inbuf) <= MAX_LINE

    def prove_hub(self, join: bool) -> None:
        """The hub's side of the handshake (tests/wire_peer.py), then maybe its `ok`."""
        spoke, mine = self.spoke, new_nonce()
        line = f"challenge {mine} {proof(KEY, 'hub', TAG, spoke.rank, spoke.nonce, mine)}\n"
        self.peer.send(line.encode())
        self.pump()
        assert spoke.verified and spoke.conn is not None
        got = bytearray()
        _drain(self.peer, got)
        assert proof_ok(KEY, bytes(got).decode().split()[1], "spoke", TAG, spoke.rank, mine, spoke.nonce)
        if join:
            self.peer.send(b"ok 2\n")
            self.pump()
            assert spoke.joined


@pytest.mark.timeout(120)
@PROPERTY
@given(pieces=a_stream(st.one_of(FORGED, TO_SPOKE)), close=st.booleans(), restarts=st.booleans(),
       sent=st.booleans())
def test_spoke_unproven_hub_is_not_obeyed(pieces, close, restarts, sent):
    side = SpokeSide(restarts, sent)
    try:
        side.deliver(pieces, close)
        s = side.spoke
        event(f"closed: {s.conn is None}")
        w = s.watch
        assert not s.verified and not s.joined and not w.lost
        assert w.told_status is None and w.restart_at is None and w.regroup is None and not w.acked
        assert s.heartbeat == Timing.from_env({}).heartbeat
        assert side.max_inbuf <= MAX_LINE + RECV
    finally:
        side.close()


@pytest.mark.timeout(120)
@PROPERTY
@given(pieces=a_stream(TO_SPOKE), close=st.booleans(), restarts=st.booleans(), sent=st.booleans(), join=st.booleans())
def test_spoke_proven_hub_is_bounded(pieces, close, restarts, sent, join):
    side = SpokeSide(restarts, sent)
    try:
        side.prove_hub(join)
        before = time.monotonic()
        side.deliver(pieces, close)
        s = side.spoke
        event(f"closed: {s.conn is None}; told: {s.watch.told_status is not None}; lost: {s.watch.lost}; "
              f"restart: {s.watch.restart_at is not None}; regroup: {s.watch.regroup is not None}")
        assert s.watch.told_status is None or 0 <= s.watch.told_status <= 255
        assert s.watch.restart_at is None or s.watch.restart_at <= time.monotonic() + MAX_DELAY
        assert s.watch.regroup is None or 0 <= s.watch.regroup <= MAX_DELAY
        assert 0.05 <= s.heartbeat <= Timing.from_env({}).silence / 2
        assert s.watch.restart_at is None or s.watch.restart_at >= before
        assert side.max_inbuf <= MAX_LINE + RECV
    finally:
        side.close()


def test_the_hang_factor_is_a_factor_not_seconds():
    with pytest.raises(UsageError, match=r"^TF_SLURM_HANG_FACTOR='ten': expected a factor, a number > 0$"):
        Timing.from_env({"TF_SLURM_HANG_FACTOR": "ten"})
    with pytest.raises(UsageError, match=r"^TF_SLURM_HANG_AFTER='x': expected seconds, a number >= 0$"):
        Timing.from_env({"TF_SLURM_HANG_AFTER": "x"})
    assert Timing.from_env({"TF_SLURM_HANG_FACTOR": "2.5"}).hang_factor == 2.5
