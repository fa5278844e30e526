"""The warning file: where the batch shell's trap writes "USR1 <epoch seconds>" for batch-step.

Why a file: `--signal=B:URG@N` signals only the batch shell, possibly the moment it starts, before
batch-step can take a signal; the shell's first command is a trap that appends the signal here, read
every WARN_POLL s, so no warning is lost.  Other users see job ids and can write to /tmp: the file
counts only when it is ours, in a folder only we can write (the shell's `mktemp -d`), and names a
signal batch-step passes on (USR1, USR2, TERM).
"""

from __future__ import annotations

import logging
import math
import os
import stat
from typing import Optional, Set, Tuple

from tf_for_slurm.plan.stop_relay import PASSED_ON

log = logging.getLogger("tf_for_slurm.batch_step")

WARN_POLL = 0.2  # seconds between looks at the warning file
WARN_READ = 256  # bytes of the warning file read: its first line is "USR1 <epoch seconds>"


def _private_bytes(path: str) -> bytes:
    """The first WARN_READ bytes of `path` when it is a regular file of ours in a folder of ours only we
    can write; else OSError (why: a file planted by another user must never stop, requeue or freeze the
    job).  No symlink is followed; O_NONBLOCK: a planted FIFO cannot block the step's wait loop."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    folder = os.open(os.path.dirname(os.path.abspath(path)), flags | os.O_DIRECTORY)
    try:
        st = os.fstat(folder)
        if st.st_uid != os.getuid() or st.st_mode & 0o022:
            raise OSError(f"its folder is not ours alone (owner uid {st.st_uid}, mode {st.st_mode & 0o7777:o})")
        fd = os.open(os.path.basename(path), flags, dir_fd=folder)
    finally:
        os.close(folder)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
            raise OSError(f"not a regular file of ours (owner uid {st.st_uid}, mode {st.st_mode:o})")
        return os.read(fd, WARN_READ)
    finally:
        os.close(fd)


def read_warn_file(path: str) -> Tuple[Optional[str], Optional[float], str]:
    """(signal name, epoch seconds or None, '') from the warning file's first line, or (None, None, why not)."""
    try:
        first = _private_bytes(path).decode("ascii", "replace").split("\n", 1)[0].split()
    except FileNotFoundError:
        return None, None, ""
    except OSError as exc:
        return None, None, f"{path} ignored: {exc.strerror or exc}"
    if not first:
        return None, None, ""
    if first[0] not in PASSED_ON:
        return None, None, f"{path} ignored: {first[0][:16]!r} is not a signal batch-step passes on {PASSED_ON}"
    try:
        when: Optional[float] = float(first[1]) if len(first) > 1 else None
    except ValueError:
        when = None
    return first[0], when if when is not None and math.isfinite(when) else None, ""


class WarnFile:
    """One warning file, looked at again and again: each reason it was ignored is logged once."""

    def __init__(self, path: str):
        self.path = path
        self._ignored: Set[str] = set()

    def poll(self) -> Optional[Tuple[str, Optional[float]]]:
        """(signal name, when the shell wrote it or None) once the file names one; else None."""
        name, when, why = read_warn_file(self.path)
        if why and why not in self._ignored:
            self._ignored.add(why)
            log.debug("%s", why)
        return None if name is None else (name, when)


__all__ = ["WARN_POLL", "WarnFile", "read_warn_file"]
