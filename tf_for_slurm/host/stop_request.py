"""A stop request raised by a signal: training loops poll it between steps.

Why a flag and not an exception: a signal can arrive inside a TensorFlow call; the step in flight
must finish so the checkpoint written next is consistent.  The handler only records the first
signal (name and time) and logs one line; the training loop (a TF1 hook, a TF2 loop) stops at its
next step, the chief writes a checkpoint, and the process exits 0.

SIGUSR1 is Slurm's warning before the time limit (`#SBATCH --signal=B:URG@N` to the batch shell,
passed on to the tasks as SIGUSR1 by batch-step); SIGTERM is what `scancel` and preemption send, KillWait seconds before
SIGKILL, so the same checkpoint is written when there is time.  No TensorFlow here.
"""

from __future__ import annotations

import atexit
import logging
import os
import signal as _signal
import threading
import time
from typing import Callable, Dict, Iterable, Mapping, Optional, Tuple

from tf_for_slurm.errors import UsageError, bad_value
from tf_for_slurm.host import settings
from tf_for_slurm.plan.requeue import signal_name

log = logging.getLogger(__name__)

DEFAULT_SIGNALS = tuple(str(settings.REGISTRY[settings.STOP_SIGNALS].default).split(","))
ENV_SIGNALS = settings.STOP_SIGNALS


def signals_from_env(env: Mapping[str, str]) -> Tuple[str, ...]:
    """TF_SLURM_STOP_SIGNALS='USR1,USR2,TERM' (the default); 'none' or '0' turns stopping on signals off."""
    raw = env.get(ENV_SIGNALS, "").strip()
    if not raw:
        return DEFAULT_SIGNALS
    if raw.lower() in ("0", "none", "off", "no"):
        return ()
    names = tuple(signal_name(part) for part in raw.split(",") if part.strip())
    bad = [n for n in names if not hasattr(_signal, f"SIG{n}") or n in ("KILL", "STOP")]
    if bad or not names:
        raise UsageError(bad_value(ENV_SIGNALS, raw, "signal names such as USR1,TERM (or 'none')"))
    return names


class StopRequest:
    """Set by the first of `signals`; `requested` tells a training loop to stop at its next step.

    `notify(name)` is what the signal handler calls; tests call it with plain names.  `install()`
    hooks the real signals (main thread only) and `uninstall()` puts the previous handlers back.
    """

    def __init__(self, signals: Iterable[str] = DEFAULT_SIGNALS, clock: Callable[[], float] = time.monotonic,
                 what: str = "stopping at the next step; the chief writes a checkpoint"):
        self.signals = tuple(signal_name(s) for s in signals)
        self.what = what
        self._clock = clock
        self._event = threading.Event()
        self.signal: Optional[str] = None
        self.at: Optional[float] = None  # clock() when the first signal arrived
        self.count = 0
        self._previous: Dict[int, object] = {}
        self._at_exit = False

    @property
    def requested(self) -> bool:
        return self._event.is_set()

    def notify(self, name: str, at: Optional[float] = None) -> bool:
        """Record a stop signal (that arrived at clock time `at`, default now); True for the first
        one (later ones are only counted)."""
        self.count += 1
        if self._event.is_set():
            return False
        self.signal, self.at = signal_name(name), self._clock() if at is None else at
        self._event.set()
        return True

    def seconds_since(self) -> Optional[float]:
        return None if self.at is None else self._clock() - self.at

    def wait(self, timeout: Optional[float] = None) -> bool:
        return self._event.wait(timeout)

    def _handle(self, signo: int, _frame: object) -> None:
        name = _signal.Signals(signo).name[3:]
        if self.notify(name):
            log.warning("SIG%s received: %s", name, self.what)
        else:
            log.info("SIG%s received again: already stopping", name)

    def install(self) -> "StopRequest":
        """Handle `signals` in this process from now on (no-op off the main thread, logged)."""
        if threading.current_thread() is not threading.main_thread():
            log.debug("not on the main thread: stop signals not installed")
            return self
        for name in self.signals:
            signo = getattr(_signal, f"SIG{name}")
            if signo not in self._previous:
                self._previous[signo] = _signal.signal(signo, self._handle)
        if not self._at_exit:
            atexit.register(self._ignore_at_exit)
            self._at_exit = True
        return self

    def _ignore_at_exit(self) -> None:
        """Ignore the stop signals while the interpreter tears down: Python resets its handlers to
        the default action there, and a warning arriving after training ended must not turn a
        finished task into one killed by SIGUSR1 (measured: status 138 for a job at its target)."""
        if threading.current_thread() is threading.main_thread():
            for signo in self._previous:
                _signal.signal(signo, _signal.SIG_IGN)

    def uninstall(self) -> None:
        for signo, handler in self._previous.items():
            _signal.signal(signo, handler)  # type: ignore[arg-type]
        self._previous.clear()

    def __enter__(self) -> "StopRequest":
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.uninstall()


_shared: Optional[StopRequest] = None
_shared_lock = threading.Lock()
#: warning signals that arrived before any StopRequest existed: name -> time.monotonic()
_held: Dict[str, float] = {}
_expired: Dict[str, bool] = {}
ENV_HOLD = settings.SIGNAL_HOLD
DEFAULT_HOLD = settings.default_seconds(settings.SIGNAL_HOLD)


def hold_warning_signals(hold: float, signals: Tuple[str, ...] = ("USR1", "USR2")) -> None:
    """From interpreter start (exec's shim): keep an early warning signal for `hold` seconds.

    Why: srun passes the batch shell's SIGUSR1 to every process of the step at once, possibly
    before the program installed its handler, and SIGUSR1's default action kills the process,
    failing a job that only had to checkpoint.  A held signal is taken over by the first
    `shared_stop_request()`; if nothing takes it within `hold` seconds it is delivered again, to
    the program's own handler if it installed one, else with the default action, as if we were
    not there (only later).
    """
    if threading.current_thread() is not threading.main_thread() or hold <= 0:
        return

    def early(signo: int, _frame: object) -> None:
        name = _signal.Signals(signo).name[3:]
        if _expired.get(name):  # nobody took it: behave as without us
            _signal.signal(signo, _signal.SIG_DFL)
            os.kill(os.getpid(), signo)
            return
        if name in _held:
            return
        _held[name] = time.monotonic()
        timer = threading.Timer(hold, _release, args=(name, signo))
        timer.daemon = True
        timer.start()

    for name in signals:
        _signal.signal(getattr(_signal, f"SIG{name}"), early)


def _release(name: str, signo: int) -> None:
    with _shared_lock:
        if name not in _held:  # taken over by a StopRequest
            return
        _expired[name] = True
    os.kill(os.getpid(), signo)


def shared_stop_request(env: Optional[Mapping[str, str]] = None, what: Optional[str] = None) -> StopRequest:
    """The process's one StopRequest, installed on first use (signals from TF_SLURM_STOP_SIGNALS).

    One per process so the TF1 hook, the TF2 helpers and a server that must outlive its trainers
    all see the same first signal.  `what` replaces the logged consequence (a ps: "waiting for
    the workers' checkpoint").
    """
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = StopRequest(signals_from_env(os.environ if env is None else env)).install()
            for name in [n for n in _held if n in _shared.signals]:
                at = _held.pop(name)
                if _shared.notify(name, at=at):
                    log.warning("SIG%s received %.1f s ago, at start-up: %s", name, time.monotonic() - at,
                                _shared.what if what is None else what)
        if what:
            _shared.what = what
        return _shared
