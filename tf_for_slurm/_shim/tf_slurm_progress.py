"""An unmodified script's training progress, written to TF_SLURM_PROGRESS_FILE for its supervisor.

Installed by the `sitecustomize` shim under `tf-slurm exec` when the supervisor watches a progress
file (a progress deadline) and TF_SLURM_PROGRESS_CAPTURE is not `0`; it patches TensorFlow and
Keras only once the program imports them (tf_slurm_when_imported).  Why: the supervisor kills a
command that reported progress once and then went silent (plan/progress.py); a script that never
calls `tf_for_slurm.report_progress()` never reported, so its hang went unnoticed.  Sources:

- Keras `fit` (Keras 3 `keras.src.callbacks.callback_list`, Keras 2 `keras.src.callbacks`, tf_keras
  `tf_keras.src.callbacks`: their CallbackList): each train batch is a step (`epoch * steps + batch
  + 1`: steps_per_execution and initial_epoch counted), an evaluation or prediction batch is progress
  but no step ("eval": true), an epoch's end sets "epoch" (epochs completed, so 3 after the third)
  and the loss, `params` the target (epochs * steps).  Training ends: the final state is written
  at once, whatever the throttle.
- Custom loops: the optimizer's apply(_gradients) (Keras 3, Keras 2, tf_keras, legacy ones included)
  only registers the optimizer (inside tf.function it runs once, at trace time); a daemon thread
  reads its `iterations` once a second and reports it when it advanced, never while a `fit` runs
  (fit's own count wins; what fit left is taken as the new baseline).
- TF1 (`MonitoredSession` and `MonitoredTrainingSession`): once a second, a `run` call also fetches
  the graph's global step (stripped from the result); with no global step, the count of calls.  A
  clean close reads it once more, so the file ends with the final global step.
- ParameterServerStrategy's ClusterCoordinator outside fit: each closure scheduled and done is a
  step, counted by the same thread (scheduled minus those queued or running: a coordinator waiting
  in join() still reports its workers' progress, and workers that hang stop it), and written as
  join() returns; the optimizers' counts are then not reported.

The file holds one line of JSON, e.g. {"v":1,"step":120,"t":1795806241.25,"kind":"keras","loss":0.31,"epoch":2,
"target":400,"saves":1,"save_s":3.25} (saves: the checkpoint saves this process finished, save_s: the seconds in
them, tf_slurm_save_progress), rewritten in place by one pwrite at 0 (padded with spaces to the old line's length,
then ftruncate), so its mtime advances, as the supervisor's deadline expects, and a reader sees the old line or the
new one.  At most one write per 0.5 s (TF1, optimizer, PSS: per second); the training thread pays a counter and a
clock read per step, a loss tensor's `.numpy()` at most once a second.  The file is never created (the supervisor
does) nor followed as a symlink.  Any failure turns the capture off with one line on stderr; the training goes on.
"""

import atexit
import functools
import json
import math
import sys
import threading
import time
import weakref

try:  # in-process, as tf_for_slurm._shim.tf_slurm_progress
    from .tf_slurm_line_file import write_line
    from .tf_slurm_when_imported import when_imported
except ImportError:  # from the shim directory on PYTHONPATH (tf-slurm exec)
    from tf_slurm_line_file import write_line  # type: ignore[no-redef]
    from tf_slurm_when_imported import when_imported  # type: ignore[no-redef]

WRITE_EVERY = 0.5  # s between writes of the file
MAX_LINE = 512  # bytes: the reader's bound (plan.train_progress); a longer file is cut to the new line
SYNC_EVERY = 1.0  # s between reads that may wait for the device: a loss tensor, iterations, the global step
CLOSE_READ_MS = 2000  # ms for the global step's read as a TF1 session closes
_CALLBACKS = ("keras.src.callbacks.callback_list", "keras.src.callbacks", "tf_keras.src.callbacks")
_OPTIMIZERS = (("keras.src.optimizers.base_optimizer", "BaseOptimizer", "apply"),  # apply_gradients calls it
               ("keras.src.optimizers.optimizer", "_BaseOptimizer", "apply_gradients"),
               ("keras.src.optimizers.legacy.optimizer_v2", "OptimizerV2", "apply_gradients"),
               ("tf_keras.src.optimizers.optimizer", "_BaseOptimizer", "apply_gradients"),
               ("tf_keras.src.optimizers.legacy.optimizer_v2", "OptimizerV2", "apply_gradients"))
_MONITORED = "tensorflow.python.training.monitored_session"
_COORDINATOR = "tensorflow.python.distribute.coordinator.cluster_coordinator"
_MARK = "_tf_slurm_progress"
_WHAT = "the progress capture"
_monotonic = time.monotonic
_capture = []  # the one _Capture of this process


def install(path):
    """Report this program's training progress to `path` (it must exist), once TensorFlow is imported."""
    if _capture:
        return
    _capture.append(_Capture(path))
    cap = _capture[0]
    for name in _CALLBACKS:
        when_imported(name, lambda module: _patch_callbacks(module, cap), _WHAT)
    for name, cls, method in _OPTIMIZERS:
        when_imported(name, lambda module, c=cls, m=method: _patch_optimizer(module, c, m, cap), _WHAT)
    when_imported(_MONITORED, lambda module: _patch_monitored(module, cap), _WHAT)
    when_imported(_COORDINATOR, lambda module: _patch_coordinator(module, cap), _WHAT)


def _write(path, data):
    """Replace the file's line by `data` in place (tf_slurm_line_file)."""
    write_line(path, data, MAX_LINE)


def _as_float(value, sync):
    """A loss as a float: a Python or NumPy number as it is, a tensor's only with `sync`; else None."""
    if isinstance(value, (float, int)) and not isinstance(value, bool):
        return float(value)
    try:
        if type(value).__module__ == "numpy" and getattr(value, "ndim", 1) == 0:
            return float(value)
        if sync and hasattr(value, "numpy"):
            return float(value.numpy())
    except Exception:  # a symbolic or remote value, a vector: no loss
        pass
    return None


class _Capture:
    """The state reported, its writes, and the optimizers' sampler."""

    def __init__(self, path):
        self.path, self.on, self.lock, self.saved = path, True, threading.Lock(), (("saves", 0), ("save_s", 0.0))
        self.step, self.kind, self.epoch, self.target, self.eval = 0, None, None, None, False
        self.loss_raw, self.loss = None, None  # the latest loss as given, the latest as a float
        self.due, self.synced = 0.0, -SYNC_EVERY  # monotonic: next write, last tensor read
        self.fit, self.fit_ends, self.base, self.steps = False, 0, 0, None
        self.optimizers, self.seen, self.sampled_ends = {}, {}, 0  # id -> weakref; id -> iterations
        self.coordinator, self.scheduled, self.done = None, 0, 0  # PSS: a weakref, closures scheduled, done
        self.sampler, self.stop = None, threading.Event()
        self.calls, self.fetch_due, self.fetched = 0, 0.0, 0  # TF1 runs; next global-step fetch

    def fail(self, exc):
        if self.on:
            self.on = False
            sys.stderr.write(f"tf_for_slurm: progress capture off: {type(exc).__name__}: {exc}\n")

    def flush(self, now, final=False):
        """Write the state now (the caller checked the throttle)."""
        with self.lock:
            self.due = now + WRITE_EVERY
            sync = final or now - self.synced >= SYNC_EVERY
            loss = _as_float(self.loss_raw, sync)
            if loss is not None and not isinstance(self.loss_raw, (float, int)):
                self.synced = now
            if loss is not None and math.isfinite(loss):
                self.loss = float(f"{loss:.6g}")
            data = {"v": 1, "step": max(int(self.step), 0), "t": round(time.time(), 3), "kind": self.kind or "user"}
            for key, value in [("loss", self.loss), ("epoch", self.epoch), ("target", self.target), *self.saved]:
                if value is not None:
                    data[key] = value
            if self.eval:
                data["eval"] = True
            _write(self.path, (json.dumps(data, separators=(",", ":")) + "\n").encode())

    def tick(self):
        now = _monotonic()
        if now >= self.due:
            self.flush(now)

    def report(self, step, kind):
        """A step counted by something other than fit (optimizer, tf1, pss): fit's extras are gone."""
        self.step, self.kind, self.eval = step, kind, False
        self.loss_raw = self.loss = self.epoch = self.target = None

    # -- Keras fit: called with the CallbackList's arguments --------------------------------------
    def train_begin(self, callbacks, *args, **kwargs):
        params = getattr(callbacks, "params", None) or {}
        epochs, steps = params.get("epochs"), params.get("steps")
        self.steps = steps if isinstance(steps, int) and steps > 0 else None
        self.report(0, "keras")
        self.target = epochs * self.steps if isinstance(epochs, int) and epochs > 0 and self.steps else None
        self.fit, self.base = True, 0

    def epoch_begin(self, callbacks, epoch=None, *args, **kwargs):
        self.base = epoch * self.steps if isinstance(epoch, int) and self.steps else self.step

    def train_batch(self, callbacks, batch=None, logs=None, *args, **kwargs):
        self.step = self.base + batch + 1 if batch.__class__ is int else self.step + 1
        self.loss_raw = logs.get("loss") if logs.__class__ is dict else None
        self.kind, self.eval = "keras", False
        now = _monotonic()
        if now >= self.due:
            self.flush(now)

    def eval_batch(self, callbacks, *args, **kwargs):
        self.eval, self.kind = True, self.kind or "keras"
        self.tick()

    def epoch_end(self, callbacks, epoch=None, logs=None, *args, **kwargs):
        if isinstance(epoch, int):
            self.epoch = epoch + 1
        if isinstance(logs, dict) and "loss" in logs:
            self.loss_raw = logs["loss"]
        self.tick()

    def train_end(self, callbacks, *args, **kwargs):
        self.fit, self.fit_ends = False, self.fit_ends + 1
        self.flush(_monotonic(), final=True)

    # -- custom loops: the optimizers' iterations, read by a thread of its own --------------------
    def watch(self, source, coordinator=False):
        """Sample `source` (an optimizer, or a PSS coordinator) from now on."""
        if coordinator:
            self.coordinator = weakref.ref(source)
        else:
            self.optimizers[id(source)] = weakref.ref(source)
        if self.sampler is None:
            self.sampler = threading.Thread(target=self.sample_loop, name="tf_slurm_progress", daemon=True)
            self.sampler.start()
            atexit.register(self.last_sample)

    def sample_loop(self):
        while True:
            last = self.stop.wait(SYNC_EVERY)
            _safely(self, self.sample)
            if last:
                return

    def last_sample(self):  # the program ends: one more look, unless a read hangs (a ps gone)
        self.stop.set()
        self.sampler.join(SYNC_EVERY)

    def sample(self):
        if not self.on:
            return
        if self.fit:  # fit's own count wins
            self.sampled_ends = -1
            return
        baseline, best = self.sampled_ends != self.fit_ends, None
        self.sampled_ends = self.fit_ends
        coordinator = self.coordinator and self.coordinator()
        if coordinator is not None:
            return self.sample_pss(coordinator)
        for key, ref in list(self.optimizers.items()):
            optimizer = ref()
            try:
                value = int(optimizer.iterations.numpy())
            except Exception:  # gone, a graph-mode optimizer, its ps unreachable: not a source
                self.optimizers.pop(key, None)
                self.seen.pop(key, None)
                continue
            if value > 0 and value != self.seen.get(key) and not baseline:
                best = value if best is None else max(best, value)
            self.seen[key] = value
        if best is not None:
            self.report(best, "optimizer")
            self.flush(_monotonic())

    def sample_pss(self, coordinator, joined=False):
        queue = coordinator._cluster.closure_queue  # pending: queued, or running on a worker
        done = self.scheduled if joined else self.scheduled - queue._queue.qsize() - queue._inflight_closure_count
        if done > self.done or joined:
            self.done = max(done, self.done)
            self.report(self.done, "pss")
            self.flush(_monotonic(), final=joined)

    # -- TF1 MonitoredSession ---------------------------------------------------------------------
    def global_step(self, session):
        """The global step variable of the session's graph (cached on the session), or None."""
        found = session.__dict__.get(_MARK, _MARK)
        if found is _MARK:
            if session.graph is None:  # being recreated
                return None
            from tensorflow.python.training import training_util

            found = training_util.get_global_step(session.graph)
            session.__dict__[_MARK] = found
        return found

    def tf1(self, value, now):
        self.fetched = self.calls
        self.report(self.calls if value is None else int(value), "tf1")
        self.flush(now)

    def tf1_close(self, session):
        if self.kind != "tf1" or self.fetched == self.calls:
            return
        raw, step = session._tf_sess(), self.global_step(session)
        if raw is None or step is None:
            return self.tf1(None, _monotonic())
        from tensorflow.core.protobuf import config_pb2

        self.tf1(raw.run(step, options=config_pb2.RunOptions(timeout_in_ms=CLOSE_READ_MS)), _monotonic())


def _safely(cap, fn, *args):
    """fn(*args); an error turns the capture off, never reaches the program."""
    try:
        fn(*args)
    except Exception as exc:
        cap.fail(exc)


def _wrap(cls, name, hook, cap):
    """cls.name runs as before, then hook(self, *args, **kwargs) (also when it raised)."""
    original = getattr(cls, name)

    @functools.wraps(original)
    def wrapper(self, *args, **kwargs):
        try:
            return original(self, *args, **kwargs)
        finally:
            if cap.on:
                try:
                    hook(self, *args, **kwargs)
                except Exception as exc:
                    cap.fail(exc)

    setattr(cls, name, wrapper)


def _patch_callbacks(module, cap):
    cls = getattr(module, "CallbackList", None)
    if cls is None or _MARK in cls.__dict__:  # Keras 3: the package re-exports callback_list's class
        return
    for name, hook in (("on_train_begin", cap.train_begin), ("on_epoch_begin", cap.epoch_begin),
                       ("on_train_batch_end", cap.train_batch), ("on_test_batch_end", cap.eval_batch),
                       ("on_predict_batch_end", cap.eval_batch), ("on_epoch_end", cap.epoch_end),
                       ("on_train_end", cap.train_end)):
        _wrap(cls, name, hook, cap)
    setattr(cls, _MARK, True)


def _patch_optimizer(module, cls_name, method, cap):
    cls = getattr(module, cls_name, None)
    if cls is None or _MARK in cls.__dict__:
        return
    original, optimizers = getattr(cls, method), cap.optimizers

    @functools.wraps(original)
    def apply(self, *args, **kwargs):
        result = original(self, *args, **kwargs)  # its variables exist afterwards
        ref = optimizers.get(id(self))
        if cap.on and (ref is None or ref() is not self):
            _safely(cap, cap.watch, self)
        return result

    setattr(cls, method, apply)
    setattr(cls, _MARK, True)


def _patch_monitored(module, cap):
    cls = getattr(module, "_MonitoredSession", None)
    if cls is None or _MARK in cls.__dict__:
        return
    run, close_internal = cls.run, cls._close_internal

    @functools.wraps(run)
    def monitored_run(self, fetches, *args, **kwargs):
        if not cap.on:
            return run(self, fetches, *args, **kwargs)
        cap.calls += 1
        now = _monotonic()
        if now < cap.fetch_due:
            return run(self, fetches, *args, **kwargs)
        cap.fetch_due = now + SYNC_EVERY
        try:
            step = cap.global_step(self)
        except Exception as exc:
            cap.fail(exc)
            return run(self, fetches, *args, **kwargs)
        if step is None:
            result, value = run(self, fetches, *args, **kwargs), None
        else:  # the global step fetched along, stripped from the result
            result, value = run(self, [fetches, step], *args, **kwargs)
        _safely(cap, cap.tf1, value, now)
        return result

    @functools.wraps(close_internal)
    def monitored_close(self, *args, **kwargs):
        if cap.on and not (args[0] if args else kwargs.get("exception_type")):  # a clean close
            _safely(cap, cap.tf1_close, self)
        return close_internal(self, *args, **kwargs)

    cls.run, cls._close_internal = monitored_run, monitored_close
    setattr(cls, _MARK, True)


def _patch_coordinator(module, cap):
    cls = getattr(module, "ClusterCoordinator", None)
    if cls is None or _MARK in cls.__dict__:
        return
    schedule, join = cls.schedule, cls.join

    @functools.wraps(schedule)
    def scheduled(self, *args, **kwargs):
        result = schedule(self, *args, **kwargs)
        if cap.on and not cap.fit:  # fit under PSS schedules its steps too: its own count wins
            cap.scheduled += 1
            if cap.coordinator is None or cap.coordinator() is not self:
                _safely(cap, cap.watch, self, True)
        return result

    @functools.wraps(join)
    def joined(self, *args, **kwargs):
        result = join(self, *args, **kwargs)  # every closure scheduled is done
        if cap.on and not cap.fit and cap.coordinator is not None and cap.coordinator() is self:
            _safely(cap, cap.sample_pss, self, True)
        return result

    cls.schedule, cls.join = scheduled, joined
    setattr(cls, _MARK, True)
