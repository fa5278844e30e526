"""The chief's supervisor under `tf-slurm exec`: runs the chief's command and decides the step's fate.

Why the chief's: its end is training's end in every strategy, and the hub must outlive the other
tasks' commands to tell them so.  It listens on the chief's auxiliary port; every other task's
supervisor (spoke.py) keeps ONE connection to it.  What it hears goes into a `StepWatch`
(plan/step_watch.py), which decides; the hub sends `end <status>` to the tasks it says to end.
"""

from __future__ import annotations

import logging
import selectors
import socket
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence

from tf_for_slurm.errors import PlanError, UsageError, bad_value
from tf_for_slurm.host import job_folder, settings
from tf_for_slurm.plan.cluster import ClusterPlan
from tf_for_slurm.plan.failure_words import log_explains, stop_words
from tf_for_slurm.plan.restart_policy import RestartPolicy
from tf_for_slurm.plan.step_status import snapshot, summary_lines
from tf_for_slurm.plan.step_watch import Action, Regroup, Restart, StepWatch
from tf_for_slurm.plan.strategy import StepRoles
from tf_for_slurm.supervise.child_process import LOGGER, SUMMARY_LOGGER, ForwardSignals, Wake
from tf_for_slurm.supervise.handshake import MAX_PENDING, Gate
from tf_for_slurm.supervise.hang_watch import HangWatch
from tf_for_slurm.supervise.progress_board import ProgressBoard
from tf_for_slurm.supervise.start_wait import StartWaitWatch
from tf_for_slurm.supervise.status_file import StatusFile
from tf_for_slurm.supervise.task_command import NOT_RUN, TaskCommand
from tf_for_slurm.supervise.wire import (
    Conn,
    Timing,
    heartbeat_interval,
    listen,
    note_failure,
    parse_status,
    raise_fd_limit,
    read_heartbeats,
)

log = logging.getLogger(LOGGER)
summary = logging.getLogger(SUMMARY_LOGGER)


class Hub:
    """The chief's supervisor: runs the chief's command and decides the step's fate."""

    def __init__(self, plan: ClusterPlan, roles: StepRoles, argv: Sequence[str], env: Mapping[str, str],
                 timing: Timing, launch_report: Optional[str] = None, status_file: Optional[str] = None,
                 policy: Optional[RestartPolicy] = None, *, key: bytes, require_all: bool = False):
        self.plan, self.roles, self.argv, self.env, self.timing = plan, roles, argv, env, timing
        self.key = key  # the step's key (host/step_secret.py): a peer proves it holds it before it counts
        self.policy = policy or RestartPolicy()
        self.require_all = require_all  # a lost worker ends the step (plan.lost_task)
        self.launch_report = launch_report
        me = plan.me
        if me.rank != roles.chief_rank:
            raise UsageError(bad_value("rank", me.rank, f"the chief's rank {roles.chief_rank} for the hub"))
        if me.aux_port is None:
            raise PlanError(f"aux_port of {me.role}:{me.index} (rank {me.rank}) is None: expected a second port "
                            "for the step's supervisor; reserve 2 ports per task (srun --resv-ports) or set "
                            f"{settings.BASE_PORT}")
        self.rank: int = me.rank
        self.port: int = me.aux_port
        self.tag = f"{plan.job_id}.{plan.step_id}"
        self.names = {t.rank: f"{t.role} {t.index} (rank {t.rank}, {t.node})" for t in plan.tasks}
        self.conns: Dict[int, Conn] = {}  # rank -> joined connection
        self.gate = Gate(key, self.tag, plan.size, self.rank)  # connections not yet proven
        self.command: Optional[TaskCommand] = None  # the chief's command (set in run)
        self.reported = False  # its last exit was reported to the watch
        self.watch: Optional[StepWatch] = None
        self.heartbeat = heartbeat_interval(plan.size, timing)
        self.status = StatusFile(status_file) if status_file else None
        self.board = ProgressBoard.from_file(status_file, roles.strategy)  # the training's progress, earlier runs
        self.hangs = HangWatch(timing.hang_after, timing.hang_factor, plan.tasks, roles.strategy, roles.chief_rank,
                               self.names)
        self.starts = StartWaitWatch(timing.start_wait, timing.start_fault, plan.tasks, roles.strategy,
                                     roles.chief_rank, self.names, self.hangs.record)  # a run that never trains
        # the chief's own restarts: its command starts again at restart_at; regroup: the delay once
        # the command, ended for its group's restart, has exited
        self.restart_at: Optional[float] = None
        self.regroup: Optional[float] = None
        self.stopping = False  # a stopping signal reached this supervisor: nothing restarts any more
        self.sigs: Optional[ForwardSignals] = None

    def run(self) -> int:
        """Supervise the step until it is over; the status this task (and the step) ends with."""
        plan = self.plan
        raise_fd_limit(2 * plan.size + MAX_PENDING)  # joined, and as many still proving themselves
        server = listen(self.port, self.names[self.rank])
        wake, sel = Wake(), selectors.DefaultSelector()
        sel.register(server, selectors.EVENT_READ, "listen")
        sel.register(wake.r, selectors.EVENT_READ, "wake")
        watch = self.watch = self._new_watch()
        log.info("supervising %d tasks from %s, port %d", plan.size, self.names[self.rank], self.port)
        try:
            with ForwardSignals(wake) as sigs:
                self.sigs = sigs
                self.command = TaskCommand(self.argv, self.env, wake, sigs, self.timing.progress_deadline,
                                           self.timing.kill_grace, " (the chief's)")
                if not self.command.start(time.monotonic()):
                    self._apply(watch.exit(self.rank, NOT_RUN, time.monotonic()))
                    self.reported = True
                self._loop(server, sel, wake, watch, sigs)
        finally:
            if self.command is not None:
                self.command.close()
            for conn in self.conns.values():
                conn.sock.close()
            self.gate.close()
            sel.close()
            server.close()
            wake.close()
        return self._finish(watch)

    def _new_watch(self) -> StepWatch:
        timing, plan = self.timing, self.plan
        return StepWatch(self.roles, [t.rank for t in plan.tasks], self.names, local_rank=self.rank,
                         now=time.monotonic(), drain=timing.drain, silence=timing.silence,
                         connect_grace=timing.connect_grace, end_grace=timing.end_grace,
                         policy=self.policy, role_of={t.rank: t.role for t in plan.tasks},
                         require_all=self.require_all)

    def _loop(self, server: socket.socket, sel: selectors.BaseSelector, wake: Wake, watch: StepWatch,
              sigs: ForwardSignals) -> None:
        """Until the step is over: what the tasks say, our own command, the watch's clock."""
        assert self.command is not None
        next_tick = 0.0
        while True:
            now = time.monotonic()
            resume = self.gate.resume(server, sel, now)  # accepting paused: until when
            events = sel.select(max(0.0, self._next_wakeup(now, next_tick, resume) - now))
            self._handle(events, server, sel, wake, watch, time.monotonic())
            now = time.monotonic()
            if not self.stopping and sigs.stop_since(0) is not None:
                self._stop_restarts(watch, sigs.stop_since(0), now)
            self.board.add(self.rank, self.command.take_report(), time.time())  # its last one before its exit
            self._own_command(watch, now)
            if now >= next_tick:
                self._apply(watch.tick(now))
                self.gate.expire(sel, server, now, lambda c: self._drop(c, sel))
                next_tick = now + 0.5
            self._log(watch)
            self.command.tick(now)
            for rank, kill in self.hangs.look(self.board.tracks, watch, time.time(), now):
                self._end_hung(rank, now, kill)
            self.board.add_phase(self.rank, self.command.take_phase())
            for rank, kill in self.starts.look(self.board.current_phases(), self.board.tracks, watch, time.time(), now):
                self._end_hung(rank, now, kill)
            self._write_status(watch, now)
            if watch.finished(now) and not self.command.running:
                return

    def _handle(self, events: List[Any], server: socket.socket, sel: selectors.BaseSelector, wake: Wake,
                watch: StepWatch, now: float) -> None:
        """One batch of events (one clock read for it: heartbeats are most of them)."""
        heard = watch.heard
        accept = False
        for key, _mask in events:
            conn = key.data
            if conn == "listen":
                accept = True  # after the reads: every connection is read once before it may be pushed out
            elif conn == "wake":
                wake.drain()
            elif conn.rank is not None and not conn.inbuf and read_heartbeats(conn):
                heard[conn.rank] = now  # the common case, kept cheap
            else:
                self._serve(conn, sel, watch)
        if accept:
            self.gate.accept(server, sel, now, lambda c: self._drop(c, sel))

    def _own_command(self, watch: StepWatch, now: float) -> None:
        """The chief's command: its exit reported to the watch once; started again when due."""
        cmd = self.command
        assert cmd is not None
        if cmd.settled is not None and not self.reported:  # its last report taken (_loop)
            self.reported = True
            if self.regroup is not None:  # ended for its group's restart
                self.restart_at, self.regroup = now + self.regroup, None
            elif cmd.ending and self.rank in watch.told:
                watch.bye(self.rank)
            else:
                self._apply(watch.exit(self.rank, cmd.settled, now))
        if self.restart_at is not None and now >= self.restart_at:
            self.restart_at = None
            if cmd.start(now):  # the same command and environment, once the old one's leftovers are gone
                log.warning("the chief's command started again")
                watch.started(self.rank, now)
                self.board.phases.pop(self.rank, None)
                self.reported = False
            else:
                self.reported = True
                self._apply(watch.exit(self.rank, NOT_RUN, now))

    def _end_hung(self, rank: int, now: float, kill: bool) -> None:
        """A hung task (supervise.hang_watch): its stacks into its log, its end if `kill` (then the restart policy)."""
        conn = self.conns.get(rank)
        if rank == self.rank and self.command is not None:
            self.command.hang_kill(now, kill)
        elif conn is not None:
            conn.send("hang" if kill else "stacks")

    def _finish(self, watch: StepWatch) -> int:
        """The step's end: who never confirmed it, the final status file and summary; the status."""
        if watch.unsettled():
            log.warning("%d tasks had not confirmed their end: %s", len(watch.unsettled()),
                        ", ".join(self.names[r] for r in watch.unsettled()[:5]))
        final = self._snapshot(watch, over=True, detail=self._failure_detail(watch))
        self._write_status(watch, time.monotonic(), final)
        for line in summary_lines(final):
            summary.info("%s", line)
        return watch.status

    def _failure_detail(self, watch: StepWatch) -> Optional[str]:
        """What the first failing task said (its fix line or error), from its log in the job folder
        when the step has one (`tf-slurm submit`, the templates); else None."""
        failure, folder = watch.failure, settings.text(self.env, settings.JOB_DIR)
        if failure is not None and failure.rank in self.starts.victims and self.starts.line:
            return f"start-up: {self.starts.line}"  # ended for a start-up that never came to a step
        if failure is None or not folder or not log_explains(failure.status):
            return None
        return job_folder.failure_detail(folder, failure.rank)

    def _snapshot(self, watch: StepWatch, over: bool = False, detail: Optional[str] = None) -> Dict[str, Any]:
        wall = time.time()
        return snapshot(self.plan.tasks, watch, self.roles, job=self.plan.job_id, step=self.plan.step_id,
                        mono=time.monotonic(), wall=wall, over=over, detail=detail, progress=self.board.to_json(wall),
                        hangs=self.hangs.record, start=self.starts.to_json(),
                        left_out=int(dict(self.plan.details).get("workers_left_out", 0)))

    def _write_status(self, watch: StepWatch, now: float, final: Optional[Dict[str, Any]] = None) -> None:
        if self.status is not None:
            self.status.update(now, watch.changes, lambda: final or self._snapshot(watch),  # progress: each refresh
                               force=final is not None)

    def _next_wakeup(self, now: float, next_tick: float, resume: Optional[float]) -> float:
        """When the loop must look again, whatever the tasks say: the watch's tick, a kill grace's
        end, a progress look, our command's restart, the end of a pause in accepting."""
        assert self.command is not None
        times = [next_tick, now + 0.5, *self.command.deadlines()]
        if self.restart_at is not None:
            times.append(self.restart_at)
        if resume is not None:
            times.append(resume)
        return min(times)

    def _stop_restarts(self, watch: StepWatch, signo: Optional[int], now: float) -> None:
        """scancel, srun or Ctrl-C is stopping the step: no restart from now on; a restart of the
        chief's own command that was due is not made, and its failure stands."""
        self.stopping = True
        watch.stop_restarts(stop_words(signo))
        if self.restart_at is not None or self.regroup is not None:
            self.restart_at = self.regroup = None
            cmd = self.command
            if cmd is not None and cmd.child is not None and cmd.status is not None:
                self._apply(watch.exit(self.rank, cmd.status, now))

    def _log(self, watch: StepWatch) -> None:
        for level, message in watch.take_notes():
            log.log(level, message)

    def _drop(self, conn: Conn, sel: selectors.BaseSelector) -> None:
        try:
            sel.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        conn.sock.close()
        self.gate.forget(conn)
        if conn.rank is not None and self.conns.get(conn.rank) is conn:
            del self.conns[conn.rank]

    def _serve(self, conn: Conn, sel: selectors.BaseSelector, watch: StepWatch) -> None:
        lines, over = conn.read_lines()
        now = time.monotonic()
        if over is not None:
            rank = conn.rank
            if over == "overlong line":  # not the protocol, whoever sent it
                if rank is None:
                    self.gate.refusals.refused(conn.peer, over, now)
                else:
                    log.error("protocol error from %s: %s; dropping its connection", self.names[rank], over)
            self._drop(conn, sel)
            if rank is not None:
                self._apply(watch.closed(rank, now))
            return
        for line in lines:
            parts = line.split()
            if not parts:
                continue
            if conn.rank is None:
                if not self._handshake(conn, parts, sel, watch, now):
                    return
                continue
            watch.hear(conn.rank, now)
            if parts == ["hb"]:
                continue
            if parts == ["started"]:
                watch.started(conn.rank, now)
                self.board.phases.pop(conn.rank, None)  # its new run's phases come
                continue
            if self.board.hear_line(conn.rank, parts, time.time()):  # a report; before an exit or bye, its last
                continue
            status = parse_status(parts[1]) if len(parts) == 2 and parts[0] in ("exit", "bye") else None
            if status is None:  # our own spokes send nothing else: a bug, not a message
                log.error("protocol error from %s: %r; dropping its connection", self.names[conn.rank], line[:80])
                rank = conn.rank
                self._drop(conn, sel)
                self._apply(watch.closed(rank, now))
                return
            if parts[0] == "exit":
                actions = watch.exit(conn.rank, status, now)
                again = [a for a in actions if isinstance(a, Restart) and a.rank == conn.rank]
                self._apply(actions)  # the first failure is noted before the task itself can exit
                ok = conn.send(f"restart {again[0].delay:g}" if again else "ack")
            else:
                ok = conn.send("ack")
                log.debug("%s ended its command (status %d)", self.names[conn.rank], status)
                watch.bye(conn.rank)
            if not ok:
                rank = conn.rank
                self._drop(conn, sel)
                self._apply(watch.closed(rank, now))
                return

    def _handshake(self, conn: Conn, parts: List[str], sel: selectors.BaseSelector, watch: StepWatch,
                   now: float) -> bool:
        """A line of a connection not yet proven (handshake.Gate); False when it was dropped."""
        verdict = self.gate.line(conn, parts, now)
        if verdict is True:
            return True
        if verdict is False:
            self._drop(conn, sel)
            return False
        rank = int(verdict)
        if rank in self.conns:  # proven, so it is ours: a second supervisor for one task
            log.warning("refused a second connection of %s (duplicate-task)", self.names[rank])
            conn.send("error duplicate-task")
            self._drop(conn, sel)
            return False
        conn.rank = rank
        self.conns[rank] = conn
        conn.send(f"ok {self.heartbeat:g}")
        log.debug("%s joined", self.names[rank])
        self._apply(watch.join(rank, now))
        return True

    def _reason(self, status: int, rank: int) -> str:
        """One line for the ended task's log: why it is ended (ASCII, no newline)."""
        watch = self.watch
        if watch is not None and rank in watch.lost:  # cut off for its silence: the step went on without it
            text = f"the step went on without this task: it {watch.lost[rank][0]}"
        elif watch is not None and watch.failure is not None and status != 0:
            text = watch.failure_line()
        else:
            text = "training is over"
        return text.encode("ascii", "replace").decode()[:200]

    def _apply(self, actions: List[Action]) -> None:
        watch = self.watch
        failure = watch.failure_to_record() if watch is not None else None
        if failure is not None:  # before anyone hears of it
            note_failure(self.launch_report, failure.rank, failure.status)
        for action in actions:
            if isinstance(action, Restart):  # another task's: answered on its own connection (_serve)
                if action.rank == self.rank:
                    self.restart_at = time.monotonic() + action.delay
                continue
            if isinstance(action, Regroup):
                for rank in action.ranks:
                    if rank == self.rank:
                        self.regroup = action.delay
                        if self.command is not None:
                            self.command.end()
                    elif rank in self.conns:
                        self.conns[rank].send(f"regroup {action.delay:g}")
                continue
            for rank in action.ranks:
                if rank == self.plan.my_rank:
                    self.restart_at = self.regroup = None  # the step ends: no restart of our own
                    if self.command is not None:
                        self.command.end()
                    continue
                conn = self.conns.get(rank)
                if conn is not None:
                    conn.send(f"end {action.status} {self._reason(action.status, rank)}")
