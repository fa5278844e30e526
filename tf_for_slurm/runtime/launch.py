"""`launch(train_fn)`: one entry point for every task of a TF1-style ps/worker cluster.

    import sys
    from tf_for_slurm.runtime import launch
    sys.exit(launch(train, tasks=["ps", "worker", "worker"]))

- ps: starts its server and waits for the workers' done reports (`wait_for_workers`); the
  status is 0, or non-zero when a worker died or failed.  By default (`ps_fast_exit=True`)
  the ps then flushes logging and stdio and leaves with `os._exit(status)`: interpreter
  teardown of a process holding a TF server took 1-6 s here, and Slurm ends the step only
  when every task has exited.  With `ps_fast_exit=False` the status is returned instead.
- chief / worker: starts its server and calls `train_fn(ctx)` with a `TrainContext`, then
  reports done (also when `train_fn` raises: the exception is re-raised after the report).
- stop signals (`stop_on_signal=True`): SIGUSR1 (Slurm's time-limit warning) and SIGTERM
  (scancel, preemption) make trainers stop at their next step through `StopOnSignalHook` in
  `ctx.hooks` (`ctx.stop` is the request); the chief's checkpoint is written as at the target,
  then the workers report and the ps exit 0.  A ps keeps serving on those signals.
- evaluator: starts its server (device filters: ps + itself), calls `train_fn(ctx)` and does
  not report: the ps does not wait for it, so it should evaluate from checkpoints.

Who is chief: the task with role 'chief' when the plan has one; otherwise worker 0 (the seeds'
`is_chief = task_index == 0`).  Exactly one task has `ctx.is_chief`.

Liveness: inside a Slurm step of several tasks, `launch` first re-executes the program under
`tf-slurm exec` (one `os.execv` before any server starts; `supervise=False` or
TF_SLURM_SUPERVISE=0 to opt out), so the step has the same event-driven supervisor as any exec'd
script: a dead or failed task ends every task within seconds, and nothing polls ports.  Under
that supervisor the ps wait only reads its done queue and workers run no ps watchdog.  Without a
Slurm step (plans built by hand or over MPI outside srun), the ps probes the workers' ports and
each worker watches the ps, as before.
"""

from __future__ import annotations

import _thread
import logging
import math
import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Sequence

from tf_for_slurm.errors import TfSlurmError, UsageError, bad_value
from tf_for_slurm.host import settings, slurm, threads
from tf_for_slurm.host.environment import plan_from_env
from tf_for_slurm.host.network import port_accepts, port_state
from tf_for_slurm.host.stop_request import shared_stop_request
from tf_for_slurm.plan.cluster import ClusterPlan
from tf_for_slurm.plan.liveness import LOST, NEVER, Peer, Rule
from tf_for_slurm.plan.strategy import REPORTING_ROLES, reporter_tasks, require_chief
from tf_for_slurm.runtime.done_queue import report_done, reporter_index
from tf_for_slurm.runtime.hooks import BarrierOnChiefHook, PrintStepHook, StopOnSignalHook
from tf_for_slurm.runtime.ps_wait import wait_for_workers
from tf_for_slurm.runtime.server import device_filters, session_config, start_server

log = logging.getLogger(__name__)
#: what a ps logs on SIGUSR1/SIGTERM: it must outlive the chief's checkpoint, which reads its variables
PS_ON_SIGNAL = "this ps keeps serving until every worker reported (the chief's checkpoint reads its variables)"


def chief_of(plan: ClusterPlan) -> Any:
    """The Task that initialises variables and writes checkpoints (plan.strategy.require_chief)."""
    return require_chief(plan.tasks)


@dataclass(frozen=True)
class TrainContext:
    """What a training function needs to know about its place in the cluster."""

    server: Any  # tf.distribute.Server
    plan: ClusterPlan
    job_type: str
    task_index: int
    is_chief: bool
    num_workers: int  # tasks that train and report: chief (if any) + workers
    num_ps: int
    hooks: tuple  # hooks launch recommends (barrier, step printing); add your own
    session_config: Any = None  # ConfigProto with this task's device filters / GPU options
    stop: Any = None  # the StopRequest set by SIGUSR1/SIGTERM (None: launch(stop_on_signal=False))

    @property
    def target(self) -> str:
        return self.server.target

    def device_setter(self, **kwargs: Any) -> Any:
        """`replica_device_setter` for this task (use with `tf.compat.v1.device`, not `tf.device`)."""
        import tensorflow as tf

        kwargs.setdefault("worker_device", f"/job:{self.job_type}/task:{self.task_index}")
        kwargs.setdefault("cluster", tf.train.ClusterSpec(self.plan.server_dictionary()))
        return tf.compat.v1.train.replica_device_setter(**kwargs)

    def monitored_session(self, hooks: Sequence[Any] = (), *, stop_grace_period_secs: float = 2.0,
                          recovery_wait_secs: float = 0.5, **kwargs: Any) -> Any:
        """A MonitoredTrainingSession wired to this task.

        Differences from calling it yourself: the context's hooks and session config are added,
        `stop_grace_period_secs` is short (SyncReplicasOptimizer's chief otherwise waits 120 s
        in close), and a non-chief polls for the chief's initialisation every
        `recovery_wait_secs` instead of TensorFlow's fixed 30 s.
        """
        import tensorflow as tf

        all_hooks = list(self.hooks) + list(hooks)
        config = kwargs.pop("config", self.session_config)
        if self.is_chief:
            return tf.compat.v1.train.MonitoredTrainingSession(
                master=self.target, is_chief=True, hooks=all_hooks, config=config,
                stop_grace_period_secs=stop_grace_period_secs, **kwargs)
        unsupported = set(kwargs) - {"scaffold", "max_wait_secs"}
        if unsupported:  # chief-only options (checkpoints, summaries) make no sense here
            log.debug("non-chief ignores MonitoredTrainingSession options %s", sorted(unsupported))
        creator = _fast_worker_session_creator(
            scaffold=kwargs.get("scaffold"), master=self.target, config=config,
            max_wait_secs=kwargs.get("max_wait_secs", 7200), recovery_wait_secs=recovery_wait_secs)
        return tf.compat.v1.train.MonitoredSession(session_creator=creator, hooks=all_hooks,
                                                   stop_grace_period_secs=stop_grace_period_secs)


def _fast_worker_session_creator(scaffold: Any, master: str, config: Any, max_wait_secs: float,
                                 recovery_wait_secs: float) -> Any:
    import tensorflow as tf
    from tensorflow.python.training import session_manager as sm

    class _Creator(tf.compat.v1.train.WorkerSessionCreator):
        _session_manager: Any  # set by WorkerSessionCreator.__init__

        def _get_session_manager(self) -> Any:  # same as TF's, plus recovery_wait_secs
            if self._session_manager:
                return self._session_manager
            self._session_manager = sm.SessionManager(
                local_init_op=self._scaffold.local_init_op,
                local_init_feed_dict=self._scaffold.local_init_feed_dict,
                ready_op=self._scaffold.ready_op,
                ready_for_local_init_op=self._scaffold.ready_for_local_init_op,
                graph=tf.compat.v1.get_default_graph(),
                recovery_wait_secs=recovery_wait_secs)
            return self._session_manager

    return _Creator(scaffold=scaffold, master=master, config=config, max_wait_secs=max_wait_secs)


def _context(server: Any, plan: ClusterPlan, gpu_memory_fraction: Optional[float], barrier: bool,
             barrier_timeout: float, print_every_n_steps: Optional[int], stop: Any = None) -> TrainContext:
    me = plan.me
    chief = chief_of(plan)
    n_reporters = len(reporter_tasks(plan))
    hooks: list = []
    trains = me.role in REPORTING_ROLES  # chief/worker; an evaluator does not report (a ps never gets here)
    if barrier and trains and plan.count("ps"):
        hooks.append(BarrierOnChiefHook(n_reporters, reporter_index(plan), me.rank == chief.rank,
                                        timeout_s=barrier_timeout))
    if print_every_n_steps:
        hooks.append(PrintStepHook(print_every_n_steps, name=f"{me.role}:{me.index}"))
    if stop is not None and trains:
        hooks.append(StopOnSignalHook(stop, name=f"{me.role}:{me.index}"))
    return TrainContext(server=server, plan=plan, job_type=me.role, task_index=me.index,
                        is_chief=me.rank == chief.rank, num_workers=n_reporters,
                        num_ps=plan.count("ps"), hooks=tuple(hooks),
                        session_config=session_config(plan, gpu_memory_fraction=gpu_memory_fraction),
                        stop=stop)


class PsLost(TfSlurmError):  # noqa: N818 (a public name)
    """A parameter server stopped answering while this task was training."""

    exit_code = 1


class _PsWatchdog:
    """While training runs, end this task if a ps that was up stops accepting connections.

    Without it a worker whose ps died (killed, or exited because another worker failed) sits
    in MonitoredSession's recovery loop for up to `max_wait_secs` (2 h by default).  The ps
    only leaves after this task reported, i.e. after training, so during training a closed ps
    port is always a failure: two refused connections in a row (the ps host answered that nothing
    listens) are enough; a ps that does not answer at all counts after `liveness_timeout / 2`.
    First the main thread is interrupted (so `finally` blocks and the training exception path
    run); if the process has not ended `interrupt_grace` seconds later (stuck in C++, or a slow
    interpreter teardown holding a TF server), it exits with status 1.
    """

    def __init__(self, ps_tasks: list, liveness_timeout: float, startup_grace: float = 120.0,
                 interrupt_grace: Optional[float] = None):
        self.ps_tasks = ps_tasks
        self.liveness_timeout = liveness_timeout
        self.startup_grace = startup_grace
        self.interrupt_grace = min(2.0, liveness_timeout) if interrupt_grace is None else interrupt_grace
        self.fired: Optional[str] = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tf_for_slurm-ps-watchdog", daemon=True)

    def __enter__(self) -> "_PsWatchdog":
        self._await_ps_up()
        threads.start(self._thread)
        return self

    def _await_ps_up(self) -> None:
        """Arm only once every ps has been seen up, before training starts.

        Training cannot start without the ps anyway, and a ps can leave within a fraction of a
        second when another worker fails at once: a watchdog that took its first look later would
        never have seen it up and could not tell "gone" from "not yet started".  A ps not seen up
        within startup_grace counts as lost.
        """
        rule, started = Rule(lost_after=math.inf, never_after=self.startup_grace), time.monotonic()
        pending = [(t, Peer(rule, started)) for t in self.ps_tasks]
        while True:
            pending = [(t, peer) for t, peer in pending if not port_accepts(t.host, t.port, timeout=0.2)]
            if not pending:
                return
            now = time.monotonic()
            if any(peer.verdict(now) == NEVER for _, peer in pending):
                names = ", ".join(f"{t.role}:{t.index} at {t.address}" for t, _ in pending)
                self.fired = f"{names} not up within startup_grace={self.startup_grace:.1f}s"
                raise PsLost(self.fired)
            time.sleep(0.05)  # polling interval of a bounded wait

    def __exit__(self, *exc: Any) -> None:
        if self.fired:
            return  # keep the exit deadline: the process ends within interrupt_grace of the loss
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        period = min(0.5, max(0.05, self.liveness_timeout / 10))
        # plan.liveness: refused twice in a row, or no answer for liveness_timeout / 2
        rule = Rule(lost_after=self.liveness_timeout / 2, refused_limit=2)
        started = time.monotonic()
        peers = {t.rank: Peer(rule, started, seen=True) for t in self.ps_tasks}  # every ps was seen up by __enter__
        while not self._stop.wait(period):
            now = time.monotonic()
            for t in self.ps_tasks:
                if peers[t.rank].observe(port_state(t.host, t.port, timeout=period), now) == LOST:
                    self._fire(t)
                    return

    def _fire(self, task: Any) -> None:
        if self._stop.is_set():
            return
        self.fired = f"lost {task.role}:{task.index} at {task.address}: its port closed during training"
        log.error("%s; stopping this task", self.fired)
        _thread.interrupt_main()
        # Not cancelled by __exit__ once fired: training that ignores the interrupt (inside
        # TensorFlow's C++) and a slow teardown of the TF server both end here.
        time.sleep(self.interrupt_grace)
        log.error("this task did not end within %.1fs of losing its ps; exiting with status 1",
                  self.interrupt_grace)
        _fast_exit(1)


def _fast_exit(status: int, role: str = "this task") -> None:
    """Leave now with `status`, skipping interpreter teardown (nothing of a ps needs it)."""
    log.info("%s exiting with status %d", role, status)
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # a closed or broken stream must not keep the ps alive
            pass
    os._exit(status)


def _check_launch_arguments(plan: object, **seconds: Any) -> None:
    """Types at the public boundary, before any server starts: one UsageError naming the argument."""
    if plan is not None and not isinstance(plan, ClusterPlan):
        raise UsageError(bad_value("plan", plan, "a ClusterPlan (tf_for_slurm.plan_from_env()) or None"))
    for name, value in seconds.items():
        if value is None and name == "timeout":
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise UsageError(bad_value(name, value, "a number of seconds > 0"))


def _always_up(_host: str, _port: int, _timeout: float) -> bool:
    return True


def _can_supervise(plan: ClusterPlan, env: Mapping[str, str]) -> bool:
    """Inside a Slurm step of several tasks (what `tf-slurm exec` plans from), unless opted out."""
    if not settings.flag(env, settings.SUPERVISE):
        return False
    return slurm.step_of_size(env, plan.size) and plan.my_rank is not None


def _reexec_under_exec(plan: ClusterPlan) -> None:
    """Replace this process by `tf-slurm exec -- <this program>` with the plan's roles."""
    argv = list(getattr(sys, "orig_argv", None) or [sys.executable, *sys.argv])
    command = [sys.executable, *argv[1:]]
    exec_argv = [sys.executable, "-m", "tf_for_slurm", "exec", "--tasks", ",".join(t.role for t in plan.tasks)]
    address = dict(plan.details).get("address_policy")
    if address and not address.startswith("iface:"):  # iface addresses were gathered (MPI): the
        exec_argv += ["--address", address]           # supervisors only need names that resolve
    log.info("re-running this task under tf-slurm exec (the step's supervisor): %s", " ".join(command))
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    os.execv(sys.executable, exec_argv + ["--", *command])


def launch(train_fn: Callable[[TrainContext], Any], *, tasks: Optional[Sequence[str]] = None,
           ps: Optional[int] = None, plan: Optional[ClusterPlan] = None,
           gpu_memory_fraction: Optional[float] = None, liveness_timeout: float = 5.0,
           startup_grace: float = 120.0, timeout: Optional[float] = None, barrier: bool = False,
           barrier_timeout: float = 300.0, print_every_n_steps: Optional[int] = None,
           report_timeout: float = 30.0, ps_fast_exit: bool = True, watch_ps: bool = True,
           late_start_grace: float = 30.0, supervise: bool = True, stop_on_signal: bool = True) -> int:
    """Run this task's part of the cluster; return its exit status (callers `sys.exit` it)."""
    if not callable(train_fn):
        raise UsageError(bad_value("train_fn", train_fn, "a callable taking a TrainContext"))
    _check_launch_arguments(plan, liveness_timeout=liveness_timeout, startup_grace=startup_grace,
                            timeout=timeout, barrier_timeout=barrier_timeout, report_timeout=report_timeout,
                            late_start_grace=late_start_grace)
    for name, flag in (("supervise", supervise), ("stop_on_signal", stop_on_signal)):
        if not isinstance(flag, bool):
            raise UsageError(bad_value(name, flag, "True or False"))
    plan = _plan_for(plan, tasks, ps)
    supervised = slurm.under_exec(settings.environ())
    if supervise and not supervised and _can_supervise(plan, settings.environ()):
        _reexec_under_exec(plan)  # does not return
    me = plan.me
    if me.role != "evaluator":
        chief_of(plan)  # reject plans without worker/chief before starting anything
    stop = None
    if stop_on_signal:  # before the server starts: a time-limit warning can come at any moment
        stop = shared_stop_request(what=PS_ON_SIGNAL if me.role == "ps" else None)
    server = start_server(plan, gpu_memory_fraction=gpu_memory_fraction)
    if me.role == "ps":
        # under exec the supervisor ends this ps when a worker is lost: only the done queue is read here
        status = wait_for_workers(server, plan, liveness_timeout=liveness_timeout,
                                  startup_grace=startup_grace, timeout=timeout,
                                  late_start_grace=late_start_grace,
                                  probe=_always_up if supervised else port_accepts)
        if ps_fast_exit:
            _fast_exit(status, "ps")
        return status
    ctx = _context(server, plan, gpu_memory_fraction, barrier, barrier_timeout, print_every_n_steps, stop)
    if me.role not in REPORTING_ROLES or not ctx.num_ps:  # nobody to report to, or not a reporter
        train_fn(ctx)
        return 0
    watch = watch_ps and not supervised  # under exec, the supervisor ends this task if a ps dies
    watchdog = _PsWatchdog(plan.tasks_with_role("ps"), liveness_timeout, startup_grace) if watch else None
    return _train_and_report(train_fn, ctx, server, plan, watchdog, report_timeout)


def _plan_for(plan: Optional[ClusterPlan], tasks: Optional[Sequence[str]], ps: Optional[int]) -> ClusterPlan:
    """The plan given, else this Slurm step's (failing at once outside a step: never wait for peers)."""
    if plan is None:
        # srun forgotten: fail now, never wait for peers
        reason = slurm.outside_step(settings.environ(), "srun python train.py")
        if reason:
            raise UsageError(reason)
        return plan_from_env(tasks=tasks, ps=ps)
    if tasks is not None or ps is not None:
        raise UsageError(bad_value("tasks/ps", (tasks, ps), "None when plan= is given"))
    return plan


def _train_and_report(train_fn: Callable[[TrainContext], Any], ctx: TrainContext, server: Any,
                      plan: ClusterPlan, watchdog: Optional[_PsWatchdog], report_timeout: float) -> int:
    """A chief/worker: train, then report done to every ps, failed when train_fn raised (re-raised
    after the report); no report when the ps is gone (PsLost)."""
    me = plan.me
    idx = reporter_index(plan)
    filters = device_filters(plan)

    def report(failed: bool) -> None:
        report_done(server.target, ctx.num_ps, ctx.num_workers, idx, failed=failed, device_filters=filters,
                    timeout_s=report_timeout)

    try:
        if watchdog is None:
            train_fn(ctx)
        else:
            with watchdog:
                train_fn(ctx)
    except BaseException as exc:
        if watchdog is not None and watchdog.fired:
            # the ps is gone: nobody to report to, and the interrupt is ours, not the user's
            raise PsLost(f"{me.role}:{me.index}: {watchdog.fired}") from exc
        if isinstance(exc, SystemExit) and exc.code in (None, 0):  # sys.exit(0) in train_fn: success
            report(failed=False)
            raise
        log.error("%s:%d training raised; reporting the failure to the ps", me.role, me.index)
        report(failed=True)
        raise
    report(failed=False)
    return 0
