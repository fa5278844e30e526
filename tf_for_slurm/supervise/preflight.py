"""The check before the command starts, carried out: sockets, proofs, the chief's verdict.

Why: see plan/preflight.py.  Each task's supervisor listens on its planned TensorFlow port and connects
to its targets, again on "refused" until the deadline (the peer may bind later).  The listener speaks
first (`tfs-preflight <job>.<step> <rank> <nonce>`), the connector answers `pf <rank> <nonce> <proof>`,
the listener `ok <proof> <its name's addresses>` (plan.preflight.mac); anything else is a stranger's:
dropped by a listener, named by a connector.  Every task reports to the chief's (`report ok|fail ...`),
which answers `go` or `stop <line>` (plan.preflight.verdict); a task without a verdict by its deadline
+ 2 x grace fails on its own.  Every read is bounded in bytes and time; a stranger costs one slot.
"""

from __future__ import annotations

import errno
import logging
import selectors
import socket
import time
from functools import partial
from typing import Dict, List, Mapping, Optional, Tuple

from tf_for_slurm.host import job_folder, reach, settings
from tf_for_slurm.plan import preflight as rules
from tf_for_slurm.plan.cluster import ClusterPlan
from tf_for_slurm.plan.preflight import Failure, Report, mac, mac_ok
from tf_for_slurm.plan.strategy import StepRoles
from tf_for_slurm.supervise.child_process import LOGGER
from tf_for_slurm.supervise.handshake import is_nonce, new_nonce
from tf_for_slurm.supervise.status_file import StatusFile
from tf_for_slurm.supervise.wire import note_failure, parse_rank, raise_fd_limit

log = logging.getLogger(LOGGER)

HELLO = "tfs-preflight"
MAX_LINE = 1024  # bytes of one line (a stop line is at most plan.preflight.MAX_TEXT characters)
MAX_UNPROVEN = 128  # accepted connections not yet done: the oldest unproven goes for a new one
HELLO_WAIT = 5.0  # seconds an accepted connection has to prove itself
GO_LINGER = 0.5  # seconds the chief waits for the tasks to close after its `go` (they close first)
SWEEP = 0.1  # seconds between looks at deadlines
GO = ""  # the verdict when every address answered (else: the failure's line)
# how a check still under way at the deadline failed: a SYN unanswered; a connection that said nothing
AT_DEADLINE = {"connecting": (rules.NO_ANSWER, ""), "hello": (rules.STRANGER, "silent"),
               "proof": (rules.STRANGER, "silent")}
_RETRY = {errno.ECONNREFUSED: rules.REFUSED, errno.ECONNRESET: rules.REFUSED, errno.ETIMEDOUT: rules.NO_ANSWER}


class Link:
    """One connection, either side: its socket, where it stands, its deadline, its unread bytes."""

    __slots__ = ("sock", "rank", "state", "deadline", "buf", "nonce", "peer_nonce", "claim")

    def __init__(self, sock: Optional[socket.socket], state: str, deadline: float, rank: int = -1):
        self.sock, self.state, self.deadline, self.rank = sock, state, deadline, rank
        self.buf, self.nonce, self.peer_nonce, self.claim = b"", "", "", -1

    def lines(self) -> Optional[List[List[str]]]:
        """The complete lines readable now, in words; None once the peer closed or broke the bounds."""
        try:
            data = self.sock.recv(4096) if self.sock is not None else b""
        except (BlockingIOError, InterruptedError):
            return []
        except OSError:
            return None
        *lines, self.buf = (self.buf + data).split(b"\n")
        if not data or len(self.buf) > MAX_LINE or any(len(line) > MAX_LINE for line in lines):
            return None
        return [line.decode("ascii", "replace").split() for line in lines]

    def send(self, text: str) -> bool:
        data = (text + "\n").encode("ascii", "replace")
        try:
            return self.sock is not None and self.sock.send(data) == len(data)
        except OSError:
            return False


class Out(Link):
    """This task's check of one target (sock: its current try): its next try, how the last one ended."""

    __slots__ = ("address", "here", "there", "next_try", "delay", "last")

    def __init__(self, rank: int, here: tuple, now: float):
        super().__init__(None, "wait", 0.0, rank)
        self.here, self.address, self.next_try, self.delay = here, here[0] if here else "", now, 0.01
        self.there: Tuple[str, ...] = ()
        self.last: Tuple[str, str] = (rules.NO_ANSWER, "")  # how its last try failed: the kind, the detail


class Check:
    """One task's check (see the module's docstring); `run` returns GO ('') when every address answered,
    else the failure's line.  No signal, no process state: the benchmark runs thousands in one process."""

    def __init__(self, plan: ClusterPlan, key: bytes, chief: int, timeout: float, names: Mapping[str, str], *,
                 roles: Optional[StepRoles] = None, report: Optional[str] = None, status: Optional[str] = None):
        self.plan, self.key, self.chief, self.timeout, self.names = plan, key, chief, timeout, names
        self.roles, self.report, self.status = roles, report, status  # for the chief's status file, a launcher
        self.me, self.size, self.tag = plan.me, plan.size, f"{plan.job_id}.{plan.step_id}"
        self.is_chief = self.me.rank == chief
        self.failures: List[Failure] = []
        self.outs: Dict[int, Out] = {}
        self.accepted: Dict[Link, None] = {}  # unproven, or proven and closing: oldest first
        self.held: Dict[int, Link] = {}  # the chief: each task's proven connection
        self.reports: Dict[int, Report] = {}  # the chief: what each task said
        self.own: Tuple[str, ...] = ()  # our name's addresses here
        self.verdict: Optional[str] = None  # GO or the line, once known
        self.told, self.reported, self.paused = 0, False, False
        self.first_bad: Optional[float] = None
        self.decided_at = self.deadline = self.grace = 0.0
        self.sel = selectors.DefaultSelector()
        self.server: Optional[socket.socket] = None

    def run(self) -> str:
        start = time.monotonic()
        self.deadline, self.grace = start + self.timeout, rules.grace(self.timeout)
        try:
            self._listen()
            self._resolve(start)
            return self._loop()
        finally:
            for link in [*self.outs.values(), *self.accepted, *self.held.values()]:
                self._forget(link)
            if self.server is not None:
                self.server.close()
            self.sel.close()

    def _listen(self) -> None:
        """IPv4 and IPv6 where the host has both (as the hub's, supervise.wire.listen), else IPv4."""
        code = "EADDRINUSE"
        for dual in (True, False) if socket.has_dualstack_ipv6() else (False,):
            try:
                family = socket.AF_INET6 if dual else socket.AF_INET
                self.server = socket.create_server(("", self.me.port), family=family, dualstack_ipv6=dual,
                                                   backlog=min(self.size + MAX_UNPROVEN, 65535))
            except OSError as exc:
                code = errno.errorcode.get(exc.errno or 0, code)
                continue
            self.server.setblocking(False)
            self.sel.register(self.server, selectors.EVENT_READ, self._accept)
            return
        self.failures.append(Failure(rules.IN_USE, self.me.rank, self.me.rank, self.timeout, detail=code))

    def _resolve(self, now: float) -> None:
        tasks, me = self.plan.tasks, self.me
        targets = rules.Pairs(tasks, self.chief).targets(me.rank)
        answers = reach.resolve_all([me.host, *(tasks[r].host for r in targets)], self.timeout)
        self.own = answers[me.host].addresses[:rules.MAX_ADDRESSES]
        for rank in targets:
            self.outs[rank] = Out(rank, answers[tasks[rank].host].addresses[:rules.MAX_ADDRESSES], now)
        late = {r for r in targets if answers[tasks[r].host].error.startswith("no answer")}
        self.failures += rules.name_failures(me, tasks, self.own, {r: o.here for r, o in self.outs.items()}, late,
                                             rules.emulated(self.plan.details), self.timeout)
        for failure in self.failures:
            if failure.target in self.outs and failure.source == me.rank:
                self.outs[failure.target].state = "failed"

    def _loop(self) -> str:
        next_sweep = 0.0
        while True:
            now = time.monotonic()
            for out in self.outs.values():
                if out.state == "wait" and out.next_try <= now < self.deadline:
                    self._connect(out, now)
            if now >= next_sweep:
                self._sweep(now)
                next_sweep = now + SWEEP
            result = self._chief_turn(now) if self.is_chief else self._task_turn(now)
            if result is not None:
                return result
            wake = [next_sweep, *(o.next_try for o in self.outs.values() if o.state == "wait")]
            for key, _mask in self.sel.select(max(0.0, min(wake) - time.monotonic())):
                key.data()  # what to do with it: _accept, _out_event or _in_event

    # -- connecting -----------------------------------------------------------------------------
    def _connect(self, out: Out, now: float) -> None:
        try:
            sock = out.sock = socket.socket(socket.AF_INET6 if ":" in out.address else socket.AF_INET)
        except OSError as exc:  # out of descriptors: as a try that failed
            return self._retry(out, exc.errno or 0, now)
        sock.setblocking(False)
        code = sock.connect_ex((out.address, self.plan.tasks[out.rank].port))
        if code not in (0, errno.EINPROGRESS):
            return self._retry(out, code, now)
        out.state, out.buf = "connecting", b""
        self.sel.register(sock, selectors.EVENT_WRITE, partial(self._out_event, out))

    def _retry(self, out: Out, code: int, now: float, kind: str = "", detail: str = "") -> None:
        """A try that failed in a way a later one may not: again after a pause, until the deadline."""
        self._forget(out)
        name = "" if code in _RETRY else errno.errorcode.get(code, "")  # no route: EHOSTUNREACH, ...
        out.last = (kind or _RETRY.get(code, rules.UNREACHABLE), detail or name)
        out.state, out.next_try, out.delay = "wait", now + out.delay, rules.next_delay(out.delay, self.size)

    def _fail(self, out: Out, kind: str, detail: str = "", answered: int = -1) -> None:
        self._forget(out)
        out.state = "failed"
        self.failures.append(Failure(kind, self.me.rank, out.rank, self.timeout, out.here, out.there, detail, answered))

    def _out_event(self, out: Out) -> None:
        now = time.monotonic()
        if out.sock is None:
            return
        if out.state == "connecting":
            code = out.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if code:
                return self._retry(out, code, now)
            out.state = "hello"
            self.sel.modify(out.sock, selectors.EVENT_READ, partial(self._out_event, out))
            return
        lines = out.lines()
        if lines is None and out.state == "held":
            self.verdict = self._say(Failure(rules.NO_VERDICT, self.me.rank, out.rank, self.timeout, detail="closed"))
        elif lines is None:  # a listener under a flood drops its oldest unproven connections: again
            self._retry(out, 0, now, rules.STRANGER, "closed")
        for parts in lines or []:
            if out.state == "hello":
                self._hello(out, parts)
            elif out.state == "proof":
                self._proven(out, parts)
            elif out.state == "held" and parts[:1] in (["go"], ["stop"]):  # a bad stop line: no verdict
                line = rules.clean_line(" ".join(parts[1:]))
                self.verdict = GO if parts == ["go"] else line
                log.debug("preflight: the chief's supervisor says %s", " ".join(parts))

    def _hello(self, out: Out, parts: List[str]) -> None:
        ours = len(parts) == 4 and parts[0] == HELLO and parse_rank(parts[2], self.size) is not None and \
            is_nonce(parts[3])
        if not ours or parts[1] != self.tag:
            return self._fail(out, rules.STRANGER, "other-step" if ours else "garbage")
        out.claim, out.nonce, out.peer_nonce = int(parts[2]), new_nonce(), parts[3]
        out.send(f"pf {self.me.rank} {out.nonce} "
                 f"{mac(self.key, 'connector', self.tag, self.me.rank, out.claim, parts[3], out.nonce)}")
        out.state = "proof"

    def _proven(self, out: Out, parts: List[str]) -> None:
        there = rules.parse_addresses(parts[2]) if len(parts) == 3 and parts[0] == "ok" else None
        if there is None or not mac_ok(self.key, parts[1], "listener", self.tag, out.claim, self.me.rank,
                                       out.nonce, out.peer_nonce):
            return self._fail(out, rules.STRANGER, "bad-proof")
        out.there = there
        if out.claim != out.rank:
            self._fail(out, rules.OTHER_TASK, answered=out.claim)
        elif out.rank == self.chief:
            out.state = "held"  # the verdict comes on it
        else:
            self._forget(out)  # we close first: the listener's port keeps no TIME_WAIT
            out.state = "ok"

    # -- listening ------------------------------------------------------------------------------
    def _accept(self) -> None:
        assert self.server is not None
        now = time.monotonic()
        for _ in range(256):
            try:
                sock, _peer = self.server.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # out of descriptors: free the oldest unproven, or pause (the rest wait queued)
                if not self._evict():
                    self.sel.unregister(self.server)
                    self.paused = True
                return
            sock.setblocking(False)
            link = Link(sock, "answer", now + min(HELLO_WAIT, self.timeout))
            link.nonce, self.accepted[link] = new_nonce(), None
            link.send(f"{HELLO} {self.tag} {self.me.rank} {link.nonce}")  # a failed send: it expires
            self.sel.register(sock, selectors.EVENT_READ, partial(self._in_event, link))
            if len(self.accepted) > MAX_UNPROVEN + (0 if self.is_chief else 64):
                self._evict()

    def _evict(self) -> bool:
        oldest = next((link for link in self.accepted if link.state == "answer"), None)
        if oldest is not None:
            self._forget(oldest)
        return oldest is not None

    def _in_event(self, link: Link) -> None:
        lines = link.lines()
        if lines is None:
            if link.state == "held" and link.rank not in self.reports and self.verdict is None:
                self.failures.append(Failure(rules.SILENT, link.rank, self.chief, self.timeout, detail="closed"))
            return self._forget(link)
        for parts in lines:
            if link.state == "answer":
                self._answer(link, parts)
            elif link.state == "held":
                report = rules.parse_report(parts, self.size)
                if report is None or link.rank in self.reports:  # not the protocol: as if it closed
                    return self._forget(link)
                self.reports[link.rank] = report
                self.failures += [report.failure] if report.failure else []  # the chief's: every failure known

    def _answer(self, link: Link, parts: List[str]) -> None:
        rank = parse_rank(parts[1], self.size) if len(parts) == 4 and parts[0] == "pf" else None
        if rank is None or rank == self.me.rank or not is_nonce(parts[2]) or \
                not mac_ok(self.key, parts[3], "connector", self.tag, rank, self.me.rank, link.nonce, parts[2]):
            log.debug("preflight: dropped a connection that is not this step's supervisor")
            return self._forget(link)
        link.send(f"ok {mac(self.key, 'listener', self.tag, self.me.rank, rank, parts[2], link.nonce)} "
                  f"{rules.addresses_token(self.own)}")
        link.rank, out = rank, self.outs.get(rank)
        if out is not None and out.state == "wait":  # it is up: our check of it need not wait for its next try
            out.next_try = 0.0
        if not self.is_chief:  # the connector closes first; we wait for that, until HELLO_WAIT
            link.state = "closing"
            return
        self.accepted.pop(link, None)
        if rank in self.held:  # a second supervisor of one task: the newest counts
            self._forget(self.held[rank])
        link.state, self.held[rank] = "held", link
        if self.verdict:  # a stop: a task that comes late is told too
            self._tell(link)

    def _sweep(self, now: float) -> None:
        for link in [link for link in self.accepted if now >= link.deadline]:
            self._forget(link)
        if self.paused and self.server is not None:
            self.sel.register(self.server, selectors.EVENT_READ, self._accept)
            self.paused = False
        for out in self.outs.values() if now >= self.deadline else ():
            if out.state in AT_DEADLINE or out.state == "wait":  # waiting: as its last try ended
                self._fail(out, *AT_DEADLINE.get(out.state, out.last))

    def _forget(self, link: Link) -> None:
        self.accepted.pop(link, None)
        if self.held.get(link.rank) is link:
            del self.held[link.rank]
        if link.sock is not None:
            if self.sel.get_map().get(link.sock) is not None:
                self.sel.unregister(link.sock)
            link.sock.close()
            link.sock = None

    # -- the verdict ----------------------------------------------------------------------------
    def _line(self, failure: Failure) -> str:
        own = {**{rank: report.own for rank, report in self.reports.items()}, self.me.rank: self.own}
        return rules.failure_line(rules.with_view(failure, own), self.plan.tasks, self.names)

    def _task_turn(self, now: float) -> Optional[str]:
        out, worst = self.outs[self.chief], rules.worst(self.failures)
        if self.verdict is not None:
            return self.verdict
        if not self.reported and out.state == "held" and \
                (worst or all(o.state in ("ok", "held") for o in self.outs.values())):
            self.reported = out.send(" ".join(rules.report_tokens(Report(self.own, worst))))
        if out.state == "failed" and worst is not None:  # nobody to tell: we say it
            self.verdict = self._say(worst)
        elif now >= self.deadline + 2 * self.grace:
            self.verdict = self._say(Failure(rules.NO_VERDICT, self.me.rank, self.chief, self.timeout, detail="silent"))
        return self.verdict

    def _chief_turn(self, now: float) -> Optional[str]:
        if self.verdict is None:
            known = self.failures
            self.first_bad = now if known and self.first_bad is None else self.first_bad
            all_in = len(self.reports) == self.size - 1 and all(o.state in ("ok", "failed") for o in self.outs.values())
            decision = rules.verdict(bool(known), all_in, now, self.first_bad, self.deadline + self.grace,
                                     self.server is not None)
            if decision == rules.STOP:  # said before anyone hears it: a launcher may end this process then
                self.verdict = self._say(rules.worst(known) or rules.silent(self.size, self.chief, self.reports,
                                                                            self.timeout))
            elif decision == rules.GO:
                self.verdict, self.decided_at = GO, now
            for link in list(self.held.values()) if self.verdict is not None else ():
                self._tell(link)
        if self.verdict == GO:  # the tasks close first
            return GO if not self.held or now >= self.decided_at + GO_LINGER else None
        done = self.told >= self.size - 1 or self.server is None or now >= self.deadline + self.grace
        return self.verdict if done else None  # a stop: until then, a task that comes late is told too

    def _say(self, failure: Failure) -> str:
        """Our own line: logged, and named to a launcher (tf-slurm local) and, by the chief, in the status file."""
        line = self._line(failure)
        log.error("%s", line)
        note_failure(self.report, failure.source if self.is_chief else self.me.rank, rules.STATUS)
        if self.is_chief and self.status and self.roles:
            now, plan = time.monotonic(), self.plan
            data = rules.failed_status(plan.tasks, self.roles, failure.source, line, job=plan.job_id,
                                       step=plan.step_id, me=self.me.rank, mono=now, wall=time.time())
            StatusFile(self.status).update(now, 0, lambda: data, force=True)
        return line

    def _tell(self, link: Link) -> None:
        assert self.verdict is not None
        self.told += 1
        link.send(f"stop {self.verdict}" if self.verdict else "go")


def check_step(plan: ClusterPlan, roles: StepRoles, key: bytes, env: Mapping[str, str]) -> Optional[int]:
    """This task's check under exec: None when every address answered, else the status to exit with before
    the command starts (the line logged once, by the task that knows it: the chief, or one that cannot
    reach the chief's)."""
    if plan.me.rank == roles.chief_rank:
        raise_fd_limit(plan.size + MAX_UNPROVEN + 64)
    started = time.monotonic()
    line = Check(plan, key, roles.chief_rank, reach.preflight_timeout(env), reach.FIX_NAMES, roles=roles,
                 report=env.get(settings.LAUNCH_REPORT) or None, status=job_folder.status_path(env)).run()
    if line == GO:
        log.log(logging.INFO if plan.me.rank == roles.chief_rank else logging.DEBUG, "preflight: every planned "
                "address answered (%d tasks, %.0f ms)", plan.size, 1000 * (time.monotonic() - started))
    return None if line == GO else rules.STATUS
