"""`report_progress()`: a task tells its exec supervisor it is making progress, and how far it is.

Why a file: the supervisor is the task's parent, not a thread of it; touching a file it watches
costs one system call, needs no connection and works from any language (`touch
"$TF_SLURM_PROGRESS_FILE"` in a shell loop).  With a step, the file holds one JSON line
(plan.train_progress's report): the hub shows the step, rate and loss in `tf-slurm status`.
Outside exec there is no file: a no-op.
"""

from __future__ import annotations

import os
import time
from typing import Mapping, Optional

from tf_for_slurm.host import settings
from tf_for_slurm.plan.train_progress import MAX_REPORT_BYTES, Report, report_line

_last = [0.0]  # monotonic time of the last touch: at most one per MIN_INTERVAL
MIN_INTERVAL = 0.5


def _write(path: str, line: str) -> bool:
    """The line, in place of the file's content (never creating it: the supervisor does; never a symlink)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        data = (line + "\n").encode()
        size = os.fstat(fd).st_size
        if len(data) < size <= MAX_REPORT_BYTES:  # the whole old line overwritten in one write (as the shim does):
            data = data[:-1] + b" " * (size - len(data)) + b"\n"  # a reader never sees its tail after the new one
        os.pwrite(fd, data, 0)
        os.ftruncate(fd, len(data))
    except OSError:
        return False
    finally:
        os.close(fd)
    return True


def report_progress(env: Optional[Mapping[str, str]] = None, *, step: Optional[int] = None,
                    loss: Optional[float] = None, target: Optional[int] = None) -> bool:
    """Tell the supervisor this task made progress (call it every step, or from a Keras callback);
    True when a supervisor watches, False otherwise.  With `step` (and `loss`, `target`: the last
    step), `tf-slurm status` shows them.  Cheap: at most one file write per 0.5 s."""
    path = (os.environ if env is None else env).get(settings.PROGRESS_FILE)
    if not path:
        return False
    now = time.monotonic()
    if now - _last[0] < MIN_INTERVAL:
        return True
    _last[0] = now
    if step is not None:
        ok_loss = isinstance(loss, (int, float)) and not isinstance(loss, bool) and loss == loss and abs(loss) < 1e300
        ok_target = isinstance(target, int) and not isinstance(target, bool) and target >= 1
        if isinstance(step, int) and not isinstance(step, bool) and step >= 0:
            report = Report(step=step, t=time.time(), loss=float(loss) if ok_loss else None,  # type: ignore[arg-type]
                            target=target if ok_target else None, kind="user")
            return _write(path, report_line(report))
    try:
        os.utime(path)
    except OSError:
        try:
            with open(path, "a"):
                pass
        except OSError:
            return False
    return True
