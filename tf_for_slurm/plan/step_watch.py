"""The step's fate as a state machine: events in (joined, heard, exited, closed, time), actions out.

Pure (no sockets, no processes, no clock): the supervisor's hub feeds it what it sees and carries
out the `End` actions it returns, so every rule below is tested with plain data.

Rules (see step_rules for who is chief, trainer or server):
- the chief's command exits 0: trainers still running get `drain` seconds to finish by themselves
  (then they are ended with a warning); once none is left, every server is ended (status 0: with
  no trainer, as in ParameterServerStrategy, at once); the step's status is 0.
- any task's command exits non-zero, or its supervisor's connection closes without an exit
  status, or it is silent for `silence` seconds, or it never connects within `connect_grace`:
  every other task is ended with that status (LOST_STATUS, 69, when the task could not say: batch-step
  requeues it), the first failure's.
- with a restart policy (plan.restart_policy), a task whose command failed may instead be
  restarted in place: a `Restart` action for its rank; it is not settled, its state is
  'restarting' until its supervisor says its command runs again (`started`).  Where the strategy
  needs the whole group back (mwms; a pss ps or coordinator; a tf1 ps), a `Regroup` action tells
  every other running task to end its command and start it again; their exits meanwhile are
  expected, not failures.
- a task lost (its connection closed without an exit status, or silent) that the step can do
  without (plan.lost_task: a PSS worker while another runs, a TF1 non-chief worker, an evaluator)
  is settled as lost and the step goes on; the summary names it.  `require_all` restores the rule
  above for them (every worker required).
- a task that exits with a "checkpointed" status (42: TensorFlow's PreemptionCheckpointHandler
  after its agreed-step save) is a planned stop, not a failure: the other trainers get `drain`
  seconds to stop by themselves (they save the same step and exit 42 too); then every task is
  ended and the step's status is 42, which batch-step requeues.
- once every task has settled (exited, said bye, or its connection closed after being told to end)
  or `end_grace` seconds after the decision, the hub may exit with `status`.
"""

from __future__ import annotations

import logging
from typing import Dict, List, Mapping, Optional, Sequence, Set, Tuple

from tf_for_slurm.plan.failure_words import exit_words
from tf_for_slurm.plan.lost_task import go_on_without, going_on
from tf_for_slurm.plan.requeue import CHECKPOINTED_STATUSES, LOST_STATUS
from tf_for_slurm.plan.restart_policy import Decision, RestartPolicy, could_restart, decide, retryable
from tf_for_slurm.plan.step_actions import Action, End, Failure, Regroup, Restart
from tf_for_slurm.plan.strategy import StepRoles

__all__ = ["LOST_STATUS", "Action", "End", "Failure", "Regroup", "Restart", "StepWatch"]


class StepWatch:
    """What the hub knows about every task of the step, and what it decides."""

    def __init__(self, roles: StepRoles, ranks: Sequence[int], names: Mapping[int, str], *, local_rank: int,
                 now: float, drain: float = 30.0, silence: float = 10.0, connect_grace: float = 300.0,
                 end_grace: float = 5.0, policy: Optional[RestartPolicy] = None,
                 role_of: Optional[Mapping[int, str]] = None, require_all: bool = False):
        self.roles = roles
        self.require_all = require_all  # every worker required: a lost one ends the step (plan.lost_task)
        self.lost: Dict[int, Tuple[str, float]] = {}  # rank -> (why, when): lost, and the step went on
        self.policy = policy or RestartPolicy()
        self.role_of = dict(role_of or {})  # rank -> role (the restart policy's rules depend on it)
        self.restarts: Dict[int, int] = {}  # rank -> restarts decided for it
        self.restarting: Dict[int, float] = {}  # rank -> when its restart was decided (not running again yet)
        self.running_again: Dict[int, float] = {}  # rank -> when its command last ran again after a restart
        self.regrouping: Dict[int, float] = {}  # rank -> the delay: told to restart with its group, not yet ended
        self.step_restarts = 0  # restarts decided in the step (a group's counts once)
        self.ranks = tuple(ranks)
        self.names = dict(names)
        self.local_rank = local_rank
        self.drain, self.silence, self.connect_grace, self.end_grace = drain, silence, connect_grace, end_grace
        self.start = now
        self.joined: Set[int] = {local_rank}
        self.heard: Dict[int, float] = {}
        self.exited: Dict[int, int] = {}  # rank -> status of a command that exited by itself
        self._failure_recorded = False  # failure_to_record answered
        self.told: Dict[int, int] = {}  # rank -> status it was told to end with
        self.settled: Set[int] = set()  # nothing more expected from these ranks
        # kept up to date on every event, so no event costs O(tasks) (16k tasks report at once)
        self._open: Set[int] = set(self.ranks) - {local_rank}  # not settled, other than the hub's own
        self._training: Set[int] = set(roles.trainers)  # trainers whose command has not ended
        self._unjoined: Set[int] = set(self.ranks) - {local_rank}
        self.failure: Optional[Failure] = None
        self.chief_done_at: Optional[float] = None
        self.drain_deadline: Optional[float] = None
        self.decided_at: Optional[float] = None  # when the step's status became final
        self.notes: List[Tuple[int, str]] = []  # (logging level, message) for the caller to log
        self.changes = 0  # counts every change of a task's state (the status file is rewritten on it)
        self.first_exit: Optional[Tuple[int, int, float]] = None  # (rank, status, when): the summary's "first"
        self.planned_stop: Optional[Tuple[int, int]] = None  # (rank, status) of the first "checkpointed" exit

    # -- helpers ---------------------------------------------------------------------------
    def name(self, rank: int) -> str:
        return self.names.get(rank, f"rank {rank}")

    def _note(self, level: int, message: str) -> None:
        self.notes.append((level, message))

    def take_notes(self) -> List[Tuple[int, str]]:
        notes, self.notes = self.notes, []
        return notes

    def lost_ranks(self) -> List[int]:
        """The tasks lost without a word: those the step went on without, and the one whose loss ended it."""
        ended = self.failure is not None and self.failure.status == LOST_STATUS and self.failure.rank not in self.lost
        return sorted(self.lost) + ([self.failure.rank] if ended and self.failure is not None else [])

    def failure_to_record(self) -> Optional[Failure]:
        """The first failure, once, when the hub is the one to record it for a launcher (the launch
        report's first line names the origin, so the first to know writes it, before anyone hears):
        the hub's own command's failure, a task lost (it cannot say), or one a spoke left to the hub
        because restarts were on.  A spoke whose failure will not be retried records its own
        (plan.spoke_watch's NoteFailure) before it tells the hub: both sides ask could_restart."""
        failure = self.failure
        if failure is None or self._failure_recorded:
            return None
        self._failure_recorded = True
        mine = (failure.rank == self.local_rank or failure.rank not in self.exited
                or could_restart(self.policy, self.roles.strategy, self.role_of.get(failure.rank, "?"), False,
                                 failure.status))  # the spoke's own rule (supervise.spoke): it left this one to us
        return failure if mine else None

    @property
    def decided(self) -> bool:
        return self.decided_at is not None

    @property
    def status(self) -> int:
        return self.failure.status if self.failure is not None else 0

    def _running(self, ranks) -> Tuple[int, ...]:
        return tuple(r for r in ranks if r not in self.settled and r not in self.told)

    def _end(self, ranks, status: int) -> List[Action]:
        ranks = self._running(ranks)
        for r in ranks:
            self.told[r] = status
        self.changes += 1 if ranks else 0
        return [End(ranks, status)] if ranks else []

    def failure_line(self) -> str:
        """The first failure in one line, the task named as the hub's log names it; '' when none."""
        failure = self.failure
        if failure is None:
            return ""
        return f"{self.name(failure.rank)} {failure.reason}" + (f"; {failure.note}" if failure.note else "")

    def _fail(self, rank: int, status: int, reason: str, now: float, note: str = "") -> List[Action]:
        """`reason`: what happened to the task, without its name (see Failure)."""
        if self.decided:
            self._note(logging.WARNING, f"after the step's end was decided: {self.name(rank)} {reason}")
            return []
        self.failure = Failure(rank, status, reason, note)
        self.decided_at = now
        self._note(logging.ERROR, f"{self.failure_line()}: ending every task (step status {status})")
        return self._end(self.ranks, status)

    def _settle(self, rank: int) -> None:
        self.changes += 1
        self.settled.add(rank)
        self._open.discard(rank)
        self._training.discard(rank)

    def _pending_trainers(self) -> Tuple[int, ...]:
        return tuple(sorted(self._training))

    def _succeed(self, now: float) -> List[Action]:
        self.decided_at = now
        self._note(logging.INFO, "training is over: every training task has finished")
        return self._end(self.ranks, 0)

    # -- events ----------------------------------------------------------------------------
    def join(self, rank: int, now: float) -> List[Action]:
        """A task's supervisor connected.  A late joiner after the decision is told at once."""
        self.joined.add(rank)
        self._unjoined.discard(rank)
        self.changes += 1
        self.heard[rank] = now
        if rank in self.told and rank not in self.settled:  # told before it could hear it
            return [End((rank,), self.told[rank])]
        if self.decided and rank not in self.settled:
            return self._end([rank], self.status)
        if rank in self.regrouping:  # its group restarts: it could not hear it before
            return [Regroup((rank,), self.regrouping[rank], "its group restarts")]
        return []

    def hear(self, rank: int, now: float) -> None:
        self.heard[rank] = now

    def exit(self, rank: int, status: int, now: float) -> List[Action]:
        """A task's command exited by itself with `status`."""
        if rank in self.exited or rank in self.settled:
            return []
        why, note = "", ""
        if rank in self.regrouping and rank not in self.told:  # ended for its group's restart: expected
            delay = self.regrouping.pop(rank)
            return [Restart(rank, self.restarts.get(rank, 0), delay, "its group restarts")]
        if status != 0 and rank in self.restarting:  # it could not start again, or was stopped while waiting
            why = (f"failed ({exit_words(status)}) before its command could run again "
                   f"(restart {self.restarts.get(rank, 0)})")
        elif (status != 0 and status not in CHECKPOINTED_STATUSES and rank not in self.told and not self.decided
              and self.policy.enabled):
            decision = self._decide_restart(rank, status, now)
            if decision.restart:
                return self._restart(rank, decision, now)
            self.restarting.pop(rank, None)
            why = f"failed ({exit_words(status)})"
            if retryable(status, self.policy.retry_on):  # a failure restarts could undo: say why they did not
                note = f"not restarted: {decision.reason}"
            else:  # the program's own verdict: restarting would not help, the log says why
                self._note(logging.INFO, f"{self.name(rank)} not restarted: {decision.reason}")
        self.restarting.pop(rank, None)
        self.exited[rank] = status
        if self.first_exit is None:
            self.first_exit = (rank, status, now)
        self._settle(rank)
        if rank in self.told:  # it was being ended anyway: its status is not news
            return []
        if status in CHECKPOINTED_STATUSES and not why and not self.decided:
            return self._planned(rank, status, now)
        if status != 0:
            return self._fail(rank, status, why or f"failed ({exit_words(status)})", now, note)
        self._note(logging.INFO, f"{self.name(rank)} finished (status 0)")
        if self.planned_stop is not None and not self.decided:
            return self._planned(rank, status, now)
        if rank == self.roles.chief_rank:
            self.chief_done_at = now
            pending = self._pending_trainers()
            if not pending:
                return self._succeed(now)
            self.drain_deadline = now + self.drain  # servers keep serving the trainers meanwhile
            self._note(logging.INFO, f"the chief is done: waiting up to {self.drain:g} s for "
                                     f"{len(pending)} training tasks to finish")
            return []
        if self.chief_done_at is not None and not self.decided and not self._training:
            return self._succeed(now)
        return []

    def _planned(self, rank: int, status: int, now: float) -> List[Action]:
        """A trainer stopped after a checkpoint (or finished during such a stop): end the step with the
        checkpointed status once no trainer runs, or after `drain` (tick)."""
        if self.planned_stop is None:
            self.planned_stop = (rank, status)
            self.drain_deadline = now + self.drain
            self._note(logging.INFO, f"{self.name(rank)} exited with status {status}: checkpointed, a planned stop "
                                     f"(PreemptionCheckpointHandler); waiting up to {self.drain:g} s for the other "
                                     "training tasks to stop by themselves")
        if self._stopping_trainers():
            return []
        return self._end_planned(now)

    def _stopping_trainers(self) -> Tuple[int, ...]:
        """The trainers, the chief included, whose command still runs (a planned stop waits for them)."""
        chief = self.roles.chief_rank
        running = set(self._training)
        if chief is not None and chief not in self.settled:
            running.add(chief)
        return tuple(sorted(running))

    def _end_planned(self, now: float) -> List[Action]:
        assert self.planned_stop is not None
        rank, status = self.planned_stop
        self.failure = Failure(rank, status, f"checkpointed and stopped (status {status}): a planned stop")
        self.decided_at = now
        self._note(logging.INFO, f"every training task has stopped: ending the step with status {status}")
        return self._end(self.ranks, status)

    def _restart(self, rank: int, decision: Decision, now: float) -> List[Action]:
        """Restart `rank` (and, for a group restart, every other task still running) in place."""
        self.step_restarts += 1
        group = tuple(r for r in self.ranks if r != rank and r not in self.settled and r not in self.told
                      and r not in self.restarting) if decision.group else ()
        for r in (rank, *group):
            self.restarts[r] = self.restarts.get(r, 0) + 1
            self.restarting[r] = now
            self.running_again.pop(r, None)
        self.regrouping.update((r, decision.delay) for r in group)
        self.changes += 1
        self._note(logging.WARNING, decision.reason)
        actions: List[Action] = [Restart(rank, self.restarts[rank], decision.delay, decision.reason)]
        return actions + [Regroup(group, decision.delay, decision.reason)] if group else actions

    def _decide_restart(self, rank: int, status: int, now: float) -> Decision:
        since = now - self.running_again[rank] if rank in self.running_again else None
        return decide(self.policy, name=self.name(rank), strategy=self.roles.strategy,
                      role=self.role_of.get(rank, "?"), is_chief=rank == self.roles.chief_rank, status=status,
                      step_restarts=self.step_restarts, task_restarts=self.restarts.get(rank, 0),
                      since_restart=since)

    def started(self, rank: int, now: float) -> None:
        """A restarted task's supervisor started its command again."""
        if rank != self.local_rank:  # the hub's own task is never silent
            self.heard[rank] = now
        self.regrouping.pop(rank, None)
        if rank in self.restarting:
            took = now - self.restarting.pop(rank)
            self.running_again[rank] = now
            self.changes += 1
            self._note(logging.INFO, f"{self.name(rank)} is running again, {took:.1f} s after its failure "
                                     f"(restart {self.restarts.get(rank, 0)})")

    def stop_restarts(self, why: str) -> None:
        """The step is being stopped (scancel, srun; `why`, in words): no restart from now on; a task
        waiting for one fails when its supervisor reports its exit.  Said only when it changes
        something: restarts were on and the step's end was not already decided."""
        if self.policy.enabled and not self.decided:
            self._note(logging.WARNING, f"the step is being stopped: {why}; no task is restarted from now on")
        self.policy = RestartPolicy()
        self.regrouping.clear()

    def bye(self, rank: int) -> None:
        """A task told to end has ended its command."""
        self._settle(rank)

    def closed(self, rank: int, now: float) -> List[Action]:
        """A task's connection closed (its supervisor exited, was killed, or its node failed)."""
        if rank in self.settled:
            return []
        if rank in self.told:
            self._settle(rank)
            return []
        return self._lose(rank, "was lost (its supervisor went away without an exit status: killed, or its node "
                                "failed)", now, closed=True)

    def _lose(self, rank: int, reason: str, now: float, closed: bool) -> List[Action]:
        """`rank` is gone without a word: the step goes on without it where it can (plan.lost_task),
        else it fails with the lost status (a silent task, not `closed`, is told to end too: a hung
        one may wake)."""
        role = self.role_of.get(rank, "?")
        same = [r for r in self.ranks if self.role_of.get(r) == role]
        others = sum(1 for r in same if r != rank and r not in self.settled)
        why = None if self.require_all or self.decided or rank == self.local_rank else \
            go_on_without(self.roles.strategy, role, rank == self.roles.chief_rank, others)
        if why is None:
            if closed:
                self._settle(rank)
            return self._fail(rank, LOST_STATUS, reason, now)
        self._settle(rank)
        self.restarting.pop(rank, None)
        self.regrouping.pop(rank, None)
        self.lost[rank] = (reason, now)
        left = sum(1 for r in same if r not in self.lost)
        self._note(logging.WARNING, f"{self.name(rank)} {reason}: {going_on(why, left, len(same), role)}")
        # a silent one may only be cut off: if it hears, it ends its command and leaves with 0
        told: List[Action] = [] if closed else [End((rank,), 0)]
        if self.chief_done_at is not None and not self.decided and not self._training:
            return told + self._succeed(now)
        return told

    def tick(self, now: float) -> List[Action]:
        """Time passes: silence, connection grace and the drain period."""
        actions: List[Action] = []
        if not self.decided:
            silent = [(rank, now - last) for rank, last in self.heard.items()
                      if rank not in self.settled and now - last > self.silence]
            for rank, quiet in silent:
                actions += self._lose(rank, f"was lost (no word from its supervisor for {quiet:.1f} s: node "
                                            "unreachable or hung)", now, closed=False)
                if self.decided:
                    return actions
            if now - self.start > self.connect_grace:
                missing = sorted(r for r in self._unjoined if r not in self.settled)
                if missing:
                    more = f" (nor did {len(missing) - 1} more)" if len(missing) > 1 else ""
                    return self._fail(missing[0], LOST_STATUS,
                                      f"never connected within {self.connect_grace:g} s{more}", now)
            if self.drain_deadline is not None and now >= self.drain_deadline and self.planned_stop is not None:
                first = self.name(self.planned_stop[0])
                for r in self._stopping_trainers():
                    self._note(logging.WARNING, f"{self.name(r)} still running {self.drain:g} s after {first} "
                                                "checkpointed and stopped: ending it")
                return self._end_planned(now)
            if self.drain_deadline is not None and now >= self.drain_deadline:
                pending = self._pending_trainers()
                for r in pending:
                    self._note(logging.WARNING, f"{self.name(r)} still running {self.drain:g} s after the chief "
                                                "finished: ending it")
                self.decided_at = now
                actions += self._end(self.ranks, 0)
        return actions

    def finished(self, now: float) -> bool:
        """True when the hub can exit: the decision is made and every task has settled (or the
        end grace is over)."""
        if not self.decided or self.decided_at is None:
            return False
        return not self._open or now - self.decided_at >= self.end_grace

    def unsettled(self) -> List[int]:
        return sorted(self._open)
