"""Whether a task whose command failed is restarted in place, and when.  Pure: values in, a decision out.

Why a module of its own: the rule has several bounds (the step's budget, the task's, a crash
loop) and per-strategy limits, and both the hub (which decides, through plan.step_watch) and a
spoke (which must know whether its failure may still be undone before it names it first) ask it.

In place means the same rank, node, address and TF_CONFIG: the task's supervisor starts the same
command again.  What restarts when a task fails, per strategy (`restart_scope`):
- ``pss``: a worker or an evaluator alone (ParameterServerStrategy's coordinator re-sends the
  failed functions and waits for the worker to come back at its address).  A ps or the chief (the
  coordinator): every task (a ps's variables are lost and TensorFlow requires the coordinator to
  restart and restore its checkpoint; the workers restart with it so nothing holds a stale session).
- ``tf1``: a worker alone, the chief included (MonitoredTrainingSession waits for the chief's model
  again; a restarted chief restores from its checkpoint dir); a ps: every task (its variables
  are lost: the chief restores them from the last checkpoint).
- ``mwms``: every task (each worker takes part in every step: the group restarts and resumes from
  its checkpoint); an evaluator alone.

Which exits are retried (like Kubeflow's ExitCode policy): ``signal`` (the default) retries a
command killed by a signal or reporting one, status 128-255 (137 SIGKILL and the OOM killer, 139
SIGSEGV, 143 SIGTERM); 1-127 are the program's own verdict and are not retried.  ``any`` retries
every non-zero status.

Bounds: at most `max_restarts` restarts in the step (a group restart counts once) and
`max_per_task` for one task (every time its command starts again, a group's restarts included); a
task that fails again less than `crash_window` seconds after its command ran again is a crash
loop, and the step ends at once.  Restart k of a task waits ``backoff * 2**(k-1)`` seconds, at
most MAX_BACKOFF (1, 2, 4, 8, 16, 30, 30 ... with the default backoff of 1 s).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, NamedTuple, Optional, Sequence, Tuple

RETRY_ON = ("signal", "any")
MAX_BACKOFF = 30.0  # seconds: the longest wait before a restart


@dataclass(frozen=True)
class RestartPolicy:
    """The bounds of restarts in one step (max_restarts 0: never restart)."""

    max_restarts: int = 0  # restarts in the whole step
    max_per_task: int = 3  # restarts of one task
    retry_on: str = "signal"  # 'signal': status 128-255 only; 'any': every non-zero status
    crash_window: float = 10.0  # seconds: failing again this soon after a restart is a crash loop
    backoff: float = 1.0  # seconds before the first restart of a task, doubled for each next one

    @property
    def enabled(self) -> bool:
        return self.max_restarts > 0 and self.max_per_task > 0


class Decision(NamedTuple):
    restart: bool
    reason: str  # one line: why not, or what (the restart's log line)
    attempt: int = 0  # this task's restart number (1 = its first), when restarting
    delay: float = 0.0  # seconds to wait before starting the command again
    crash_loop: bool = False
    group: bool = False  # every running task restarts, not this one alone


TASK, GROUP = "task", "group"


def restart_scope(strategy: str, role: str, is_chief: bool) -> Tuple[Optional[str], str]:
    """What restarts when a task of this role fails under `strategy` (see the module's docstring):
    (TASK or GROUP, why), or (None, why nothing can)."""
    if role == "evaluator" and strategy in ("pss", "mwms"):
        return TASK, "an evaluator only reads checkpoints"
    if strategy == "mwms":
        return GROUP, "under mwms every worker takes part in every step: the group resumes from its checkpoint"
    if strategy == "pss" and role == "worker" and not is_chief:
        return TASK, "the coordinator re-sends its functions and waits for the worker at its address"
    if strategy == "pss" and (role == "ps" or is_chief):
        return GROUP, "the coordinator must restart and restore its checkpoint"
    if strategy == "tf1" and (role in ("worker", "chief") or is_chief):
        return TASK, "MonitoredTrainingSession restores or waits for the chief's model"
    if strategy == "tf1" and role == "ps":
        return GROUP, "a ps's variables are lost: the chief restores them from its checkpoint"
    return None, f"a {role} is not restarted under {strategy}"


def retryable(status: int, retry_on: str) -> bool:
    """A non-zero exit status the policy retries (see the module's docstring)."""
    if status == 0:
        return False
    return retry_on == "any" or 128 <= status <= 255


def backoff_delay(policy: RestartPolicy, attempt: int) -> float:
    """Seconds before restart `attempt` (1-based) of a task: backoff * 2**(attempt-1), at most MAX_BACKOFF."""
    return min(policy.backoff * 2.0 ** max(attempt - 1, 0), MAX_BACKOFF)


def could_restart(policy: RestartPolicy, strategy: str, role: str, is_chief: bool, status: int) -> bool:
    """True when a failure with `status` may be restarted, budgets aside (a spoke asks: may its
    failure still be undone?)."""
    return policy.enabled and restart_scope(strategy, role, is_chief)[0] is not None \
        and retryable(status, policy.retry_on)


def _why_status(status: int) -> str:
    return f"status {status}" + (f" (signal {status - 128})" if 128 < status < 160 else "")


def decide(policy: RestartPolicy, *, name: str, strategy: str, role: str, is_chief: bool, status: int,
           step_restarts: int, task_restarts: int, since_restart: Optional[float]) -> Decision:
    """Restart the task `name` whose command exited with non-zero `status`, or not (with one line: for a
    restart, the log's line; else why not, in plain words and without the task's name).

    step_restarts: restarts decided in the step so far; task_restarts: of this task;
    since_restart: seconds since this task's command ran again after its last restart (None: never
    restarted; 0 when it never got to run again)."""
    if not policy.enabled:
        return Decision(False, "restarts are off (max restarts 0)")
    scope, why = restart_scope(strategy, role, is_chief)
    if scope is None:
        return Decision(False, why)
    if not retryable(status, policy.retry_on):
        return Decision(False, f"exit {status} is the program's own error, and only a task killed by a signal "
                               "(exit 128-255) is restarted")
    if since_restart is not None and since_restart < policy.crash_window:
        return Decision(False, f"it failed again {since_restart:.1f} s after restart {task_restarts}, within "
                               f"{policy.crash_window:g} s: a crash loop", crash_loop=True)
    if task_restarts >= policy.max_per_task:
        return Decision(False, f"it was restarted {task_restarts} times already (at most {policy.max_per_task} "
                               "per task)")
    if step_restarts >= policy.max_restarts:
        return Decision(False, f"the step's {policy.max_restarts} restarts are spent (max restarts "
                               f"{policy.max_restarts})")
    attempt = task_restarts + 1
    delay = backoff_delay(policy, attempt)
    of = min(policy.max_per_task, task_restarts + policy.max_restarts - step_restarts)
    budget = f"attempt {attempt} of {of} (step: restart {step_restarts + 1} of {policy.max_restarts})"
    if scope == GROUP:
        return Decision(True, f"restarting every task of the step in {delay:g} s: {name} exited with "
                              f"{_why_status(status)} ({why}); {budget}", attempt, delay, group=True)
    return Decision(True, f"restarting {name} in place in {delay:g} s: exited with {_why_status(status)}; {budget}",
                    attempt, delay)


def hang_victims(strategy: str, hung: Sequence[Tuple[int, str, bool]]) -> List[int]:
    """Which hung tasks (rank, role, is_chief) are ended (plan.train_progress.hung names them): when
    one's failure restarts its group, that one alone (the group's restart ends and starts the others;
    ending them too would count each as a failure of its own); else each hung task, restarted alone."""
    group = [rank for rank, role, chief in hung if restart_scope(strategy, role, chief)[0] == GROUP]
    return group[:1] if group else [rank for rank, _, _ in hung]
