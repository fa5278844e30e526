"""Helper threads that leave signals to the main thread.

Linux gives a process-directed signal (srun's, scancel's, a Ctrl-C) to any one thread that does
not block it, and when the main thread already has one pending, a second one sent right after
(SIGUSR1 then SIGTERM) goes to another thread.  Python runs handlers only in the main thread and
only between bytecodes, so a signal that lands on a helper thread while the main thread sits in
waitpid() is handled when that call returns: for a wrapper waiting on its command, only once the
command has ended, too late to pass the signal on.  Threads started here block the signals this
package handles, so the kernel always picks the main thread.
"""

from __future__ import annotations

import signal
import threading
from typing import Any, Callable

HANDLED = frozenset({signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
                     signal.SIGUSR2})


def start(thread: threading.Thread) -> threading.Thread:
    """Start `thread` with HANDLED blocked in it (a new thread inherits its creator's mask).

    Do not start processes from such a thread: a child would inherit the blocked mask too.
    """
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, HANDLED)
    try:
        thread.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
    return thread


def start_daemon(target: Callable[..., Any], *args: Any, name: str | None = None) -> threading.Thread:
    """A daemon thread running `target(*args)`, started with `start`."""
    return start(threading.Thread(target=target, args=args, name=name, daemon=True))
