"""TensorFlow's PreemptionCheckpointHandler, told by our stop request, exiting with the status
`tf-slurm batch-step` reads as "checkpointed, requeue".

    handler = preemption_handler(strategy, checkpoint, model_dir)   # restores the last checkpoint
    while step < target:
        handler.run(train_step, ...)          # or train, then handler.save_checkpoint_if_preempted()

Why: on a machine that is not Google's, `tf.distribute.experimental.PreemptionCheckpointHandler`
(MultiWorkerMirroredStrategy) watches SIGTERM only, and exits 42 after its checkpoint.  On Slurm
the stop that matters is the time-limit warning (`#SBATCH --signal=B:URG@N`) that `batch-step`
passes on as SIGUSR1 to the tasks; SIGTERM comes only KillWait seconds before SIGKILL, and a
script that does not take SIGUSR1 dies of it (status 138) with no checkpoint.  `termination_config`
gives the handler a watcher that follows the process's `StopRequest` (SIGUSR1, SIGUSR2, SIGTERM by
default, TF_SLURM_STOP_SIGNALS), so whichever stop arrives first makes every worker save at the
step the handler agrees on (through the coordination service) and exit with `exit_code`: 42 by
default, which `batch-step` reads as "checkpointed, requeue" when the checkpoint advanced
(`plan.requeue.CHECKPOINTED_STATUSES`).

What TensorFlow does with a watcher function (TF 2.21, failure_handling.py): it installs no SIGTERM
handler of its own and polls the function every second from a thread, so the checkpoint comes at
most about a second plus one step after the signal.  `grace_period` is 0: save at the next agreed
step and exit, no training on into the warning's margin.  On Google Cloud machines TensorFlow
replaces the handler's behaviour with its own (maintenance events, exit 143); this helper is for
Slurm clusters.  TensorFlow is imported only inside the functions.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, Callable, Optional

from tf_for_slurm.errors import UsageError, bad_value
from tf_for_slurm.host.stop_request import shared_stop_request
from tf_for_slurm.plan.requeue import CHECKPOINTED_STATUSES

log = logging.getLogger(__name__)

#: PreemptionCheckpointHandler's own exit status off Google's machines; batch-step requeues on it
EXIT_CHECKPOINTED = CHECKPOINTED_STATUSES[0]

HANDLER_WHAT = "PreemptionCheckpointHandler will save at the agreed step and exit"


def stop_watcher(stop: Any, exit_code: int = EXIT_CHECKPOINTED) -> Callable[[], bool]:
    """A `termination_watcher_fn`: True once `stop` is requested (logged once, with the signal)."""
    seen: list = []

    def watcher() -> bool:
        if not stop.requested:
            return False
        if not seen:
            seen.append(True)
            since = stop.seconds_since() if hasattr(stop, "seconds_since") else None
            log.warning("SIG%s seen%s: %s %d", stop.signal or "?",
                        f" {since:.1f} s ago" if since is not None else "", HANDLER_WHAT, exit_code)
        return True

    return watcher


def _exit_with(code: int) -> Callable[[], None]:
    def exit_fn() -> None:
        log.info("PreemptionCheckpointHandler: checkpoint saved, exiting with status %d", code)
        sys.exit(code)

    return exit_fn


def termination_config(stop_request: Any = None, exit_code: int = EXIT_CHECKPOINTED, grace_period: int = 0,
                       save_fn: Optional[Callable[..., Any]] = None) -> Any:
    """`tf.distribute.experimental.TerminationConfig` for PreemptionCheckpointHandler on Slurm.

    stop_request: what the watcher follows; default the process's shared `StopRequest`, installed
    for the stop signals now (create the handler before training starts, so an early warning is
    held by it rather than killing the process).  exit_code: the status after the checkpoint (42:
    `batch-step` requeues).  grace_period: seconds TensorFlow may train on after the stop before
    its final checkpoint (0: save at the next agreed step).  save_fn: passed to TensorFlow as is.
    """
    if isinstance(exit_code, bool) or not isinstance(exit_code, int) or not 0 <= exit_code <= 255:
        raise UsageError(bad_value("exit_code", exit_code, "an exit status, an int 0-255"))
    if isinstance(grace_period, bool) or not isinstance(grace_period, (int, float)) or grace_period < 0:
        raise UsageError(bad_value("grace_period", grace_period, "seconds >= 0"))
    import tensorflow as tf

    stop = stop_request if stop_request is not None else shared_stop_request(what=f"{HANDLER_WHAT} {exit_code}")
    return tf.distribute.experimental.TerminationConfig(
        termination_watcher_fn=stop_watcher(stop, exit_code), exit_fn=_exit_with(exit_code),
        grace_period=grace_period, save_fn=save_fn)


def preemption_handler(strategy_or_resolver: Any, checkpoint: Any, checkpoint_dir: Optional[str] = None,
                       stop_request: Any = None, exit_code: int = EXIT_CHECKPOINTED, grace_period: int = 0) -> Any:
    """`tf.distribute.experimental.PreemptionCheckpointHandler` with `termination_config(...)`.

    strategy_or_resolver: the MultiWorkerMirroredStrategy (its `cluster_resolver` is used) or a
    cluster resolver.  checkpoint: a `tf.train.Checkpoint` (then `checkpoint_dir` is required) or a
    `tf.train.CheckpointManager`.  The handler restores the latest checkpoint when it is built.
    """
    import tensorflow as tf

    resolver = getattr(strategy_or_resolver, "cluster_resolver", strategy_or_resolver)
    if isinstance(checkpoint, tf.train.Checkpoint) and not checkpoint_dir:
        raise UsageError(bad_value("checkpoint_dir", checkpoint_dir,
                                   "a directory (required with a tf.train.Checkpoint)"))
    config = termination_config(stop_request, exit_code=exit_code, grace_period=grace_period)
    return tf.distribute.experimental.PreemptionCheckpointHandler(resolver, checkpoint, checkpoint_dir, config)


__all__ = ["EXIT_CHECKPOINTED", "preemption_handler", "stop_watcher", "termination_config"]
