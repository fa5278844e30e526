"""Stop `Model.fit` on a signal with a checkpoint, and resume it exactly (single worker and MWMS).

    resume = StopAndResume(model_dir, target=EPOCHS * STEPS)   # SIGUSR1 / SIGTERM -> stop
    first = resume.restore(model, steps_per_epoch=STEPS)       # weights, optimizer, global step
    model.fit(data, epochs=EPOCHS, steps_per_epoch=STEPS, initial_epoch=first, callbacks=[resume])

Why not `BackupAndRestore`: it deletes its backup when `fit` returns after `stop_training`, so it
cannot carry a stop-then-requeue.  Here the checkpoint is the same as `LoopCheckpoint`'s
(`ckpt-<global step>`, so `tf-slurm batch-step` reads the step without TensorFlow): written when
`fit` ends, on a signal or at the target.  A run restored at the target gets
`initial_epoch == epochs`, so `fit` trains nothing and returns at once.  Under MWMS every worker
agrees on the stop at the same batch (one scalar all-reduce per batch), as in custom loops.
Tested on one worker and MWMS; for ParameterServerStrategy the PSS example's custom loop with
`resume.LoopCheckpoint` is the tested way.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Optional

import tensorflow as tf

from tf_for_slurm.errors import UsageError, bad_value
from tf_for_slurm.host.stop_request import shared_stop_request
from tf_for_slurm.runtime.resume import LoopCheckpoint, stop_agreement

log = logging.getLogger(__name__)


class StopAndResume(tf.keras.callbacks.Callback):
    """Ends `fit` at the next batch after a stop signal or at global step `target`, then saves."""

    def __init__(self, directory: str, target: int, stop: Any = None):
        super().__init__()
        if isinstance(target, bool) or not isinstance(target, int) or target < 1:
            raise UsageError(bad_value("target", target, "the global step to train to, an int >= 1"))
        if not isinstance(directory, str) or not directory:
            raise UsageError(bad_value("directory", directory, "a checkpoint directory path"))
        self.directory, self.target = directory, target
        self.stop = stop if stop is not None else shared_stop_request()
        self._checkpoint: Optional[LoopCheckpoint] = None
        self._agreed: Any = None

    def _ensure(self, model: Any) -> LoopCheckpoint:
        if self._checkpoint is None:
            if model.optimizer is None:
                raise UsageError("StopAndResume: compile the model before restore() or fit()")
            strategy = model.distribute_strategy
            chief = bool(getattr(strategy.extended, "should_checkpoint", True))
            self._checkpoint = LoopCheckpoint(self.directory, is_chief=chief, model=model,
                                              optimizer=model.optimizer)
            if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
                self._agreed = stop_agreement(strategy, self.stop)
        return self._checkpoint

    def restore(self, model: Any, steps_per_epoch: int) -> int:
        """Restore the last checkpoint into `model`; the epoch to pass as fit's `initial_epoch`
        (ceil(target / steps_per_epoch), fit's `epochs`, once the checkpoint is at the target)."""
        if isinstance(steps_per_epoch, bool) or not isinstance(steps_per_epoch, int) or steps_per_epoch < 1:
            raise UsageError(bad_value("steps_per_epoch", steps_per_epoch, "an int >= 1"))
        step = self._ensure(model).restore()
        if step >= self.target:
            log.info("checkpoint at global step %d >= target %d: nothing to train", step, self.target)
        epochs = -(-self.target // steps_per_epoch)
        return epochs if step >= self.target else min(step // steps_per_epoch, epochs)

    def _step(self) -> int:
        return int(self.model.optimizer.iterations.numpy())

    def on_train_begin(self, logs: Any = None) -> None:
        self._ensure(self.model)

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        stop = self._agreed() if self._agreed is not None else self.stop.requested
        if stop or self._step() >= self.target:
            self.model.stop_training = True

    def on_train_end(self, logs: Any = None) -> None:
        step = self._step()
        path = self._ensure(self.model).save(step)  # every MWMS worker saves (see LoopCheckpoint)
        if path:
            at = self.stop.at if self.stop.requested else None  # set with the request
            how = ("at the target" if step >= self.target else "at the end of fit") if at is None \
                else f"{time.monotonic() - at:.1f} s after SIG{self.stop.signal}"
            log.info("checkpoint %s written at global step %d, %s", path, step, how)


__all__ = ["StopAndResume"]
