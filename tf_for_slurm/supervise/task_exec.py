"""`tf-slurm exec -- CMD`: run one task's command with TF_CONFIG and friends, under the supervisor.

Why a module of its own: this is where the process environment meets the plan for a command we
do not control.  It decides the child's environment (TF_CONFIG, GPUs, Keras 2, TF1 device
filters, the large-cluster spill file) and hands the command to the supervisor, which ends the
step when training ends or fails.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence

from tf_for_slurm.errors import PlanError, UsageError, bad_value
from tf_for_slurm.host import job_folder, settings, slurm
from tf_for_slurm.host.environment import plan_from_env
from tf_for_slurm.host.network import ensure_bindable
from tf_for_slurm.host.step_secret import step_key
from tf_for_slurm.host.stop_request import DEFAULT_HOLD, ENV_HOLD
from tf_for_slurm.host.task_env import SHIM_DIR, task_env
from tf_for_slurm.plan import keras as keras_rule
from tf_for_slurm.plan.cluster import ClusterPlan
from tf_for_slurm.plan.gpus import devices_for_task
from tf_for_slurm.plan.restart_policy import RETRY_ON, RestartPolicy
from tf_for_slurm.plan.strategy import StepRoles, exec_device_filters, step_roles
from tf_for_slurm.supervise import batch_host, preflight
from tf_for_slurm.supervise.child_process import ForwardSignals, Wake, exit_status, start_command
from tf_for_slurm.supervise.supervisor import Hub, Spoke, Timing

log = logging.getLogger("tf_for_slurm.exec")

SUPERVISED = settings.SUPERVISED  # set for the command: an inner `tf-slurm exec` only execs
LAUNCH_REPORT = settings.LAUNCH_REPORT  # set by `tf-slurm local`: who failed first


@dataclass
class ChildEnv:
    """The command's environment, and what to clean up after it."""

    variables: Dict[str, str]
    private_dir: Optional[str] = None  # this task's 0700 folder (spill file, progress file): removed at the end
    notes: List[str] = field(default_factory=list)

    @property
    def spill_dir(self) -> Optional[str]:
        """The private folder when it holds the spilled TF_CONFIG (the command then runs as a child, so
        the file can be removed after it), else None."""
        return self.private_dir if settings.TF_CONFIG_FILE in self.variables else None


def keras_variables(env: Mapping[str, str], multi_task: bool, strategy: str,
                    has_tf_keras: bool, keras_major: Optional[int] = None) -> tuple:
    """({'TF_USE_LEGACY_KERAS': '1'} or {}, (level, message) or None).

    Keras 3 `fit` does not run under MultiWorkerMirroredStrategy or ParameterServerStrategy
    (keras-team/keras#20585, #18624); tf_keras does.  Under Keras 2 (`keras_major` 2: TensorFlow <=
    2.15) nothing is set.  A user's explicit setting always wins; the rule is plan.keras's (submit
    refuses the same case before submitting).
    """
    if not multi_task or keras_rule.user_decides(env.get(keras_rule.LEGACY_KERAS)) \
            or keras_rule.is_keras_2(keras_major):
        return {}, None
    if has_tf_keras:
        return {keras_rule.LEGACY_KERAS: "1"}, (
            logging.INFO, f"{keras_rule.LEGACY_KERAS}=1: tf.keras is tf_keras (Keras 2), which supports Keras "
                          f"fit under distribution strategies; set {keras_rule.LEGACY_KERAS}=0 to keep Keras 3")
    if keras_rule.lacks_tf_keras(strategy, multi_task, has_tf_keras):
        return {}, (logging.WARNING, keras_rule.missing_tf_keras())
    return {}, None


def installed_keras_major() -> Optional[int]:
    """The major version of the `keras` package this python would import, None when not known.
    Read from the name of the dist-info folder beside it: one directory listing, where importing
    importlib.metadata would add 30-50 ms to every task's start (measured here)."""
    spec = importlib.util.find_spec("keras")
    if spec is None or not spec.submodule_search_locations:
        return None
    try:
        entries = os.listdir(os.path.dirname(list(spec.submodule_search_locations)[0]))
    except OSError:
        return None
    return keras_rule.keras_major_installed(entries)


def strategy_variables(env: Mapping[str, str], strategy: str) -> Dict[str, str]:
    """What TensorFlow needs under `strategy` unless the user set it: ParameterServerStrategy's
    workers fail fast on an unreachable peer, so a worker restarted in place is retried by the
    coordinator instead of waited on (GRPC_FAIL_FAST=use_caller, as TensorFlow's tutorial sets)."""
    if strategy == "pss" and env.get("GRPC_FAIL_FAST") in (None, ""):
        return {"GRPC_FAIL_FAST": "use_caller"}
    return {}


def restart_policy(env: Mapping[str, str], max_restarts: Optional[int] = None,
                   restart_on: Optional[str] = None) -> RestartPolicy:
    """The step's restart policy: the options (None: not given) win over the settings."""
    if max_restarts is not None and max_restarts < 0:
        raise UsageError(bad_value("--max-restarts", max_restarts, "an integer >= 0"))
    if max_restarts is None:
        max_restarts = settings.integer(env, settings.MAX_RESTARTS, minimum=0)
    per_task = settings.integer(env, settings.MAX_TASK_RESTARTS, minimum=0)
    source = "--restart-on" if restart_on is not None else settings.RESTART_ON
    retry_on = restart_on if restart_on is not None else settings.text(env, settings.RESTART_ON)
    retry_on = retry_on or settings.default_text(settings.RESTART_ON)
    if retry_on not in RETRY_ON:
        raise UsageError(bad_value(source, retry_on, "signal or any"))
    window = settings.seconds(env, settings.CRASH_WINDOW)
    backoff = settings.seconds(env, settings.RESTART_BACKOFF)
    return RestartPolicy(
        max_restarts=settings.default_int(settings.MAX_RESTARTS) if max_restarts is None else max_restarts,
        max_per_task=settings.default_int(settings.MAX_TASK_RESTARTS) if per_task is None else per_task,
        retry_on=retry_on,
        crash_window=settings.default_seconds(settings.CRASH_WINDOW) if window is None else window,
        backoff=settings.default_seconds(settings.RESTART_BACKOFF) if backoff is None else backoff)


def _private_dir(base: str, tag: str) -> str:
    """A new folder only this user can use (0700, a random name made with O_EXCL semantics), for one
    task's spilled TF_CONFIG and progress file.  Why random: other users can write to TMPDIR and see
    job ids; a predictable name lets them plant the folder (exec fails), a file or a symlink first."""
    try:
        return tempfile.mkdtemp(prefix=f"tf_slurm.{tag}.", dir=base)
    except OSError as exc:
        raise PlanError(bad_value("TMPDIR", base, f"a directory where this user can make a private folder "
                                                  f"({exc.strerror})")) from None


def child_environment(plan: ClusterPlan, roles: StepRoles, env: Mapping[str, str], *,
                      device_filters: bool = True, has_tf_keras: Optional[bool] = None,
                      progress: bool = False) -> ChildEnv:
    """Everything the command gets on top of `env` (with `progress`: the file where it reports its
    progress, the shim's reports or `report_progress()`, which its supervisor reads)."""
    me = plan.me
    tenv = task_env(plan)
    variables = dict(tenv.variables)
    variables[SUPERVISED] = slurm.step_tag(env)
    variables[settings.STRATEGY] = roles.strategy
    out = ChildEnv(variables)
    visible, step_gpus = slurm.gpu_sources(env)
    gpus = devices_for_task(plan.tasks, me.rank, visible, step_gpus, slurm.GPU_NAMES)
    if gpus is not None:
        variables[slurm.CUDA_VISIBLE_DEVICES] = gpus
    if has_tf_keras is None:
        has_tf_keras = importlib.util.find_spec("tf_keras") is not None
    keras, message = keras_variables(env, plan.size > 1, roles.strategy, has_tf_keras, installed_keras_major())
    variables.update(keras)
    variables.update(strategy_variables(env, roles.strategy))
    if message is not None:
        log.log(*message)
    filters = exec_device_filters(roles.strategy, me.role, me.index) if device_filters else None
    if filters:
        variables[settings.SESSION_FILTERS] = ",".join(filters)
        variables[settings.RECOVERY_WAIT] = f"{settings.recovery_wait(env):g}"
        log.info("device filters %s for this task's TensorFlow server (--no-device-filters to turn off)",
                 ",".join(filters))
    if env.get(ENV_HOLD) is None:  # see stop_request.hold_warning_signals
        variables[ENV_HOLD] = f"{DEFAULT_HOLD:g}"
    folder: Optional[str] = None
    if progress or tenv.spill:  # one private folder per task, removed when exec ends
        folder = out.private_dir = _private_dir(env.get("TMPDIR") or tempfile.gettempdir(),
                                                f"{plan.job_id}.{plan.step_id}.{me.rank}")
    if progress and folder:  # the supervisor creates the file as each run of the command starts
        variables[settings.PROGRESS_FILE] = os.path.join(folder, "progress")
        variables[settings.PHASE_FILE] = os.path.join(folder, "phase")  # its start-up phase, the same way
    if tenv.spill and folder:
        path = os.path.join(folder, "tf_config.json")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(tenv.full_tf_config)
        variables[settings.TF_CONFIG_FILE] = path
        log.warning("%s (%s)", tenv.note, path)
    # the sitecustomize shim, first on the path: filters, recovery wait, signal hold, spilled TF_CONFIG
    old = env.get("PYTHONPATH", "")
    variables["PYTHONPATH"] = os.pathsep.join([SHIM_DIR] + ([old] if old else []))
    return out


def run(command: Sequence[str], *, tasks: Optional[Sequence[str]] = None, ps: Optional[int] = None,
        placement: Optional[str] = None, chief: bool = False, address: Optional[str] = None,
        strategy: Optional[str] = None, drain: Optional[float] = None, device_filters: bool = True,
        supervise: bool = True, env: Optional[Mapping[str, str]] = None,
        component_roles: Optional[Sequence[str]] = None, max_restarts: Optional[int] = None,
        restart_on: Optional[str] = None, progress_deadline: Optional[float] = None,
        require_all_workers: Optional[bool] = None) -> int:
    """Run `command` as this task of the step; return the status the task should exit with."""
    env = settings.environ() if env is None else env
    command = list(command)
    if not command:
        raise UsageError("exec: expected a command after '--', e.g. tf-slurm exec -- python train.py")
    if slurm.under_exec(env):
        log.debug("already under tf-slurm exec: running the command as is")
        return _exec(command, env)
    reason = slurm.outside_step(env)
    if reason:
        raise UsageError(reason)
    source = "--strategy" if strategy else settings.STRATEGY
    strategy = strategy or settings.text(env, settings.STRATEGY) or "auto"
    if not settings.device_filters_on(env):
        device_filters = False
    timing = Timing.from_env(env, drain=drain, progress_deadline=progress_deadline)
    policy = restart_policy(env, max_restarts, restart_on)
    after_loss = batch_host.config(env)  # read now: a bad value is a usage error before the step, not after it
    require_all = settings.flag(env, settings.REQUIRE_ALL_WORKERS) if require_all_workers is None \
        else require_all_workers
    plan = plan_from_env(env, tasks=tasks, ps=ps, placement=placement, chief=chief, address=address, check=True,
                         component_roles=component_roles)
    me = plan.me
    roles = step_roles(plan.tasks, strategy, source)
    log.info("%s", roles.rule)
    if me.rank == roles.chief_rank and dict(plan.details).get("workers_left_out"):
        log.info("%s", plan.notes[-1])  # the role list fitted to a smaller allocation (host.environment)
    supervised = plan.size > 1 and supervise
    key = step_key(env, f"{plan.job_id}.{plan.step_id}") if supervised else b""
    if supervised and settings.flag(env, settings.PREFLIGHT):  # every planned address answers, or one line
        failed = preflight.check_step(plan, roles, key, env)
        if failed is not None:
            return failed
    ensure_bindable(me.port, f"task {me.role}:{me.index} (rank {me.rank}, {me.address}): its TensorFlow server")
    child = child_environment(plan, roles, env, device_filters=device_filters, progress=supervised)
    child_env = {**env, **child.variables}
    child_env.pop(settings.SECRET, None)  # the supervisors' only: the command has no use for it
    report = env.get(LAUNCH_REPORT) or None
    try:
        if not supervised:
            if child.spill_dir is None:
                return _exec(command, child_env)
            return _run_plain(command, child_env)
        return _supervised(plan, roles, command, child_env, env, timing, report, policy, key, require_all,
                           after_loss)
    finally:
        if child.private_dir is not None:
            shutil.rmtree(child.private_dir, ignore_errors=True)


def _supervised(plan: ClusterPlan, roles: StepRoles, command: List[str], child_env: Mapping[str, str],
                env: Mapping[str, str], timing: Timing, report: Optional[str], policy: RestartPolicy, key: bytes,
                require_all: bool, after_loss: Optional[batch_host.Config]) -> int:
    """This task under the hub (the chief's) or a spoke; then, when a peer on the job's batch host was
    lost, the check whether batch-step went with its node (supervise.batch_host)."""
    if plan.me.rank == roles.chief_rank:
        hub = Hub(plan, roles, command, child_env, timing, report, status_file=job_folder.status_path(env),
                  policy=policy, key=key, require_all=require_all)
        status = hub.run()
        for node in sorted({plan.tasks[rank].node for rank in hub.watch.lost_ranks()} if hub.watch else ()):
            batch_host.check(plan, node, after_loss, env, hub=True, finished=status == 0,
                             stopped=lambda: hub.stopping or _stop_came(hub.sigs))
        return status
    spoke = Spoke(plan, plan.tasks[roles.chief_rank], command, child_env, timing, report, policy=policy,
                  strategy=roles.strategy, key=key)
    status = spoke.run()
    if spoke.watch.lost:
        batch_host.check(plan, plan.tasks[roles.chief_rank].node, after_loss, env,
                         stopped=lambda: _stop_came(spoke.sigs))
    return status


def _stop_came(sigs: Optional[ForwardSignals]) -> bool:
    """A stopping signal reached this supervisor, while it ran its command or since (only recorded then)."""
    return sigs is not None and sigs.stop_since(0) is not None


def _exec(command: List[str], env: Mapping[str, str]) -> int:
    try:
        os.execvpe(command[0], command, dict(env))
    except OSError as exc:
        sys.stderr.write(f"tf-slurm exec: cannot run {command[0]!r}: {exc.strerror}\n")
        return 127
    return 0  # not reached


def _run_plain(command: List[str], env: Mapping[str, str]) -> int:
    """Run without peers but as a child, so the spill file can be removed afterwards."""
    wake = Wake()
    try:
        with ForwardSignals(wake) as sigs:
            child = start_command(command, env, wake)
            if child is None:
                return 127
            sigs.attach(child)
            status = exit_status(child.proc.wait())
            child.reap_group()
            return status
    finally:
        wake.close()
