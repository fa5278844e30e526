"""Put first on PYTHONPATH by `tf-slurm exec` for the task's Python programs; no effect elsewhere.

- TF_SLURM_TF_CONFIG_FILE (a TF_CONFIG over 128 KiB): the full JSON goes into this interpreter's
  os.environ only, never into the C environment, so TensorFlow sees the whole cluster while the
  program's own subprocesses still start (the kernel refuses an environment string over 128 KiB).
- TF_SLURM_SESSION_FILTERS (TF1 ps/worker tasks): a session whose master is this task's own server,
  made without device filters, gets them, so a worker's session never waits for the other workers;
  with TF_SLURM_RECOVERY_WAIT, a non-chief looks for the chief's model every that many seconds (TF: 30).
- TF_SLURM_SIGNAL_HOLD (seconds): a SIGUSR1/SIGUSR2 that arrives before the program handles it
  is held that long for tf_for_slurm's stop request instead of killing the process (srun passes
  the time-limit warning to every process of the step at once, start-up included).
- TF_SLURM_JOB_TYPE and friends: when the plan does not fit the script (MultiWorkerMirroredStrategy
  with ps, a chief that only serves, replica_device_setter without ps), one line with the fix and
  exit 1 instead of TensorFlow's error or a hang (tf_slurm_plan_hints).
- TF_SLURM_JOB_TYPE: a SyncReplicasOptimizer chief ends with its training instead of waiting out
  TensorFlow's 120 s stop grace for a round no worker will complete (tf_slurm_sync_end).
- TF_SLURM_JOB_TYPE: TensorFlow's SlurmClusterResolver (and subclasses) answer with the step's plan:
  its addresses and ports, this task's role, the GPUs exec gave it; a script whose jobs= or
  tasks_per_node= contradict the plan ends with one fix line (tf_slurm_resolver).
- TF_SLURM_PROGRESS_FILE (a progress deadline), unless TF_SLURM_PROGRESS_CAPTURE is `0`: an unmodified
  script's progress (Keras fit batches, optimizer steps, the TF1 global step) is written there, so a
  hang is noticed without `tf_for_slurm.report_progress()` (tf_slurm_progress); a checkpoint save
  is progress while it runs (tf_slurm_save_progress).
- TF_SLURM_PHASE_FILE, unless TF_SLURM_PROGRESS_CAPTURE is `0`: the script's start-up phase (TensorFlow
  imported, its server started, waiting for its peers and in what, its first step, serving) and the
  line of its own code it is at, so the hub can name the task a step that never trains waits for
  (tf_slurm_start_phase); the variable is removed, so a Python the script starts does not write it
  (with the capture off it stays: a script may write its own phase there).
- TF_SLURM_SUPERVISED (any command under exec): SIGQUIT writes every thread's Python stack to stderr
  (faulthandler), which is how a task exec's hub found hung leaves its stacks in its log.
- Always: MultiWorkerMirroredStrategy's peer health check waits without holding the GIL, so a slow
  peer no longer stops the task's Python (its training loop, its signal handlers) for up to 10 s
  (tf_slurm_peer_health).
- Always: at the program's exit, TensorFlow does not remove its functions from the other tasks one
  by one (a PSS coordinator's exit took 1-10 s, 20 s with a lost worker: tf_slurm_quiet_exit).
Then any other sitecustomize further down sys.path runs as usual.
"""

import os as _os
import sys as _sys


def _in_process_only(name, value):
    environ = _os.environ
    try:  # CPython: os.environ's mapping without putenv()
        environ._data[environ.encodekey(name)] = environ.encodevalue(value)
    except AttributeError:
        environ[name] = value


_path = _os.environ.get("TF_SLURM_TF_CONFIG_FILE")
if _path:
    try:
        with open(_path, encoding="utf-8") as _fh:
            _in_process_only("TF_CONFIG", _fh.read())
    except OSError as _exc:
        _sys.stderr.write(f"tf_for_slurm: cannot read TF_SLURM_TF_CONFIG_FILE={_path!r}: {_exc.strerror}\n")


_filters = _os.environ.get("TF_SLURM_SESSION_FILTERS")
_self = _os.environ.get("TF_SLURM_SELF_ADDRESS", "")
if _filters and ":" in _self:
    from tf_slurm_session_filters import install as _install  # this shim's own directory

    _install([f for f in _filters.split(",") if f], _self.rsplit(":", 1)[1])
_recovery = _os.environ.get("TF_SLURM_RECOVERY_WAIT", "")
if _filters and _recovery:
    from tf_slurm_session_filters import install_recovery_wait as _install_wait

    try:
        _install_wait(float(_recovery))
    except ValueError:
        _sys.stderr.write(f"tf_for_slurm: TF_SLURM_RECOVERY_WAIT={_recovery!r} is not a number of seconds\n")

_role = _os.environ.get("TF_SLURM_JOB_TYPE", "")
if _role:
    try:
        from tf_slurm_plan_hints import install as _install_hints  # this shim's own directory

        _install_hints(_role, _os.environ.get("TF_SLURM_TASK_INDEX", ""), _os.environ.get("TF_SLURM_NUM_PS", ""),
                       _os.environ.get("TF_SLURM_NUM_WORKERS", ""), _os.environ.get("TF_SLURM_IS_CHIEF", ""),
                       _os.environ.get("TF_CONFIG", ""))
    except ValueError:  # counts that are not numbers: no hints, the program as before
        pass
    from tf_slurm_sync_end import install as _install_sync_end  # this shim's own directory

    _install_sync_end()
    from tf_slurm_resolver import install as _install_resolver  # this shim's own directory

    _install_resolver()

_progress = _os.environ.get("TF_SLURM_PROGRESS_FILE", "")
_capture_on = _os.environ.get("TF_SLURM_PROGRESS_CAPTURE", "").strip().lower() not in ("0", "false", "no", "off")
if _progress and _capture_on:
    from tf_slurm_progress import _capture as _progress_capture, install as _install_progress  # the shim's dir
    from tf_slurm_save_progress import install as _install_saves

    _install_progress(_progress)
    _install_saves(_progress_capture[0])  # a checkpoint save is progress too
if _capture_on and _os.environ.get("TF_SLURM_PHASE_FILE"):  # popped: a child Python does not write it
    from tf_slurm_start_phase import install as _install_phase  # this shim's own directory

    _install_phase(_os.environ.pop("TF_SLURM_PHASE_FILE"))

if _os.environ.get("TF_SLURM_SUPERVISED"):  # exec's hang rule: SIGQUIT writes the Python stacks, then SIGKILL
    try:
        import faulthandler as _faulthandler
        import signal as _signal

        _faulthandler.register(_signal.SIGQUIT, all_threads=True, chain=False)
    except (AttributeError, ValueError, RuntimeError, OSError):  # no SIGQUIT here, or stderr closed
        pass

from tf_slurm_peer_health import install as _install_peer_health  # this shim's own directory

_install_peer_health()

from tf_slurm_quiet_exit import install as _install_quiet_exit  # this shim's own directory

_install_quiet_exit()

_hold = _os.environ.get("TF_SLURM_SIGNAL_HOLD", "")
if _hold:
    try:
        from tf_for_slurm.stop_request import hold_warning_signals as _hold_signals

        _hold_signals(float(_hold))
    except (ImportError, ValueError):  # another Python without tf_for_slurm, or a bad value: as before
        pass

_here = _os.path.dirname(_os.path.abspath(__file__))
for _entry in _sys.path:
    if _entry and _os.path.abspath(_entry) != _here and _os.path.isfile(_os.path.join(_entry, "sitecustomize.py")):
        _file = _os.path.join(_entry, "sitecustomize.py")
        with open(_file, encoding="utf-8") as _fh:
            exec(compile(_fh.read(), _file, "exec"), {"__name__": "sitecustomize", "__file__": _file})
        break
