"""Session hooks for the distributed MNIST example.

The generic hooks (worker barrier, step printing) live in the library, `tf_for_slurm.runtime.hooks`;
they are re-exported here so the example keeps the seed's `Hooks.py` layout.  This file adds the
hook that only makes sense for this model: held-out validation on the chief.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Callable, Optional

import numpy as np
import tensorflow as tf

log = logging.getLogger(__name__)

try:  # the library's generic hooks; absent only in a checkout older than the runtime
    from tf_for_slurm.runtime.hooks import BarrierOnChiefHook, PrintStepHook  # noqa: F401
except ImportError:  # pragma: no cover - keeps the example importable on its own
    BarrierOnChiefHook = PrintStepHook = None  # type: ignore[assignment,misc]


def evaluate(session, correct_count: tf.Tensor, x: tf.Tensor, y: tf.Tensor,
             images: np.ndarray, labels: np.ndarray, batch: int = 1000) -> float:
    """Held-out accuracy, in batches so memory does not grow with the set."""
    correct = 0
    for i in range(0, len(images), batch):
        correct += int(session.run(correct_count, feed_dict={x: images[i:i + batch],
                                                             y: labels[i:i + batch]}))
    return correct / max(1, len(images))


class ValidationHook(tf.compat.v1.train.SessionRunHook):
    """Chief-only: held-out accuracy every `every_steps` global steps and once at the end.

    Why a hook: the chief's evaluation must see the trained variables on the ps before the
    session closes; `end()` is the last moment they are reachable through this session.  The final
    figure goes to the log, to TensorBoard (`heldout/accuracy`) and to `model_dir/metrics.json`
    so scripts and tests can read it without parsing logs.
    """

    def __init__(self, *, correct_count: tf.Tensor, x: tf.Tensor, y: tf.Tensor,
                 images: np.ndarray, labels: np.ndarray, model_dir: str, every_steps: int = 0,
                 extra: Optional[Callable[[], dict]] = None):
        self._count, self._x, self._y = correct_count, x, y
        self._images, self._labels = images, labels
        self._model_dir, self._every = model_dir, every_steps
        self._extra = extra
        self._last_eval_step = -1
        self._writer = None
        self.final_accuracy: Optional[float] = None
        self.final_step: Optional[int] = None

    def begin(self) -> None:
        self._global_step = tf.compat.v1.train.get_global_step()
        self._writer = tf.compat.v1.summary.FileWriterCache.get(self._model_dir)

    def after_create_session(self, session, coord) -> None:
        # a resumed run evaluates at the next multiple of every_steps, not at once
        self._last_eval_step = int(session.run(self._global_step))

    def before_run(self, run_context):
        return tf.compat.v1.train.SessionRunArgs(self._global_step)

    def after_run(self, run_context, run_values) -> None:
        step = int(run_values.results)
        if self._every and step // self._every > self._last_eval_step // self._every and step > 0:
            self._log_eval(run_context.session, step)

    def _log_eval(self, session, step: int) -> float:
        acc = evaluate(session, self._count, self._x, self._y, self._images, self._labels)
        self._last_eval_step = step
        log.info("global step %d: held-out accuracy %.4f (%d examples)", step, acc, len(self._images))
        summary = tf.compat.v1.Summary(value=[tf.compat.v1.Summary.Value(tag="heldout/accuracy",
                                                                         simple_value=acc)])
        self._writer.add_summary(summary, step)
        self._writer.flush()
        return acc

    def end(self, session) -> None:
        step = int(session.run(self._global_step))
        acc = self._log_eval(session, step)
        self.final_accuracy, self.final_step = acc, step
        metrics = {"accuracy": acc, "heldout_examples": int(len(self._images)), "global_step": step}
        if self._extra:
            metrics.update(self._extra())
        path = os.path.join(self._model_dir, "metrics.json")
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(metrics, f, indent=1, sort_keys=True)
        os.replace(tmp, path)  # readers never see half a file
