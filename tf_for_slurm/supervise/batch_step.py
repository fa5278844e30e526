"""`tf-slurm batch-step -- srun ...`: run a batch job's training step, pass it the time-limit
warning at the right moment, and requeue the job when the warning stopped training early.

Why a wrapper and not more bash: the templates need the same logic (signal timing, the first
failing task's status, the requeue decision), and Python can be tested.  The decisions are pure:
when a signal is passed on (`plan.stop_relay.StopRelay`) and whether the job is requeued
(`plan.requeue.decide`).  This module wires them to small single-purpose parts: srun as a child
(`step_command`), the warning file the batch shell's trap writes (`warn_file`: `--signal=B:URG@N`
signals only that shell), Slurm's answers (`slurm_job`: squeue, scontrol), timers, and batch.json
(`batch_record`).

- SIGUSR1 (the warning): Slurm may send it up to 60 s early, so the step is told only
  when `--warn-margin` seconds are left before the job's EndTime (at once if fewer are left or
  EndTime is unknown); the tasks stop at their next step, the chief checkpoints, the ps exit 0.
- No warning by then (Slurm's is lost when sent before the batch shell runs, e.g. as a requeued run
  starts): the step is told all the same, --warn-margin s before EndTime, as if warned.
- SIGUSR2 (`scancel --batch --signal=USR2`: stop, checkpoint and requeue now): passed on at once.
- SIGTERM (scancel, preemption): passed on at once; no requeue follows.
- A step told to stop that still runs DECIDE_BEFORE_END s before the end: decided without it (a
  requeue ends it; else it gets SIGTERM), or Slurm would end the job TIMEOUT, never requeued.
- srun still running LINGER s after the step's supervisor wrote the step's end to its status file
  (`plan.srun_after_end`: with `srun --no-kill`, srun waits for a lost node's tasks until Slurm
  marks the node down): srun is ended, and the hub's status is the step's.
- When the step ended: `plan.requeue.decide` with the checkpoint's step; a requeue runs
  `scontrol requeue $SLURM_JOB_ID` (the job must be requeueable: `#SBATCH --requeue`).
The printed lines say when each thing happened, so the delays can be read from the job's log.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from tf_for_slurm.errors import UsageError, bad_value
from tf_for_slurm.host import job_folder, settings, slurm, threads
from tf_for_slurm.host.step_secret import with_secret
from tf_for_slurm.plan.batch_settings import first_failure, srun_ended_ranks
from tf_for_slurm.plan.requeue import START_GRACE, Decision, decide
from tf_for_slurm.plan.slurm_outage import GiveUp, Outage, TryAgain, step_not_created
from tf_for_slurm.plan.srun_after_end import SrunAfterEnd, written_since
from tf_for_slurm.plan.srun_command import with_nodes
from tf_for_slurm.plan.stop_relay import (
    Action,
    AskTimes,
    Backstop,
    CheckLimit,
    Deadline,
    DecideNow,
    Rearm,
    Say,
    Send,
    StopAsWarned,
    StopRelay,
    Tell,
)
from tf_for_slurm.supervise.batch_record import BatchRecord, read_checkpoint_step
from tf_for_slurm.supervise.batch_relaunch import Budget, relaunch_while_lost
from tf_for_slurm.supervise.slurm_job import job_times, requeue_job, run_times
from tf_for_slurm.supervise.step_command import StepCommand
from tf_for_slurm.supervise.warn_file import WARN_POLL, WarnFile, read_warn_file

ASK_PATIENCE = 15.0  # seconds a warning's question for the job's times waits through an outage (its moment waits)
_TAKEN = (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM)  # the signals batch-step takes (plan.stop_relay.PASSED_ON)


def _say(message: str) -> None:
    """One line in the job's log (stderr), with the wall-clock time the delays are read from."""
    sys.stderr.write(f"tf-slurm batch-step: {time.strftime('%H:%M:%S')} {message}\n")
    sys.stderr.flush()


def _result(line: str) -> None:
    """One line on stdout: the step's statuses, as the templates have always printed them."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _signo(name: str) -> int:
    """'USR1' -> signal.SIGUSR1."""
    return int(getattr(signal, f"SIG{name}"))


class _Step:
    """The wiring: srun, the signals, the warning file, squeue and the timers feed the StopRelay; its
    actions are carried out here, and nothing else is decided here."""

    def __init__(self, job_id: str, warn_margin: float, start_grace: float = START_GRACE,
                 controller_wait: float = 600.0, on_times: Callable[..., None] = lambda *_: None):
        self.job_id, self.controller_wait, self.on_times = job_id, controller_wait, on_times  # batch.json's setter
        self.warn_margin, self.start_grace = warn_margin, start_grace
        self.relay = StopRelay(warn_margin, start_grace)
        self.command = StepCommand()
        self.decide_now = threading.Event()  # set by DecideNow: stop waiting for srun
        self.status_file = job_folder.status_path()  # where the step's supervisor writes its state
        self.after_end: Optional[SrunAfterEnd] = None
        self._looked = 0.0  # when the status file was last looked at (at most once a second)
        self._mtime = 0.0  # its mtime then: read again only when it changed
        self.started: Optional[float] = None  # wall clock when srun started
        self.retired = False  # a relaunch replaced this srun: its timers do nothing when they fire
        self.ended_at: Optional[float] = None  # wall clock when srun returned
        self.job_start: Optional[float] = None  # the job's StartTime (this run's), once squeue said it
        self.extra_env: Dict[str, str] = {}  # for srun's environment (the minimum of workers; a relaunch's fewer)

    def start(self, command: List[str]) -> None:
        """Start srun (OSError when it cannot run)."""
        # every task of the step shares the secret its supervisors prove to each other (host/step_secret.py);
        # it goes only into srun's environment: never into our own, argv, the log or batch.json
        env = settings.environ()
        if self.extra_env:
            env = {**env, **self.extra_env}
        started = self.started = time.time()
        pid = self.command.start(command, (None if not self.extra_env else dict(env)) if env.get(settings.SECRET)
                                 else with_secret(env))
        if self.status_file:
            self.after_end = SrunAfterEnd(started)
        self._do(self.relay.started(time.time(), pid))

    def handle(self, signo: int, _frame: object, when: Optional[float] = None) -> None:
        """A signal reached us (the handler of _TAKEN), or the batch shell wrote one down at `when`."""
        self._do(self.relay.signal_came(signal.Signals(signo).name[3:], time.time(), when))

    def arm_backstop(self) -> None:
        """Tell the step to stop --warn-margin s before EndTime even if no warning comes; `on_times` too."""
        submit, start, end = run_times(self.job_id, self.controller_wait, _say)  # an outage at the start is waited out
        self.job_start = start
        self.on_times(submit, start)
        self._do(self.relay.backstop_times(start, end, time.time()))

    def _backstop(self, end: float) -> None:
        self._do(self.relay.backstop_fired(end, self.command.ended()))

    def _deadline(self, _arg: object) -> None:
        self._do(self.relay.deadline_came(time.time(), self.command.ended()))

    def _due(self, name: str) -> None:
        self._do(self.relay.due(name, time.time(), self.command.ended()))

    @staticmethod
    def _timer(delay: float, then: Callable[..., None], arg: Any) -> None:
        timer = threading.Timer(delay, then, args=(arg,))
        timer.daemon = True
        threads.start(timer)

    def hub_status(self) -> Optional[Dict[str, Any]]:
        """The step's status file, when this srun's step (its hub) wrote it."""
        status = job_folder.read_json(self.status_file) if self.status_file and self.started else None
        return status if self.started and written_since(status, self.started) else None

    def _do(self, actions: Sequence[Action]) -> None:
        if self.retired:
            return
        for action in actions:
            self._carry_out(action)

    def _carry_out(self, action: Action) -> None:
        if isinstance(action, Say):
            _say(action.text)
        elif isinstance(action, Tell):
            if action.delay <= 0:
                self._due(action.signal)
            else:
                self._timer(action.delay, self._due, action.signal)
        elif isinstance(action, Send):
            self.command.send(_signo(action.signal))
        elif isinstance(action, AskTimes):
            start, end = job_times(self.job_id, ASK_PATIENCE, _say)
            self._do(self.relay.warning_times(action, start, end, time.time()))
        elif isinstance(action, Backstop):
            if action.delay < threading.TIMEOUT_MAX:
                self._timer(action.delay, self._backstop, action.end)
        elif isinstance(action, CheckLimit):
            self._do(self.relay.limit_checked(action.end, job_times(self.job_id, 0.0, _say)[1], time.time()))
        elif isinstance(action, Rearm):
            self.arm_backstop()
        elif isinstance(action, StopAsWarned):
            self.handle(signal.SIGUSR1, None)
        elif isinstance(action, Deadline):
            self._timer(action.delay, self._deadline, None)
        elif isinstance(action, DecideNow):
            self.decide_now.set()

    def wait(self, warn_file: Optional[str] = None) -> Optional[int]:
        """srun's status, or None once DecideNow came first; meanwhile, every WARN_POLL s, a signal the
        batch shell wrote to `warn_file`."""
        poller = WarnFile(warn_file) if warn_file else None

        def look() -> bool:
            if poller is not None and not self.relay.signal:
                got = poller.poll()
                if got is not None:
                    self.handle(_signo(got[0]), None, got[1])
            self._after_end(time.time())
            self._creation_wait()
            return self.decide_now.is_set()

        rc = self.command.wait(WARN_POLL, look)
        self.ended_at = time.time() if rc is not None else None
        return rc

    def retire(self) -> None:
        """A relaunch replaced this srun (ended): a timer of its relay that fires later does nothing."""
        self.retired = True

    def lost_words(self) -> Tuple[bool, List[str]]:
        """Whether a stop was passed on to this step, and srun's error lines (what says which node was lost)."""
        return bool(self.relay.signal), list(self.command.errors)

    def _creation_wait(self) -> None:
        """srun waiting to create its step (busy nodes) longer than the controller wait: ended, with one line."""
        if self.command.creation_overdue(self.controller_wait):
            _say(f"srun has waited {self.controller_wait:g} s to create the step (Slurm: step creation temporarily "
                 f"disabled; nodes busy): ending it ({settings.CONTROLLER_WAIT})")
            self.command.send(signal.SIGTERM)

    def _after_end(self, now: float) -> None:
        """Once a second: the status file, when it changed, until it says the step ended; then srun's end."""
        watch = self.after_end
        if watch is None or self.status_file is None or now - self._looked < 1.0:
            return
        self._looked = now
        if watch.ended_at is None and self.command.errors and srun_ended_ranks(self.command.errors):
            watch.task_failed(now)  # e.g. the hub's node lost: the others fail, srun waits for it
        if watch.status is None:
            try:
                mtime = os.stat(self.status_file).st_mtime
            except OSError:
                mtime = 0.0
            if mtime != self._mtime:
                self._mtime = mtime
                watch.read(job_folder.read_json(self.status_file), now)
        action = watch.action(now)
        if action == "TERM":
            lost = f"; {watch.lost} task(s) lost" if watch.lost else ""
            said = (f"with status {watch.status} {watch.linger:g} s ago (its supervisor's status file{lost})"
                    if watch.status is not None else f"{watch.linger:g} s ago (srun reported a task's failure)")
            _say(f"the step ended {said} but srun still runs, waiting for tasks that cannot report (a lost node: "
                 "Slurm notices only after SlurmdTimeout): ending srun")
        if action is not None:
            self.command.send(_signo(action))


@dataclass(frozen=True)
class _Run:
    """This run of the job, as run_step was given it (and the checkpoint it began from)."""

    job: str
    restarts: int
    max_requeues: int
    target: Optional[int]
    checkpoint_dir: Optional[str]
    start_step: Optional[int]
    requeue: bool
    controller_wait: float
    began: float  # wall clock when batch-step began this run


def _run_srun(step: _Step, command: List[str], warn_file: Optional[str]) -> Optional[int]:
    """srun from start to end with the signals handled; the status of its first failing task, or None
    when the decision could not wait for its end (DecideNow: srun still runs)."""
    for signo in _TAKEN:  # before srun starts: none is lost
        signal.signal(signo, step.handle)
    outage = Outage("srun (creating the step)", step.controller_wait)
    while True:
        try:
            step.start(command)
        except OSError as exc:
            raise UsageError(bad_value("command", command[0], f"a program that runs ({exc.strerror})")) from None
        if outage.tries == 0:
            threads.start_daemon(step.arm_backstop, name="backstop")  # its squeue never delays the warn file
        rc = step.wait(warn_file)
        if rc is None:
            return None
        reason = step_not_created(step.command.errors) if rc and not step.relay.signal else None
        then = outage.failed(reason, time.monotonic()) if reason else None
        if not isinstance(then, TryAgain):
            done = then.line if isinstance(then, GiveUp) else outage.answered(time.monotonic())
            if done:
                _say(done)
            break
        if then.line:
            _say(then.line)
        time.sleep(then.delay)  # no task ran: starting srun again is safe
        step.command = StepCommand()
    status = first_failure("".join(step.command.errors), rc)
    after = step.after_end
    if after is not None and after.ended_srun and after.status is not None:
        _result(f"job {step.job_id}: srun exit status {rc} (ended by batch-step); the step's: {after.status}")
        return after.status
    _result(f"job {step.job_id}: srun exit status {rc}")
    if rc != 0:
        _result(f"job {step.job_id}: exit status {status} (the first failing task's)")
    return status


class _Outcome(NamedTuple):
    """What carrying out a decision came to: whether the job was requeued, and batch-step's exit status
    (0 after a requeue: the requeue ends the run)."""

    requeued: bool
    status: int


def _conclude(run: _Run, step: _Step, ended_with: Optional[int], record: BatchRecord) -> int:
    """Decide, record, requeue (or not); batch-step's exit status.  `ended_with`: the step's status, None
    while it still runs (DecideNow: decided as if it had ended 0, then a requeue ends it, else SIGTERM)."""
    relay = step.relay
    status = 0 if ended_with is None else ended_with
    ckpt = read_checkpoint_step(run.checkpoint_dir)
    since = f", {time.time() - relay.signal_time:.1f} s after the signal" if relay.signal_time else ""
    _say(f"step {'still running' if ended_with is None else f'ended with status {status}'}{since}; checkpoint at "
         f"{'global step %d' % ckpt if ckpt is not None else 'none'}")
    decision = decide(relay.signal, status, run.restarts, run.max_requeues, checkpoint_step=ckpt, target=run.target,
                      start_step=run.start_step, limit_name=settings.MAX_REQUEUES,
                      delivered=relay.told_time is not None,
                      late_start=run.began - step.job_start if step.job_start else 0.0)
    record.end(ended_with, ckpt, decision.reason, requeued=decision.requeue and run.requeue)
    fewer = record.fewer_workers()
    if fewer:
        _say(f"this run trained {fewer} (short of nodes, {settings.MIN_WORKERS})")
    outcome = _requeue_or_say(run, decision, since, relay.told_time, plain=not (relay.signal or status))
    if ended_with is None and not outcome.requeued:
        step.command.send(signal.SIGTERM)  # srun passes it on: its tasks end now, not killed at the limit
    return outcome.status


def _requeue_or_say(run: _Run, decision: Decision, since: str, told_time: Optional[float],
                    plain: bool) -> _Outcome:
    """Carry out the decision, with its one line (`plain`: no signal and status 0, the reason alone)."""
    if decision.requeue and run.requeue:
        failed = requeue_job(run.job, run.controller_wait, _say)
        if failed is not None:
            hint = "" if failed.away else " is the job requeueable (#SBATCH --requeue)?"
            _say(f"scontrol requeue {run.job} failed ({failed.why}):{hint} ending with status 1")
            return _Outcome(requeued=False, status=1)
        told = f", {time.time() - told_time:.1f} s after the tasks were told" if told_time else ""
        _say(f"requeued job {run.job}{since}{told}: {decision.reason}")
        return _Outcome(requeued=True, status=0)
    _say(decision.reason if plain else f"not requeued: {decision.reason}")
    return _Outcome(requeued=False, status=decision.exit_status if not decision.requeue else 0)


def batch_host_env(env: Mapping[str, str], requeues_left: int) -> Dict[str, str]:
    """For the steps' tasks: this node (the batch host) and the requeues left, so that a task that lost
    the step's supervisor here can requeue the job once this node is found lost, with batch-step
    (supervise/batch_host.py); {} outside a Slurm node."""
    node = env.get(slurm.NODENAME, "")
    return {settings.BATCH_HOST: node, settings.REQUEUES_LEFT: str(max(0, requeues_left))} if node else {}


def run_step(command: List[str], job: str, *, restarts: int, max_requeues: int, warn_margin: float,
             target: Optional[int] = None, checkpoint_dir: Optional[str] = None, warn_file: Optional[str] = None,
             requeue: bool = True, start_grace: float = START_GRACE, max_relaunches: int = 0,
             allocation: Sequence[str] = (), spare_nodes: int = 0, controller_wait: float = 600.0,
             min_workers: Optional[int] = None) -> int:
    """Run the step (`command`, srun ...) of batch job `job`; return its first failure's status, or
    0 once the job is requeued (`requeue`: False only logs the decision).  The arguments are checked
    (tf_for_slurm.cli.batch_step); `restarts` is how often the job was requeued before; a step that
    loses a node is started again on `allocation`'s other nodes up to `max_relaunches` times; the
    first leaves `spare_nodes` of them free; short of nodes, it goes on with fewer workers, down to
    `min_workers` (None: never fewer); a Slurm command waits `controller_wait` s through an outage."""
    run = _Run(job, restarts, max_requeues, target, checkpoint_dir, read_checkpoint_step(checkpoint_dir), requeue,
               controller_wait, time.time())
    if restarts:
        _say(f"run {restarts + 1} of job {job} (requeued {restarts} time(s); checkpoint at {run.start_step})")
    record = BatchRecord(job, restarts, max_requeues, target, checkpoint_dir, run.start_step, say=_say)
    step = _Step(job, warn_margin, start_grace, controller_wait, record.slurm_times)
    # the tasks plan a role list longer than a smaller allocation allows with the same minimum (host.environment)
    fewest = {settings.MIN_WORKERS: str(min_workers)} if min_workers is not None else {}
    fewest.update(batch_host_env(settings.environ(), max_requeues - restarts if requeue else 0))
    step.extra_env = dict(fewest)
    first = with_nodes(command, len(allocation) - spare_nodes) if spare_nodes else command
    status = _run_srun(step, first, warn_file)
    if max_relaunches:
        def again(extra_env: Dict[str, str], srun: List[str]) -> Tuple[_Step, Optional[int]]:
            new = _Step(job, warn_margin, start_grace, controller_wait, record.slurm_times)
            new.extra_env = {**fewest, **extra_env}
            return new, _run_srun(new, srun, warn_file)

        step, status = relaunch_while_lost(step, status, command, allocation, record, Budget(
            max_relaunches, min_workers, checkpoint_dir), again, _say)
    return _conclude(run, step, status, record)


__all__ = ["batch_host_env", "job_times", "read_checkpoint_step", "read_warn_file", "run_step"]
