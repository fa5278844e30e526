"""Every other task's supervisor under `tf-slurm exec`: runs its command, keeps one connection to the hub.

Why: the hub (hub.py) must hear at once when this task's command exits, and this task must end
when the hub says so or goes away.  A killed supervisor closes its connection at once (the kernel
does it); a dead node is a missed heartbeat (and TCP keepalive); a dead hub is an error on this
side's socket, and this task then ends with LOST_STATUS.

Restarts in place: the hub may answer this task's `exit S` with `restart DELAY` instead of `ack`
(plan.restart_policy decides): the spoke then keeps heart-beating, waits DELAY seconds, starts the
same command with the same environment again, says `started`, and goes on as before.
"""

from __future__ import annotations

import errno
import logging
import selectors
import socket
import time
from typing import List, Mapping, Optional, Sequence

from tf_for_slurm.errors import PlanError
from tf_for_slurm.host import settings
from tf_for_slurm.plan.cluster import ClusterPlan, Task
from tf_for_slurm.plan.restart_policy import RestartPolicy, could_restart
from tf_for_slurm.plan.spoke_watch import END_COMMAND, START_AGAIN, Action, Finish, Link, NoteFailure, Send, SpokeWatch
from tf_for_slurm.plan.start_phase import Phase, phase_line
from tf_for_slurm.plan.train_progress import Report, report_line
from tf_for_slurm.supervise.child_process import LOGGER, ForwardSignals, Wake
from tf_for_slurm.supervise.handshake import HELLO_DEADLINE, answer_challenge, hello_line, new_nonce
from tf_for_slurm.supervise.task_command import TaskCommand
from tf_for_slurm.supervise.wire import Conn, Timing, keepalive, note_failure, parse_delay, parse_status

log = logging.getLogger(LOGGER)
REPORT_EVERY = 2.0  # seconds between two progress lines to the hub (its load; status shows them every 5 s)



class Spoke:
    """Every other task's supervisor: runs its command, keeps one connection to the hub."""

    def __init__(self, plan: ClusterPlan, hub_task: Task, argv: Sequence[str], env: Mapping[str, str],
                 timing: Timing, launch_report: Optional[str] = None, policy: Optional[RestartPolicy] = None,
                 strategy: str = "", *, key: bytes):
        self.plan, self.hub, self.argv, self.env, self.timing = plan, hub_task, argv, env, timing
        self.key = key  # the step's key (host/step_secret.py): the hub proves it holds it, then we do
        self.policy = policy or RestartPolicy()
        self.strategy = strategy
        self.launch_report = launch_report
        if hub_task.aux_port is None:
            raise PlanError(f"aux_port of the chief {hub_task.role}:{hub_task.index} is None: expected a second "
                            f"port for the step's supervisor; reserve 2 ports per task or set {settings.BASE_PORT}")
        self.rank: int = plan.me.rank
        self.tag = f"{plan.job_id}.{plan.step_id}"
        self.nonce = ""  # this connection's nonce (a new one for every connection)
        self.verified = False  # the hub proved it holds the step's key on this connection
        self.verify_by = 0.0  # ... or this connection is given up
        self.impostors = 0  # answers at the hub's address that could not prove it
        self.heartbeat = timing.heartbeat  # the hub may ask for a longer interval in its `ok`
        self.hub_name = (f"the step's supervisor on {hub_task.role} {hub_task.index} "
                         f"({hub_task.host}:{hub_task.aux_port})")
        # connection state
        self.conn: Optional[Conn] = None
        self.connecting: Optional[socket.socket] = None
        self.connect_by = 0.0
        self.next_try = 0.0
        self.delay = 0.05
        self.joined = False  # the hub said ok
        self.given_up = False  # no more connection attempts
        # what to do with the command's end and the hub's words: decided by plan.spoke_watch
        self.watch = SpokeWatch(start=time.monotonic(), report_wait=timing.report_wait,
                                connect_grace=timing.connect_grace, hub_name=self.hub_name,
                                retried=lambda status: could_restart(self.policy, strategy, plan.me.role, False,
                                                                     status))
        self.signals_seen = 0  # signals received before the command last started (a later stop: no restart)
        self.sigs: Optional[ForwardSignals] = None  # the signals this supervisor received (set in run)
        self.command: Optional[TaskCommand] = None  # this task's command (set in run)
        self.pending_report: Optional[Report] = None  # its newest progress report, not yet sent
        self.pending_phase: Optional[Phase] = None  # its newest start-up phase, not yet sent
        self.next_report = 0.0  # when the next may go

    def run(self) -> int:
        """Run the command until it ends; the status this task ends with, once the hub knows it."""
        wake = Wake()
        sel = selectors.DefaultSelector()
        sel.register(wake.r, selectors.EVENT_READ, "wake")
        start = self.watch.start = time.monotonic()
        self.next_try = start
        try:
            with ForwardSignals(wake) as sigs:
                self.sigs = sigs
                self.command = TaskCommand(self.argv, self.env, wake, sigs, self.timing.progress_deadline,
                                           self.timing.kill_grace)
                self.command.start(start)
                return self._loop(sel, wake, sigs, start)
        finally:
            if self.command is not None:
                self.command.close()
            if self.conn is not None:
                self.conn.sock.close()
            if self.connecting is not None:
                self.connecting.close()
            sel.close()
            wake.close()

    def _loop(self, sel: selectors.BaseSelector, wake: Wake, sigs: ForwardSignals, start: float) -> int:
        cmd = self.command
        assert cmd is not None
        next_hb = float("inf")
        while True:
            now = time.monotonic()
            self._pass_progress(now)  # before the turn: the turn sees an exit only once its last report went
            result = self._turn(sel, sigs, now)
            if result is not None:
                return result
            cmd.tick(now)
            if self.conn is not None and not self.verified and now >= self.verify_by:
                self._not_the_hub(sel, f"no challenge within {HELLO_DEADLINE:g} s")
            self._connect_step(sel, now, start)
            beating = cmd.status is None or self.watch.restart_at is not None
            if self.joined and self.conn is not None and beating and now >= next_hb:
                if not self.conn.send("hb"):
                    self._lose(sel, "the connection failed")
                next_hb = now + self.heartbeat
            wakeup = min(self._wakeups(now, next_hb if self.joined and beating else None))
            for key, _mask in sel.select(max(0.0, wakeup - time.monotonic())):
                if key.data == "wake":
                    wake.drain()
                elif key.data == "connecting":
                    self._connected(sel)
                elif key.data == "conn" and self._read(sel):
                    next_hb = time.monotonic() + self.heartbeat

    def _turn(self, sel: selectors.BaseSelector, sigs: ForwardSignals, now: float) -> Optional[int]:
        """One look by the watch at the command and the link; the status to exit with, else None.  The
        command's exit counts once its last progress report was passed on (`settled`, _pass_progress)."""
        assert self.command is not None
        link = Link(self.conn is not None, self.joined, self.given_up, self._impostor_note())
        actions = self.watch.turn(now, self.command.settled, sigs.stop_since(self.signals_seen), link)
        result = self._carry_out(sel, actions, now)
        if result is None and START_AGAIN in actions:  # the new command's state, at once
            self._pass_progress(now)
            link = Link(self.conn is not None, self.joined, self.given_up, self._impostor_note())
            result = self._carry_out(sel, self.watch.turn(now, self.command.settled, None, link), now)
        return result

    def _carry_out(self, sel: selectors.BaseSelector, actions: List[Action], now: float) -> Optional[int]:
        """Do what the watch said; the status to exit with when it said Finish."""
        result: Optional[int] = None
        for action in actions:
            if action is END_COMMAND and self.command is not None:
                self.command.end()
            elif action is START_AGAIN:
                self._start_again(now)
            elif isinstance(action, NoteFailure):
                note_failure(self.launch_report, self.rank, action.status)
            elif isinstance(action, Send):
                ok = self.conn is not None and self.conn.send(action.line)
                result = self._carry_out(sel, self.watch.sent_result(ok, now, action.status), now)
            elif isinstance(action, Finish):
                result = action.status
            if result is not None:
                break
        for level, message in self.watch.take_notes():
            log.log(level, "%s", message)
        if self.watch.lost and not self.given_up:  # the hub is gone: no more connection attempts
            self._give_up(sel)
        return result

    def _pass_progress(self, now: float) -> None:
        """The command's newest progress report to the hub, at most one a REPORT_EVERY (a lost
        line is harmless: the next one says more); once the command ended, its last one at once, so
        it goes before the exit (the hub reads a report held back by its gap as the exit comes)."""
        assert self.command is not None
        report = self.command.take_report()  # once it ended: the file read once more, and `settled`
        if report is not None:
            self.pending_report = report
        due = now >= self.next_report or self.command.settled is not None  # its last report: at once
        if self.pending_report is not None and self.joined and self.conn is not None and due:
            self.conn.send("progress " + report_line(self.pending_report))
            self.pending_report, self.next_report = None, now + REPORT_EVERY
        phase = self.command.take_phase()  # its start-up phase: a few a run, at most one a second
        self.pending_phase = phase or self.pending_phase
        if self.pending_phase is not None and self.joined and self.conn is not None:
            self.conn.send("phase " + phase_line(self.pending_phase))
            self.pending_phase = None

    def _wakeups(self, now: float, next_hb: Optional[float]) -> List[float]:
        """When the loop must look again, whatever the hub says."""
        watch = self.watch
        times = [now + 1.0]
        if self.pending_report is not None and self.joined and self.conn is not None:  # (else: no spin)
            times.append(max(now, self.next_report))
        if next_hb is not None:
            times.append(next_hb)
        if watch.restart_at is not None:
            times.append(watch.restart_at)
        if self.conn is None and self.connecting is None and not self.given_up:
            times.append(self.next_try)
        if self.connecting is not None:
            times.append(self.connect_by)
        if self.conn is not None and not self.verified:
            times.append(self.verify_by)
        if watch.sent:
            times.append(watch.ack_by)
        if self.command is not None:
            times.extend(self.command.deadlines())
        return times

    # -- restarts --------------------------------------------------------------------------
    def _start_again(self, now: float) -> None:
        """The hub said restart: the same command, the same environment, after the failed one's
        leftovers are gone; `started` tells the hub it runs again."""
        assert self.command is not None
        self.signals_seen = len(self.sigs.received) if self.sigs is not None else 0
        ok = self.command.start(now)
        self.watch.started_again(ok, now)
        if ok and self.conn is not None and not self.conn.send("started"):
            log.warning("could not tell %s the command runs again (connection failed)", self.hub_name)

    # -- the hub gone ----------------------------------------------------------------------
    def _lose(self, sel: selectors.BaseSelector, why: str) -> None:
        """The hub is gone (or never came): end our command; we exit with LOST_STATUS."""
        self._carry_out(sel, self.watch.lose(why), time.monotonic())
        self._give_up(sel)

    def _give_up(self, sel: selectors.BaseSelector) -> None:
        if self.conn is not None:
            self._close(sel)
        self.given_up = True

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
        if sock is None:  # no connection attempt under way
            return
        sel.unregister(sock)
        if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
            sock.close()
            self._backoff(time.monotonic())
            return
        keepalive(sock, self.timing)
        self.conn = Conn(sock)
        self.nonce, self.verified = new_nonce(), False
        self.verify_by = time.monotonic() + HELLO_DEADLINE
        sel.register(sock, selectors.EVENT_READ, "conn")
        if not self.conn.send(hello_line(self.rank, self.tag, self.nonce)):
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

    def _impostor_note(self) -> str:
        if not self.impostors:
            return ""
        return (f"; {self.impostors} answer(s) there failed authentication: another program holds the port, or the "
                f"tasks do not share {settings.SECRET} (or the same {settings.KEY_FILE} on every node)")

    def _not_the_hub(self, sel: selectors.BaseSelector, why: str) -> None:
        """What answered has not proven it is the hub: nothing it said counts; try again later."""
        self.impostors += 1
        log.debug("the answer at %s:%s is not the step's supervisor (%s): trying again", self.hub.host,
                  self.hub.aux_port, why)
        self._close(sel)
        self._backoff(time.monotonic())

    def _read(self, sel: selectors.BaseSelector) -> bool:
        """Handle what the hub sent; True when it just accepted us."""
        if self.conn is None:  # closed earlier in this batch of events
            return False
        lines, over = self.conn.read_lines()
        if over is not None:
            verdict = self.watch.hub_closed(self.joined)
            if verdict == "retry":
                self._close(sel)  # refused before joining: the hub may still be starting
                self._backoff(time.monotonic())
            elif verdict == "done":
                self._give_up(sel)  # it knows what it needs: a hub that has finished
            else:
                self._lose(sel, "it closed the connection")
            return False
        accepted = False
        for line in lines:
            parts = line.split()
            if not parts:
                continue
            if not self.verified:  # the hub proves itself first: before that, nothing counts
                answer = answer_challenge(self.key, self.tag, self.rank, self.nonce, parts)
                if answer is None or not self.conn.send(answer):
                    self._not_the_hub(sel, f"{parts[0][:20]!r} before proving itself" if answer is None
                                      else "the connection failed")
                    return False
                self.verified = True
                continue
            if not self._command(parts, line, sel):
                return False
            if parts[0] == "ok":
                accepted = True
        return accepted

    def _command(self, parts: List[str], line: str, sel: selectors.BaseSelector) -> bool:
        """One line from the proven hub; False when the connection was given up."""
        head = parts[0]
        if head == "ok" and len(parts) == 2 and not self.joined:
            delay = parse_delay(parts[1])
            if delay is not None:
                self.joined = True
                self.heartbeat = min(max(delay, 0.05), self.timing.silence / 2)
                return True
        elif head == "end" and len(parts) >= 2 and parse_status(parts[1]) is not None:
            why = line.split(None, 2)[2] if len(parts) > 2 else ""
            self._carry_out(sel, self.watch.end(parse_status(parts[1]) or 0, why), time.monotonic())
            return True
        elif parts in (["hang"], ["stacks"]):  # found hung (supervise.hang_watch): its stacks, then its end or not
            if self.command is not None:
                self.command.hang_kill(time.monotonic(), kill=parts == ["hang"])
            return True
        elif parts == ["ack"]:
            self.watch.ack()
            return True
        elif head == "restart" and len(parts) == 2 and parse_delay(parts[1]) is not None:
            self.watch.restart(parse_delay(parts[1]) or 0.0, time.monotonic())
            self._carry_out(sel, [], time.monotonic())  # its line
            return True
        elif head == "regroup" and len(parts) == 2 and parse_delay(parts[1]) is not None:
            running = self.command is not None and self.command.running
            self._carry_out(sel, self.watch.regroup_now(parse_delay(parts[1]) or 0.0, running), time.monotonic())
            return True
        elif head == "error":
            log.error("%s refused this task: %s", self.hub_name, " ".join(parts[1:])[:80])
            self._lose(sel, "refused")
            return False
        log.error("protocol error from %s: %r; closing the connection", self.hub_name, line[:80])
        self._lose(sel, "protocol error")
        return False
