"""`report_progress()`: a task tells its exec supervisor it is making progress (under a progress deadline).

Why a file: the supervisor is the task's parent, not a thread of it; touching a file it watches
costs one system call, needs no connection and works from any language (`touch
"$TF_SLURM_PROGRESS_FILE"` in a shell loop).  Without a deadline there is no file: a no-op.
"""

from __future__ import annotations

import os
import time
from typing import Mapping, Optional

from tf_for_slurm.host import settings

_last = [0.0]  # monotonic time of the last touch: at most one per MIN_INTERVAL
MIN_INTERVAL = 0.5


def report_progress(env: Optional[Mapping[str, str]] = None) -> bool:
    """Tell the supervisor this task made progress (call it every step, or from a Keras callback);
    True when a supervisor watches, False otherwise.  Cheap: at most one file touch per 0.5 s."""
    path = (os.environ if env is None else env).get(settings.PROGRESS_FILE)
    if not path:
        return False
    now = time.monotonic()
    if now - _last[0] < MIN_INTERVAL:
        return True
    _last[0] = now
    try:
        os.utime(path)
    except OSError:
        try:
            with open(path, "a"):
                pass
        except OSError:
            return False
    return True
