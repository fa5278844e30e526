"""Stop on a signal and resume exactly, for TF2 custom training loops (MWMS and PSS).

    stop = shared_stop_request()                      # SIGUSR1 / SIGTERM -> stop.requested
    ckpt = LoopCheckpoint(model_dir, is_chief=chief, model=model, optimizer=opt)
    step = ckpt.restore()                             # 0, or the step of the last checkpoint
    agreed = stop_agreement(strategy, stop)           # MWMS: every worker stops at the same step
    while step < target and not agreed():
        train_step(...); step += 1
    ckpt.save(step)                                   # every MWMS worker calls it

Why the agreement: MWMS steps are collective, so a worker that stops one step before the others
leaves them waiting in an all-reduce forever; one extra scalar all-reduce per check makes every
worker see the same decision at the same step.  A PSS coordinator alone decides, so
`stop.requested` is enough there.

The step is kept in the checkpoint's name (`ckpt-<step>`), so `tf-slurm batch-step` reads how
far training got without TensorFlow.  TensorFlow is imported only inside the functions.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from typing import Any, Callable, Optional

from tf_for_slurm.errors import UsageError, bad_value
from tf_for_slurm.plan.requeue import step_in_name

log = logging.getLogger(__name__)


class LoopCheckpoint:
    """A `tf.train.Checkpoint` of `objects` in `directory`, numbered by the training step.

    The chief writes to `directory`; other MWMS workers must save too (a save may need their part
    of a collective) and write to a private temporary directory that is removed at once.  Every
    task restores from `directory`, which must be on a file system they all see.
    """

    def __init__(self, directory: str, *, is_chief: bool = True, max_to_keep: int = 3, **objects: Any):
        if not isinstance(directory, str) or not directory:
            raise UsageError(bad_value("directory", directory, "a checkpoint directory path"))
        if not objects:
            raise UsageError("LoopCheckpoint: expected the objects to save as keywords, e.g. model=model")
        import tensorflow as tf

        self.directory, self.is_chief = directory, bool(is_chief)
        self._checkpoint = tf.train.Checkpoint(**objects)
        self._manager = tf.train.CheckpointManager(self._checkpoint, directory, max_to_keep=max_to_keep)
        # created here on every task, not in the chief's first save: inside an MWMS scope (Keras
        # fit runs its callbacks there) creating a variable is a collective broadcast
        self._checkpoint.save_counter  # noqa: B018
        self.restored_from: Optional[str] = None

    def restore(self) -> int:
        """Restore the last checkpoint of `directory`, if any; the step to continue from (0: none)."""
        path = self._manager.latest_checkpoint
        if not path:
            return 0
        self._checkpoint.restore(path).expect_partial()
        self.restored_from = path
        step = step_in_name(path) or 0
        log.info("resumed from %s at step %d", path, step)
        return step

    def save(self, step: int) -> Optional[str]:
        """Save at `step`; the chief's path (None on other workers)."""
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise UsageError(bad_value("step", step, "a training step, an int >= 0"))
        if self.is_chief:
            return self._manager.save(checkpoint_number=step)
        scratch = tempfile.mkdtemp(prefix="tf_slurm_ckpt_")
        try:
            self._checkpoint.write(os.path.join(scratch, f"ckpt-{step}"))
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return None


def stop_agreement(strategy: Any, stop: Any) -> Callable[[], bool]:
    """`check()` -> True on every worker at the same call once any worker's `stop` was requested.

    Each call is one all-reduce of a scalar, so every worker must call it at the same points of
    its loop (once per step, or every N steps on all of them).
    """
    import tensorflow as tf

    @tf.function
    def _total(flag: Any) -> Any:
        def replica(value: Any) -> Any:
            # an op on the input (not the input itself): an input has no device to reduce to and
            # MWMS refuses it ("destinations can not be empty", TF 2.21)
            local = value * tf.ones([])
            return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, local)

        return strategy.experimental_local_results(strategy.run(replica, args=(flag,)))[0]

    def check() -> bool:
        return float(_total(tf.constant(1.0 if stop.requested else 0.0))) > 0.0

    return check


__all__ = ["LoopCheckpoint", "stop_agreement"]
