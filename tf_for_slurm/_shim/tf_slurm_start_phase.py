"""An unmodified script's start-up phase, written to TF_SLURM_PHASE_FILE for its supervisor (plan/start_phase.py).

Installed by the `sitecustomize` shim under `tf-slurm exec` (with the progress capture: TF_SLURM_PROGRESS_CAPTURE=0
turns both off).  Why: a run that never reaches its first step shows every process alive; the hub can name the task
everyone waits for only if it knows where each one is (plan/start_watch.py).  The phases, as the program passes them:
`starting` at once; `imported` with `import tensorflow`; `server` when a TensorFlow server starts (tf.distribute.Server,
tf.train.Server); `waiting` for peers (MWMS's start barrier: its server's start and the workers' meeting, a TF1
non-chief's SessionManager.wait_for_session, a TF1 chief's prepare_session, a PSS coordinator connecting to its
cluster) and `ready` when that returns; `stepping` as the first collective or training step starts (MWMS's first
variable, whose initial value every worker must receive; Keras fit's on_train_begin, a TF1 MonitoredSession's first
run, a PSS ClusterCoordinator's first schedule); `serving` in Server.join().  A phase only
moves forward.  A daemon thread adds `where`, the innermost frame of the user's code in the main thread ("train.py:41
in load_data"), every WHERE_EVERY s while it changes, until `stepping` or `serving`: a task stuck before its own
`import tensorflow` is named at its line.  The file is never created (its supervisor does) nor followed as a symlink;
one pwrite at 0 and an ftruncate per write; any failure turns the capture off with one line, the program goes on.
"""

import functools
import json
import os
import stat
import sys
import sysconfig
import threading
import time

try:  # in-process, as tf_for_slurm._shim.tf_slurm_start_phase
    from .tf_slurm_when_imported import when_imported
except ImportError:  # from the shim directory on PYTHONPATH (tf-slurm exec)
    from tf_slurm_when_imported import when_imported  # type: ignore[no-redef]

WHERE_EVERY = 2.0  # s between looks at the main thread's frame
MAX_WHERE = 120  # characters (plan.start_phase.MAX_WHERE)
PHASES = ("starting", "imported", "server", "waiting", "ready", "stepping", "serving")
_CDS = "tensorflow.python.distribute.collective_all_reduce_strategy"
_PSS = "tensorflow.python.distribute.parameter_server_strategy_v2"
_COORDINATOR = "tensorflow.python.distribute.coordinator.cluster_coordinator"
_SERVER = "tensorflow.python.training.server_lib"
_SESSIONS = "tensorflow.python.training.session_manager"
_MONITORED = "tensorflow.python.training.monitored_session"
_CALLBACKS = ("keras.src.callbacks.callback_list", "keras.src.callbacks", "tf_keras.src.callbacks")
_WHAT = "the start-up phase capture"
_MARK = "_tf_slurm_start_phase"
_HERE = os.path.dirname(os.path.abspath(__file__))
_phase = []  # the one _Phase of this process


class _Phase:
    """The file, the phase and `where`; every write under one lock (the main thread's and the looker's)."""

    def __init__(self, path):
        self.lock = threading.Lock()
        self.fd = None
        self.name, self.since, self.detail, self.where = "starting", time.time(), "", ""
        self.size = 0
        self.done = threading.Event()  # `stepping` or `serving` reached: the looker ends
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
                os.close(fd)
                raise OSError(0, "not a regular file of ours")
            self.fd = fd
        except OSError as exc:
            self._off(f"cannot open {path}: {exc.strerror or exc}")

    def _off(self, why):
        if self.fd is not None:
            try:
                os.close(self.fd)
            except OSError:
                pass
        self.fd = None
        self.done.set()
        sys.stderr.write(f"tf_for_slurm: {_WHAT} is off: {why}\n")

    def enter(self, name, detail=""):
        """Move forward to phase `name` (never back; nothing after `serving`)."""
        with self.lock:
            if self.fd is None or PHASES.index(name) <= PHASES.index(self.name) or self.name == "serving":
                return
            self.name, self.since, self.detail = name, time.time(), detail
            if name in ("stepping", "serving"):
                self.where = user_frame() or self.where
                self.done.set()
            self._write()

    def look(self):
        """The main thread's innermost user frame, written when it changed."""
        where = user_frame()
        with self.lock:
            if self.fd is not None and where != self.where and not self.done.is_set():
                self.where = where
                self._write()

    def _write(self):
        d = {"v": 1, "phase": self.name, "t": round(time.time(), 3), "since": round(self.since, 3)}
        if self.where:
            d["where"] = self.where
        if self.detail:
            d["detail"] = self.detail
        data = json.dumps(d, separators=(",", ":")).encode()
        try:
            os.pwrite(self.fd, data, 0)
            if len(data) < self.size:
                os.ftruncate(self.fd, len(data))
            self.size = len(data)
        except OSError as exc:
            self._off(f"cannot write: {exc.strerror or exc}")


def _library_dirs():
    dirs = {_HERE, os.path.dirname(_HERE)}  # the shim's directory and the tf_for_slurm package
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        try:
            dirs.add(os.path.realpath(sysconfig.get_paths()[key]))
        except (KeyError, OSError):
            pass
    return tuple(d + os.sep for d in dirs if d)


_LIBRARY = _library_dirs()


def _users(filename):
    if filename.startswith("<frozen") or "site-packages" in filename or "dist-packages" in filename:
        return False
    if filename.startswith("<"):  # python -c, stdin: the user's own
        return True
    return not os.path.realpath(filename).startswith(_LIBRARY)


def user_frame():
    """'train.py:41 in load_data': the innermost frame of the user's code in the main thread ('' if none)."""
    frame = sys._current_frames().get(threading.main_thread().ident)
    while frame is not None:
        code = frame.f_code
        if _users(code.co_filename):
            return f"{os.path.basename(code.co_filename)}:{frame.f_lineno} in {code.co_name}"[:MAX_WHERE]
        frame = frame.f_back
    return ""


def _looker(phase):
    while not phase.done.wait(WHERE_EVERY):
        try:
            phase.look()
        except Exception as exc:  # never break the program for a convenience
            phase._off(f"{type(exc).__name__}: {exc}")


def _around(cls, method, before, after=None, inherited=False):
    """Wrap cls.method (`inherited`: also one it inherits, wrapped on cls alone): phase `before` (name, detail)
    as it starts, `after` as it returns; once patched.  A class or method this TensorFlow does not have is left
    alone (the phase is then not said)."""
    inner = None if cls is None else (getattr(cls, method, None) if inherited else cls.__dict__.get(method))
    if inner is None or getattr(inner, _MARK, False):
        return
    phase = _phase[0]

    @functools.wraps(inner)
    def wrapper(*args, **kwargs):
        phase.enter(*before)
        result = inner(*args, **kwargs)
        if after is not None:
            phase.enter(*after)
        return result

    setattr(wrapper, _MARK, True)
    setattr(cls, method, wrapper)


def _patch_server(module):
    _around(getattr(module, "Server", None), "start", ("server",))
    _around(getattr(module, "Server", None), "join", ("serving", "Server.join()"))


def _patch_mwms(module):
    """Its server starts and the workers meet (the coordination service's start, else the health check's
    barrier) inside _initialize_multi_worker; the first collective after is the broadcast of the first
    variable's initial value, which waits for every worker (a worker that stalls after the strategy)."""
    ext = getattr(module, "CollectiveAllReduceExtended", None)
    _around(ext, "_initialize_multi_worker", ("waiting", "MultiWorkerMirroredStrategy's start barrier"), ("ready",))
    _around(ext, "_create_variable", ("stepping", "its first collective (its variables)"), inherited=True)


def _patch_pss(module):
    _around(getattr(module, "ParameterServerStrategyV2", None), "_connect_to_cluster", ("waiting", "connecting to its ps and workers"),
            ("ready",))


def _patch_sessions(module):
    manager = getattr(module, "SessionManager", None)
    _around(manager, "wait_for_session", ("waiting", "the chief's session"), ("ready",))
    _around(manager, "prepare_session", ("waiting", "creating its session (the ps must answer)"),
            ("ready",))


def _patch_first(module, cls, method, detail="its first step"):
    _around(getattr(module, cls, None), method, ("stepping", detail))


def install(path):
    """Write this program's start-up phase to `path` (it must exist): `starting` now, the rest as it goes."""
    if _phase:
        return
    phase = _Phase(path)
    _phase.append(phase)
    if phase.fd is None:
        return
    with phase.lock:
        phase._write()
    threading.Thread(target=_looker, args=(phase,), name="tf_slurm_start_phase", daemon=True).start()
    when_imported("tensorflow", lambda module: phase.enter("imported"), _WHAT)
    when_imported(_SERVER, _patch_server, _WHAT)
    when_imported(_CDS, _patch_mwms, _WHAT)
    when_imported(_PSS, _patch_pss, _WHAT)
    when_imported(_SESSIONS, _patch_sessions, _WHAT)
    when_imported(_MONITORED, lambda module: _patch_first(module, "_MonitoredSession", "run"), _WHAT)
    when_imported(_COORDINATOR, lambda module: _patch_first(module, "ClusterCoordinator", "schedule"), _WHAT)
    for name in _CALLBACKS:  # Keras 3's package re-exports callback_list's class: patched once
        when_imported(name, lambda module: _patch_first(module, "CallbackList", "on_train_begin"), _WHAT)
