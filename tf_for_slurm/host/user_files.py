"""Files a user names on the command line: read them (or stdin for '-'), append a line to one.

Why here: the commands (tf_for_slurm.cli) only parse options and print; opening what an option
names, and saying in one line which option named something unreadable, is the host's.
"""

from __future__ import annotations

import fcntl
import sys
from typing import List, Optional

from tf_for_slurm.errors import UsageError, bad_value

__all__ = ["append_line", "read_file", "read_source"]


def read_file(path: str, option: str) -> str:
    """The text of the file `option` names (undecodable bytes replaced), or one UsageError naming it."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError as exc:
        raise UsageError(bad_value(option, path, f"a readable file ({exc.strerror})")) from None


def read_source(value: Optional[str], option: str, stdin_used: List[str]) -> Optional[str]:
    """The text `option` names: a file, or '-' for stdin (one option per command: `stdin_used`
    records which took it); None when the option was not given."""
    if value is None:
        return None
    if value == "-":
        if stdin_used:
            raise UsageError(bad_value(option, value, f"a file: stdin is already read by {stdin_used[0]}"))
        stdin_used.append(option)
        return sys.stdin.read()
    return read_file(value, option)


def append_line(path: str, line: str) -> None:
    """Append `line` to `path` under an exclusive lock: many tasks append to one file at once."""
    with open(path, "a", encoding="utf-8") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        fh.write(line)
