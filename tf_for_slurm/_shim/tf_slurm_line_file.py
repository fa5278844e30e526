"""One line of a file a task's supervisor watches, replaced in place (the progress and phase captures').

Why one place: both captures write a file their supervisor made (never created here, never followed as a
symlink), read by mtime; a reader must see the old line or the new one, whole.  So: one pwrite at 0 (a
shorter line padded with spaces to the old one's length), then ftruncate; then the mtime set to now in
nanoseconds, since the kernel's file clock is coarse (a few ms) and two writes within one tick would look
like one to a supervisor that compares mtimes.
"""

import os
import stat
import time


def write_line(path, data, limit):
    """Replace the file's line by `data` (bytes ending in a newline); nothing when the file is missing."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:  # no supervisor watches (any more): nothing to tell
        return
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(f"{path} is not a regular file")
        if len(data) < st.st_size <= limit:  # the whole old line overwritten in one write
            data = data[:-1] + b" " * (st.st_size - len(data)) + b"\n"
        os.pwrite(fd, data, 0)
        os.ftruncate(fd, len(data))
        try:
            now = time.time_ns()
            os.utime(fd, ns=(now, now))
        except OSError:  # not the file's owner: the kernel's mtime it is
            pass
    finally:
        os.close(fd)
