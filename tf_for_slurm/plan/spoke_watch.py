"""A spoke's decisions as a state machine: events in (its command's status, the hub's words, a
stop signal, time), actions out.

Pure (no sockets, no processes, no clock): every other task's supervisor (supervise/spoke.py)
feeds it what it sees and carries out the actions it returns, so each rule is tested with plain
data, as plan.step_watch is for the hub.

Rules:
- the command exits by itself: once joined, report `exit S`; the hub answers `ack` (this task
  then exits with S) or `restart D` (the command starts again D s later, and `started` says so).
  No answer within `report_wait`: exit with S all the same; never joined within `connect_grace`
  (or the hub given up): exit with S, the hub never told.
- the hub says `end S`: end the command; once it has ended, report `bye <its status>` and exit
  with S once acknowledged (or after `report_wait`, or with the connection gone).
- the hub is lost (its connection closed while nothing was reported, refused, a protocol error,
  not reachable within `connect_grace`): end the command, exit with LOST_STATUS once it ended.
- the hub says `regroup D`: end the command (not a failure: nothing is reported) and start it
  again D s after it ended.
- a stop signal (scancel, srun) that came while waiting to start the command again: no restart;
  the command's status stands, or 128+signal when it had not ended.
"""

from __future__ import annotations

import logging
from typing import Callable, List, NamedTuple, Optional, Tuple, Union

from tf_for_slurm.plan.requeue import LOST_STATUS

__all__ = ["END_COMMAND", "START_AGAIN", "Action", "Finish", "Link", "NoteFailure", "Send", "SpokeWatch"]


class Send(NamedTuple):
    """Send this line (the report of `status`) to the hub; then tell the watch whether it went
    (`sent_result`)."""

    line: str
    status: int


class Finish(NamedTuple):
    """This task's supervisor exits with `status`."""

    status: int


class NoteFailure(NamedTuple):
    """Tell the launcher (tf-slurm local) this task failed first with `status`."""

    status: int


class _Command(NamedTuple):
    what: str


END_COMMAND = _Command("end")  # end the command (SIGTERM, then SIGKILL after the kill grace)
START_AGAIN = _Command("start")  # start the command again; then tell the watch (`started_again`)

Action = Union[Send, Finish, NoteFailure, _Command]


class Link(NamedTuple):
    """The connection to the hub as the spoke sees it."""

    connected: bool  # a connection is open
    joined: bool  # the hub proved itself and said ok
    given_up: bool  # no more connection attempts
    unreachable_note: str = ""  # why it may never have been reached (for the one line)


class SpokeWatch:
    """One spoke's decisions; `notes` holds (level, message) lines for the spoke to log."""

    def __init__(self, *, start: float, report_wait: float, connect_grace: float,
                 retried: Callable[[int], bool], hub_name: str = "the step's supervisor"):
        self.start, self.report_wait, self.connect_grace = start, report_wait, connect_grace
        self.retried = retried  # whether the hub may answer a failure with `restart` (the launcher then hears it there)
        self.hub_name = hub_name
        self.told_status: Optional[int] = None  # the step's status the hub told this task to end with
        self.lost = False  # the hub went away (or never came)
        self.sent = False  # exit/bye sent, its answer awaited
        self.acked = False
        self.ack_by = 0.0
        self.noted = False  # the command's last exit was seen (logged, noted for the launcher)
        self.restart_at: Optional[float] = None  # the command starts again then
        self.regroup: Optional[float] = None  # the command ends, then starts again this long after
        self.stopped: Optional[int] = None  # 128+signal: stopped while waiting to start again
        self.failed_at = start
        self.restarts = 0
        self.notes: List[Tuple[int, str]] = []

    def take_notes(self) -> List[Tuple[int, str]]:
        notes, self.notes = self.notes, []
        return notes

    # -- the hub's words (from a proven hub only) --------------------------------------------
    def end(self, status: int, why: str) -> List[Action]:
        if self.told_status is not None or self.lost:
            return []
        self.restart_at = self.regroup = None  # told to end while waiting: the old status is reported
        self.told_status = status
        why = why or "told by the step's supervisor"
        self.notes.append((logging.INFO if status == 0 else logging.ERROR, f"ending this task: {why} "
                                                                           f"(step status {status})"))
        return [END_COMMAND]

    def ack(self) -> None:
        self.acked = True

    def restart(self, delay: float, now: float) -> None:
        """The hub's answer to our `exit`: start the command again `delay` s from now."""
        if self.sent and not self.acked and self.told_status is None and not self.lost:
            self.notes.append((logging.WARNING, f"{self.hub_name} restarts this task's command in {delay:g} s"))
            self.restart_at = now + delay
            self.sent = False  # the answer came: a new report is due when the next command ends

    def regroup_now(self, delay: float, running: bool) -> List[Action]:
        # not when its own exit is on its way: the hub answers that one with `restart`
        if self.told_status is not None or self.lost or self.sent or self.restart_at is not None:
            return []
        self.notes.append((logging.WARNING, f"{self.hub_name} restarts every task: ending this task's command, "
                                            f"to start it again {delay:g} s after it ends"))
        self.regroup = delay
        return [END_COMMAND] if running else []

    def lose(self, why: str) -> List[Action]:
        """The hub is gone (or never came): end the command; this task exits with LOST_STATUS."""
        self.restart_at = None
        if self.told_status is not None or self.lost:
            return []
        self.lost = True
        self.notes.append((logging.ERROR, f"lost {self.hub_name} ({why}): ending this task"))
        return [END_COMMAND]

    def hub_closed(self, joined: bool) -> str:
        """The hub's connection closed: 'retry' (refused before joining: it may still be starting),
        'done' (it knows what it needs: a hub that has finished), or 'lost'."""
        if not joined and not self.sent and self.told_status is None:
            return "retry"
        if self.sent or self.told_status is not None:
            return "done"
        return "lost"

    # -- the command -------------------------------------------------------------------------
    def started_again(self, ok: bool, now: float) -> None:
        """The command was started again (`ok`: it runs)."""
        self.restart_at = None
        self.restarts += 1
        self.sent = self.acked = self.noted = False
        if ok:
            self.notes.append((logging.WARNING, f"command started again (restart {self.restarts} of this task), "
                                                f"{now - self.failed_at:.1f} s after it failed"))

    def waiting(self) -> bool:
        """The command is to start again (a restart or the group's): keep heart-beating."""
        return self.restart_at is not None or self.regroup is not None

    def turn(self, now: float, status: Optional[int], stop: Optional[int], link: Link) -> List[Action]:
        """One look: `status` the command's (None while it runs), `stop` a stopping signal received
        since the command last started (None: none)."""
        if self.waiting() and stop is not None:
            # stopped (scancel, srun) while waiting: the signal is the command's answer
            self.notes.append((logging.WARNING, f"signal {stop} while waiting to restart the command: "
                                                "not restarting it"))
            self.restart_at = self.regroup = None
            self.stopped = 128 + stop if status is not None else None
        if status is not None and self.regroup is not None:  # ended for its group's restart
            self.restart_at, self.regroup, self.failed_at = now + self.regroup, None, now
        if self.stopped is not None:
            status = self.stopped
        if status is not None and self.restart_at is not None:
            return [START_AGAIN] if now >= self.restart_at else []
        if status is None:
            if not link.joined and not self.lost and now - self.start > self.connect_grace:
                return self.lose(f"not reachable within {self.connect_grace:g} s{link.unreachable_note}")
            return []
        actions: List[Action] = []
        if not self.noted and self.told_status is None and not self.lost:
            self.noted = True
            self.notes.append((logging.INFO, f"command exited with status {status}"))
            if status != 0 and not self.retried(status):
                actions.append(NoteFailure(status))  # else the hub notes it
            self.failed_at = now
        return actions + self._finished(status, now, link)

    def sent_result(self, ok: bool, now: float, status: int) -> List[Action]:
        """What became of the last Send (of `exit status` or `bye status`)."""
        self.sent, self.ack_by = ok, now + self.report_wait
        if ok:
            return []
        if self.told_status is not None:
            return [Finish(self.told_status)]
        self.notes.append((logging.WARNING, f"could not tell {self.hub_name} this task's status {status} "
                                            "(connection failed)"))
        return [Finish(status)]

    def _finished(self, status: int, now: float, link: Link) -> List[Action]:
        """The command has ended: report it, or the status to exit with once the hub knows."""
        if self.told_status is not None or self.lost:
            final = self.told_status if self.told_status is not None else LOST_STATUS
            if self.told_status is not None and link.connected and link.joined and not self.sent:
                return [Send(f"bye {status}", status)]
            if not link.connected or self.acked or not self.sent or now >= self.ack_by:
                return [Finish(final)]
            return []
        if link.connected and link.joined and not self.sent:
            return [Send(f"exit {status}", status)]
        if self.acked:
            return [Finish(status)]
        if self.sent and (not link.connected or now >= self.ack_by):
            if link.connected:
                self.notes.append((logging.WARNING, f"no acknowledgement from {self.hub_name} within "
                                                    f"{self.report_wait:g} s"))
            return [Finish(status)]
        if not self.sent and (link.given_up or now - self.start > self.connect_grace):
            self.notes.append((logging.ERROR, f"could not tell {self.hub_name} this task's status {status}: "
                                              "never reached it"))
            return [Finish(status)]
        return []
