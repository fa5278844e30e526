"""An unmodified script's start-up phase, written to TF_SLURM_PHASE_FILE for its supervisor (plan/start_phase.py).

Installed by the `sitecustomize` shim under `tf-slurm exec` (TF_SLURM_PROGRESS_CAPTURE=0 turns it off with the
progress capture).  Why: a run that never reaches its first step shows every process alive and no step; the hub can
name the task the others wait for only if it knows where each one is (plan/start_watch.py).  The phases, as the
program passes them (TensorFlow 2.15.1 and 2.21 alike; patched only once the program imports the module):

- `starting` at once; `imported` once `tensorflow` is imported;
- `server`: server_lib.Server.start (tf.distribute.Server, tf.train.Server; the constructor starts it).  MWMS has no
  such point: its server starts inside the same C call that waits for the other workers, so it goes to `waiting`;
- `waiting` (with `detail`), then `ready` as the wait returns: MWMS's CollectiveAllReduceExtended.
  _initialize_multi_worker (the coordination service's barrier in context.ensure_initialized, then the health
  check's all-reduce when that is on), a TF1 non-chief's SessionManager.wait_for_session, a TF1 chief's
  SessionManager.prepare_session (MonitoredTrainingSession's ChiefSessionCreator), a PSS coordinator's
  ParameterServerStrategyV2._connect_to_cluster;
- `stepping`: the first collective or step starts: MWMS's first variable (its initial value, broadcast from worker
  0, waits for every worker: a worker that stalls after the strategy), Keras CallbackList.on_train_begin (Keras 3, Keras 2, tf_keras), a TF1
  _MonitoredSession's first run, a PSS ClusterCoordinator's first schedule, a custom loop's first strategy.run (the
  last three patched until their first call only, then TensorFlow's own method is put back);
- `serving`: Server.join().

A phase only moves forward, and `stepping` and `serving` are the last ones written.  `where` is the innermost frame
of the user's code in the main thread ("train.py:41 in load_data"; the standard library, site-packages, autograph's
generated code, the shim and tf_for_slurm skipped): set with each phase, and refreshed by a daemon thread every WHERE_EVERY s until `serving` or
the first training progress (tf_slurm_progress's count; at `stepping` when there is none): a task stuck before its
own `import tensorflow` is named at its line.  (MWMS's barrier holds the GIL: no thread runs while it waits, its
phase was written before.)  The file is never created (the supervisor does) nor followed as a symlink; each write is
one pwrite at 0 padded to the old length, then ftruncate, then the mtime set to the ns (the kernel's clock tick is
coarse: two writes in one tick would leave the mtime the supervisor watches unchanged).  About 7 phase writes per
process, a `where` write at most every WHERE_EVERY s; a forked child writes nothing.  Any failure turns the capture
off with one line on stderr; the program goes on.
"""

import functools
import json
import os
import sys
import threading
import time

try:  # in-process, as tf_for_slurm._shim.tf_slurm_start_phase
    from .tf_slurm_line_file import write_line
    from .tf_slurm_when_imported import when_imported
except ImportError:  # from the shim directory on PYTHONPATH (tf-slurm exec)
    from tf_slurm_line_file import write_line  # type: ignore[no-redef]
    from tf_slurm_when_imported import when_imported  # type: ignore[no-redef]

WHERE_EVERY = 2.0  # s between looks at the main thread's frame
MAX_BYTES = 512  # the file's bound (plan.start_phase.MAX_PHASE_BYTES)
MAX_WHERE = 120  # characters (plan.start_phase.MAX_WHERE)
MAX_DETAIL = 60  # characters (plan.start_phase.MAX_DETAIL)
PHASES = ("starting", "imported", "server", "waiting", "ready", "stepping", "serving")  # `training`: the supervisor's
LAST = ("stepping", "serving")  # nothing after them but the `where` refresh
BARRIER = "MultiWorkerMirroredStrategy's start barrier"
CHIEF = "the chief's session"
SESSION = "creating its session (the ps must answer)"
CLUSTER = "connecting to its ps and workers"
VARIABLES = "its first collective (its variables)"
FIRST = "its first step"
JOIN = "Server.join()"
_CALLBACKS = ("keras.src.callbacks.callback_list", "keras.src.callbacks", "tf_keras.src.callbacks")
_PROGRESS = ("tf_slurm_progress", "tf_for_slurm._shim.tf_slurm_progress")  # the progress capture, both imports
_ORDER = {name: i for i, name in enumerate(PHASES)}
_WHAT = "the start-up phase capture"
_MARK = "_tf_slurm_start_phase"
_HERE = os.path.dirname(os.path.abspath(__file__))
_phase = []  # the one _Phase of this process


def _write(path, data):
    """Replace the file's line by `data` in place (tf_slurm_line_file)."""
    write_line(path, data, MAX_BYTES)


def _line(name, t, since, where, detail):
    """The phase as one JSON line of at most MAX_BYTES (non-ASCII escaped: `where` cut until it fits)."""
    d = {"v": 1, "phase": name, "t": round(t, 3), "since": round(since, 3)}
    if detail:
        d["detail"] = detail[:MAX_DETAIL]
    while True:
        line = json.dumps({**d, "where": where} if where else d, separators=(",", ":")) + "\n"
        if len(line) <= MAX_BYTES or not where:
            return line.encode()
        where = where[:len(where) - max(1, (len(line) - MAX_BYTES) // 6)]


class _Phase:
    """The phase, its start and `where`; every write under one lock (the program's threads' and the looker's)."""

    def __init__(self, path):
        self.path, self.pid, self.lock, self.on = path, os.getpid(), threading.Lock(), True
        self.name, self.since, self.detail, self.where = "starting", time.time(), "", ""

    def fail(self, exc):
        if self.on:
            self.on = False
            sys.stderr.write(f"tf_for_slurm: start-up phase capture off: {type(exc).__name__}: {exc}\n")

    def enter(self, name, detail=""):
        """Move forward to phase `name` (never back; nothing after `stepping` or `serving`)."""
        if not self.on or self.name in LAST or os.getpid() != self.pid:
            return
        try:
            where = user_frame()
            with self.lock:
                if _ORDER[name] <= _ORDER[self.name] or self.name in LAST:
                    return
                self.name, self.since, self.detail, self.where = name, time.time(), detail, where or self.where
                self.flush()
        except Exception as exc:  # never break the program for a convenience
            self.fail(exc)

    def look(self):
        """Refresh `where` (written when it changed); True once the looker is done.  The frame is taken first: one
        taken before the first progress is still one of the first step."""
        name, where = self.name, user_frame()
        if self.finished():
            return True
        with self.lock:
            if self.on and where and where != self.where and name == self.name:  # else enter() wrote a newer one
                self.where = where
                self.flush()
        return False

    def flush(self):  # under the lock
        _write(self.path, _line(self.name, time.time(), self.since, self.where, self.detail))

    def finished(self):
        """The looker's end: `serving`, the first progress reported, or `stepping` with no progress capture."""
        if self.name == "serving" or not self.on or os.getpid() != self.pid:
            return True
        captures = [cap for name in _PROGRESS for cap in getattr(sys.modules.get(name), "_capture", ())
                    if getattr(cap, "on", False)]
        if any(getattr(cap, "step", 0) for cap in captures):
            return True  # its supervisor says `training` now
        return self.name == "stepping" and not captures


def _library_dirs():
    """The standard library's folders, the shim's and tf_for_slurm's (sysconfig costs ~2 ms)."""
    import sysconfig

    dirs = {_HERE, os.path.dirname(_HERE)}
    paths = sysconfig.get_paths()
    for key in ("stdlib", "platstdlib"):
        if paths.get(key):
            dirs.add(os.path.realpath(paths[key]))
    return tuple(d.rstrip(os.sep) + os.sep for d in dirs)


_LIBRARY = []
_GENERATED = "__autograph_generated_file"  # tf.function's rewrite of a function, in a temporary folder
_USERS = {}  # file name -> whether it is the user's code (cached: the looker walks the stack every 2 s)


def _users(filename):
    known = _USERS.get(filename)
    if known is None:
        if not _LIBRARY:  # (install fills it before the looker starts)
            _LIBRARY.append(_library_dirs())
        parts = filename.split(os.sep)
        known = not (filename.startswith(("<frozen", "<string>")) or "site-packages" in parts
                     or "dist-packages" in parts or parts[-1].startswith(_GENERATED)
                     or os.path.realpath(filename).startswith(_LIBRARY[0]))
        if len(_USERS) < 10000:
            _USERS[filename] = known
    return known


def user_frame():
    """'train.py:41 in load_data': the innermost frame of the user's code in the main thread ('' if none)."""
    frame = sys._current_frames().get(threading.main_thread().ident)
    while frame is not None:
        code, module = frame.f_code, frame.f_globals.get("__name__")
        if _users(code.co_filename) and not (isinstance(module, str) and module.startswith("tf_for_slurm")):
            where = f"{os.path.basename(code.co_filename)}:{frame.f_lineno} in {code.co_name}"
            return "".join(c if c.isprintable() else "?" for c in where)[:MAX_WHERE]
        frame = frame.f_back
    return ""


def _looker(phase):
    while True:
        time.sleep(WHERE_EVERY)
        try:
            if phase.look():
                return
        except Exception as exc:  # never break the program for a convenience
            return phase.fail(exc)


def _around(cls, method, before, after=None, once=False, inherited=False):
    """Wrap cls.method: phase `before` (name, detail) as it starts, `after` as it returns.  With `once`, the first
    call puts TensorFlow's method back (a per-step method costs nothing afterwards).  `inherited`: a method cls
    inherits, wrapped on cls alone.  A class or method this TensorFlow does not have is left alone: that phase is
    then not said."""
    inner = None if cls is None else (getattr(cls, method, None) if inherited else cls.__dict__.get(method))
    if inner is None or getattr(inner, _MARK, False):
        return
    phase = _phase[0]

    @functools.wraps(inner)
    def wrapper(*args, **kwargs):
        if once and cls.__dict__.get(method) is wrapper:
            if inherited:
                delattr(cls, method)
            else:
                setattr(cls, method, inner)
        phase.enter(*before)
        result = inner(*args, **kwargs)
        if after is not None:
            phase.enter(*after)
        return result

    setattr(wrapper, _MARK, True)
    setattr(cls, method, wrapper)


def _patch(cls_name, method, before, after=None, once=False, inherited=False):
    return lambda module: _around(getattr(module, cls_name, None), method, before, after, once, inherited)


def install(path):
    """Write this program's start-up phase to `path` (it must exist): `starting` now, the rest as it goes."""
    if _phase:
        return
    phase = _Phase(path)
    _phase.append(phase)
    try:
        with phase.lock:
            phase.flush()
    except Exception as exc:
        return phase.fail(exc)
    # the library's folders now, in the main thread: sysconfig fills its config once, not thread-safely, and
    # `import tensorflow` reads it (a first fill from the looker thread at that moment broke the import:
    # AttributeError 'userbase' inside sysconfig)
    if not _LIBRARY:
        _LIBRARY.append(_library_dirs())
    threading.Thread(target=_looker, args=(phase,), name="tf_slurm_start_phase", daemon=True).start()
    patches = [("tensorflow", lambda module: phase.enter("imported")),
               ("tensorflow.python.training.server_lib", _patch("Server", "start", ("server",))),
               ("tensorflow.python.training.server_lib", _patch("Server", "join", ("serving", JOIN))),
               ("tensorflow.python.distribute.collective_all_reduce_strategy",
                _patch("CollectiveAllReduceExtended", "_initialize_multi_worker", ("waiting", BARRIER), ("ready",))),
               # MWMS's first collective after its start: the first variable's initial value, broadcast from
               # worker 0, which every worker must receive (a worker that stalls after building the strategy)
               ("tensorflow.python.distribute.collective_all_reduce_strategy",
                _patch("CollectiveAllReduceExtended", "_create_variable", ("stepping", VARIABLES), once=True,
                       inherited=True)),
               ("tensorflow.python.distribute.parameter_server_strategy_v2",
                _patch("ParameterServerStrategyV2", "_connect_to_cluster", ("waiting", CLUSTER), ("ready",))),
               ("tensorflow.python.training.session_manager",
                _patch("SessionManager", "wait_for_session", ("waiting", CHIEF), ("ready",))),
               ("tensorflow.python.training.session_manager",
                _patch("SessionManager", "prepare_session", ("waiting", SESSION), ("ready",))),
               ("tensorflow.python.training.monitored_session",
                _patch("_MonitoredSession", "run", ("stepping", FIRST), once=True)),
               ("tensorflow.python.distribute.coordinator.cluster_coordinator",
                _patch("ClusterCoordinator", "schedule", ("stepping", FIRST), once=True)),
               ("tensorflow.python.distribute.distribute_lib", _patch("StrategyBase", "run", ("stepping", FIRST),
                                                                       once=True))]
    # Keras 3's package re-exports callback_list's class: patched once (the mark)
    patches += [(name, _patch("CallbackList", "on_train_begin", ("stepping", FIRST))) for name in _CALLBACKS]
    for module, patch in patches:
        when_imported(module, patch, _WHAT)
