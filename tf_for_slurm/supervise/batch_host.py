"""After this task lost the step's supervisor on the job's batch host: plan.batch_host_loss's
check, carried out (Slurm's commands, the clock; its first and last lines in this task's log and in
the job's batch log, where the user looks; a requeue or cancel in batch.json's run, for `tf-slurm status`).

Why here, in the task's supervisor: batch-step died with the batch host, and Slurm keeps such a
`--no-kill` job RUNNING with no batch script (docs/SLURM_NODE_LOSS.md); a surviving task is the only
process of the job left to requeue it.  Only when batch-step said it runs the job (it sets
TF_SLURM_BATCH_HOST and TF_SLURM_REQUEUES_LEFT in its steps' environment), and only in a few tasks
(plan.batch_host_loss.checker_turn).
"""

from __future__ import annotations

import logging
import os
import signal
import stat
import subprocess
import time
from typing import Callable, Dict, Mapping, NamedTuple, Optional

from tf_for_slurm.host import job_folder, settings, slurm, slurm_call
from tf_for_slurm.plan.batch_host_loss import Ask, BatchHostLoss, Done, Sleep, checker_turn, launch_failed
from tf_for_slurm.plan.cluster import ClusterPlan
from tf_for_slurm.plan.scontrol_text import parse_job
from tf_for_slurm.supervise.batch_record import close_lost_run
from tf_for_slurm.supervise.child_process import LOGGER
from tf_for_slurm.supervise.slurm_job import requeue_job

log = logging.getLogger(LOGGER)
PATIENCE = 60.0  # seconds of Slurm controller outage a requeue or a cancel waits through
PROBE_TIMEOUT = 60.0  # seconds a probe step may take (a dead node's slurmd: refused after 11 s, measured)


def _quiet(line: str) -> None:
    log.debug("%s", line)


def node_state(node: str) -> Optional[str]:
    """Slurm's State of `node` (`MIXED+NOT_RESPONDING`, `DOWN*` ...), None when it does not answer."""
    res = slurm_call.call(["scontrol", "show", "node", node], what=f"scontrol show node {node}", patience=0.0,
                          say=_quiet, timeout=30)
    return parse_job(res.stdout).get("State") if res.ok else None


def probe(job: str, node: str, env: Mapping[str, str]) -> Optional[str]:
    """A step of `true` on `node` inside the job: None when it ran, else why not (one line).  Run with
    none of this step's SLURM_* variables, which srun would read as its own options."""
    clean = {k: v for k, v in env.items() if not k.startswith(slurm.PREFIXES) or k == slurm.CONF}
    try:
        res = subprocess.run(["srun", "--jobid", job, "--overlap", "--quiet", "-N1", "-n1", "-w", node, "true"],
                             env=clean, capture_output=True, text=True, timeout=PROBE_TIMEOUT)
    except subprocess.TimeoutExpired:
        return f"no answer within {PROBE_TIMEOUT:g} s"
    except OSError as exc:
        return f"srun: {exc.strerror or exc}"
    if res.returncode == 0:
        return None
    lines = [line.strip() for line in (res.stderr or res.stdout).strip().splitlines() if line.strip()]
    named = [line for line in lines if launch_failed(line)]  # the line that says the node did not take it
    return ((named or lines or [f"srun exit {res.returncode}"])[0])[:200]


def job_state(job: str) -> Optional[Dict[str, str]]:
    """`scontrol show job JOB`'s fields, through up to PATIENCE s of controller outage; None when not known."""
    res = slurm_call.call(["scontrol", "show", "job", job], what=f"scontrol show job {job}", patience=PATIENCE,
                          say=log.warning, timeout=30)
    return (parse_job(res.stdout) or None) if res.ok else None


def cancel_job(job: str) -> Optional[str]:
    """`scancel JOB`: None when Slurm took it, else why not."""
    res = slurm_call.call(["scancel", job], what=f"scancel {job}", patience=PATIENCE, say=log.warning, timeout=60)
    return None if res.ok else (res.stderr.strip().splitlines() or [res.line])[-1][:200]


class Config(NamedTuple):
    """What batch-step told its steps' tasks, and how long a check may wait."""

    batch_host: str  # the node batch-step runs on
    requeues_left: int
    restarts: int  # the job's restarts when this run began
    wait: float


def config(env: Mapping[str, str]) -> Optional[Config]:
    """The check's settings, read as the task starts (a bad value: one UsageError then, not after the
    step); None when no check is to be made (not under batch-step, or TF_SLURM_BATCH_HOST_WAIT=0)."""
    wait = settings.seconds(env, settings.BATCH_HOST_WAIT)
    wait = settings.default_seconds(settings.BATCH_HOST_WAIT) if wait is None else wait
    node = settings.text(env, settings.BATCH_HOST)
    left = settings.integer(env, settings.REQUEUES_LEFT, 0)
    if not node or left is None or wait <= 0:
        return None
    return Config(node, left, settings.integer(env, slurm.RESTART_COUNT, 0) or 0, wait)


def check(plan: ClusterPlan, lost_node: str, cfg: Optional[Config], env: Mapping[str, str], *, hub: bool = False,
          finished: bool = False, stopped: Callable[[], bool] = lambda: False,
          clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> Optional[Done]:
    """The check after this task lost the step's supervisor on `lost_node`, or (`hub`) the step's
    supervisor lost a task there, the step `finished` (status 0) or not; None: not this task's to make
    (nor after a stopping signal: `stopped`, which the supervisor, past its command, only records)."""
    if cfg is None or lost_node != cfg.batch_host or plan.me.node == lost_node or stopped():
        return None
    turn = 0 if hub else checker_turn([(t.rank, t.node) for t in plan.tasks], plan.me.rank, lost_node)
    if turn is None:
        return None
    job, wait = plan.job_id, cfg.wait
    info = job_state(job) or {}  # its batch log: where the user looks (this task's own output went through srun)
    batch_log = info["StdOut"] if info.get("StdOut", "").startswith("/") else None
    watch = BatchHostLoss(job=job, node=lost_node, turn=turn, restarts=cfg.restarts, requeues_left=cfg.requeues_left,
                          start=clock(), wait=wait, finished=finished)  # the wait counts from here: Slurm answered
    what = "a task lost was" if hub else "the step's supervisor was"
    who = f"task {plan.me.rank} on {plan.me.node}"  # names the acting task in the batch log and in batch.json
    me = f"tf-slurm exec ({who})"
    first = f"{what} on the job's batch host {lost_node}: checking whether that node was lost (for at most {wait:g} s)"
    log.warning("%s", first)
    if batch_log:
        tell_batch_log(batch_log, f"{me}: {first}")
    while True:
        if stopped():
            watch.stop_came()
        step = watch.next(clock())
        if isinstance(step, Done):
            log.log(logging.ERROR if step.acted else logging.WARNING, "%s", step.line)
            if batch_log:
                tell_batch_log(batch_log, f"{me}: {step.line}")
            if step.acted:  # batch.json's run, left 'running' by the batch-step that died: what became of it
                close_lost_run(job_folder.batch_path(env), job, cfg.restarts + 1, step.action == "requeue",
                               f"{who}: {step.line}")
            return step
        if isinstance(step, Sleep):
            sleep(max(0.0, step.until - clock()))
            continue
        _answer(watch, step, job, lost_node, env, clock)


def tell_batch_log(path: str, line: str) -> None:
    """Append `line` to the job's batch log, where its user looks (the batch script that would have said
    it died with its node; a requeued run appends there too).  Best effort: only an existing file of
    this user's, never a link."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK)  # a FIFO: no wait
    except OSError as exc:
        log.debug("cannot append to the batch log %s: %s", path, exc)
        return
    try:
        if os.fstat(fd).st_uid == os.getuid() and stat.S_ISREG(os.fstat(fd).st_mode):
            os.write(fd, (line.replace("\n", " ") + "\n").encode("utf-8", "replace"))
    except OSError as exc:
        log.debug("cannot append to the batch log %s: %s", path, exc)
    finally:
        os.close(fd)


def _answer(watch: BatchHostLoss, ask: Ask, job: str, node: str, env: Mapping[str, str],
            clock: Callable[[], float]) -> None:
    if ask.what == "probe":
        why = probe(job, node, env)
        watch.probe_said(why is None, why or "", clock())
    elif ask.what == "node":
        watch.node_said(node_state(node), clock())
    elif ask.what == "job":
        info = job_state(job)
        restarts = (info or {}).get("Restarts", "")
        watch.job_said(info.get("JobState") if info else None, int(restarts) if restarts.isdigit() else None)
    elif ask.what in ("requeue", "cancel"):
        log.error("%s job %s: its batch host %s was lost", "requeuing" if ask.what == "requeue" else "cancelling",
                  job, node)  # first: the requeue ends this task too (SIGTERM), maybe before its answer
        with _TermHeld():
            if ask.what == "requeue":
                refused = requeue_job(job, PATIENCE, log.warning)
                watch.requeue_said(None if refused is None else refused.why)
            else:
                watch.cancel_said(cancel_job(job))


class _TermHeld:
    """SIGTERM ignored while Slurm is asked to requeue or cancel the job, which sends it to this task:
    the answer is read and said; SIGKILL still ends the task after Slurm's KillWait."""

    def __enter__(self) -> None:
        self.old = signal.signal(signal.SIGTERM, signal.SIG_IGN)

    def __exit__(self, *_exc: object) -> None:
        signal.signal(signal.SIGTERM, self.old)


__all__ = ["Config", "cancel_job", "check", "config", "job_state", "node_state", "probe", "tell_batch_log"]
