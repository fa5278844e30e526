"""A checkpoint save is progress: while one runs, the progress capture reports "eval" once a second.

Why: the hub's hang rule (plan.train_progress.hung) ends a task that made no progress for
max(factor x its median step time, 60 s); a large model's save, or one to a slow shared file
system, can take longer, and is work, not a hang.  Like an evaluation batch, a save is progress
but no step ("eval": true in the report, tf_slurm_progress).  Installed with the capture by the
`sitecustomize` shim; it patches, once the program imports them:

- TensorFlow's object-based checkpoints (`TrackableSaver.save`: tf.train.Checkpoint save/write,
  CheckpointManager, tf_keras's TF-format weights and BackupAndRestore),
- TF1's `Saver.save` (MonitoredTrainingSession's CheckpointSaverHook included),
- Keras 3's `saving_lib.save_model` / `save_weights_only` (its `.keras` and `.weights.h5` files:
  ModelCheckpoint, BackupAndRestore).

One daemon thread, started at the first save, reports while any save runs.  The report also counts the saves: its
"saves" (the saves this process finished; saves that overlap, nested or in two threads, count as one) and "save_s"
(the seconds in them, from the first one's start to the last one's end, rounded to 0.001), set together as a save
ends, under the lock it takes anyway, and written at once: the save itself pays two lock takings, two clock reads
and two writes of the file (as it starts and as it ends); a training step pays nothing.  A failure turns the capture
off (tf_slurm_progress) and never touches the save.
"""

import functools
import threading
import time

try:  # in-process, as tf_for_slurm._shim.tf_slurm_save_progress
    from .tf_slurm_when_imported import when_imported
except ImportError:  # from the shim directory on PYTHONPATH (tf-slurm exec)
    from tf_slurm_when_imported import when_imported  # type: ignore[no-redef]

EVERY = 1.0  # s between reports while a save runs
_SAVES = (("tensorflow.python.checkpoint.checkpoint", "TrackableSaver", "save"),
          ("tensorflow.python.training.saver", "Saver", "save"),
          ("keras.src.saving.saving_lib", None, "save_model"),
          ("keras.src.saving.saving_lib", None, "save_weights_only"))
_WHAT = "the progress capture (saves)"
_MARK = "_tf_slurm_save_progress"


class _Saving:
    """How many saves run now; while any does, the capture's state says "eval" and is written.  The saves finished
    and the seconds in them go to the capture's `saved` as the last one running ends."""

    def __init__(self, cap):
        self.cap, self.depth, self.was, self.cond, self.thread = cap, 0, False, threading.Condition(), None
        self.began, self.saves, self.seconds = 0.0, 0, 0.0  # monotonic: when the saves running now began

    def enter(self):
        cap = self.cap
        with self.cond:
            self.depth += 1
            if self.depth == 1:
                self.was, cap.eval, self.began = cap.eval, True, time.monotonic()
            if self.thread is None:
                self.thread = threading.Thread(target=self._loop, name="tf-slurm-save-progress", daemon=True)
                self.thread.start()
            self.cond.notify()

    def leave(self):
        """A save ended; True when no other save runs (the capture's counters then have it: write them)."""
        with self.cond:
            self.depth -= 1
            if self.depth:
                return False
            self.saves, self.seconds = self.saves + 1, self.seconds + time.monotonic() - self.began
            self.cap.eval, self.cap.saved = self.was, (("saves", self.saves), ("save_s", round(self.seconds, 3)))
            return True

    def _loop(self):
        cap = self.cap
        while cap.on:
            with self.cond:
                while self.depth == 0:
                    self.cond.wait()
                self.cond.wait(EVERY)
                busy = self.depth > 0
            if busy and cap.on:
                try:
                    cap.flush(time.monotonic())
                except Exception as exc:
                    cap.fail(exc)


def install(cap):
    """Count the saves of this program as progress of the capture `cap` (tf_slurm_progress's)."""
    saving = _Saving(cap)
    for name, cls, method in _SAVES:
        when_imported(name, lambda module, c=cls, m=method: _patch(module, c, m, saving), _WHAT)


def _patch(module, cls_name, name, saving):
    owner = getattr(module, cls_name, None) if cls_name else module
    original = getattr(owner, name, None) if owner is not None else None
    if original is None or getattr(original, _MARK, False):
        return  # another version's layout, or patched already

    @functools.wraps(original)
    def save(*args, **kwargs):
        entered = saving.cap.on
        if entered:
            saving.enter()
            try:
                saving.cap.flush(time.monotonic())  # a save began: progress now
            except Exception as exc:
                saving.cap.fail(exc)
        try:
            return original(*args, **kwargs)
        finally:
            if entered and saving.leave() and saving.cap.on:
                try:
                    saving.cap.flush(time.monotonic())  # the save ended: its count, and no "eval" any more
                except Exception as exc:
                    saving.cap.fail(exc)

    setattr(save, _MARK, True)
    setattr(owner, name, save)
