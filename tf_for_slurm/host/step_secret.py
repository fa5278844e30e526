"""The secret a step's supervisors share, and nobody else can read: where it comes from.

Why: the hub and the spokes talk over TCP ports every user of the cluster can reach; each side
proves it holds the step's key before a line of the other counts (supervise/wire.py).  The key is
derived per step from one base secret, found in this order:

1. `TF_SLURM_SECRET` in the environment.  srun passes the environment to every task, and a
   process's environment (/proc/PID/environ) is readable only by its owner.  `batch-step` (every
   template and `tf-slurm submit` job) and `tf-slurm local` set a fresh one when it is unset.
2. Else the per-user key file `TF_SLURM_KEY_FILE` (default `~/.tf_slurm/key`): created 0600 in a
   0700 folder when missing, owner and mode checked, no symlink followed.  This covers a plain
   `srun tf-slurm exec` typed in an salloc shell, where $HOME is the same on every node.

The secret never goes into argv, logs, status.json or the job folder, and `exec` removes it from
the command's environment.
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import os
import secrets
import stat
import tempfile
from typing import Mapping

from tf_for_slurm.errors import UsageError, bad_value
from tf_for_slurm.host import settings

MIN_SECRET = 32  # characters of TF_SLURM_SECRET
_KEY_BYTES = 32
_MAX_KEY_FILE = 4096

__all__ = ["MIN_SECRET", "base_secret", "new_secret", "step_key", "with_secret"]


def new_secret() -> str:
    """A fresh secret for TF_SLURM_SECRET: 256 random bits, hex."""
    return secrets.token_hex(_KEY_BYTES)


def with_secret(env: Mapping[str, str]) -> dict:
    """`env` with TF_SLURM_SECRET set (a fresh one when it is unset or empty): what a launcher hands
    to every task it starts, so they share a key without touching any file."""
    out = dict(env)
    if not out.get(settings.SECRET):
        out[settings.SECRET] = new_secret()
    return out


def _key_file_path(env: Mapping[str, str]) -> str:
    raw = settings.text(env, settings.KEY_FILE) or settings.default_text(settings.KEY_FILE)
    path = os.path.expanduser(raw)
    if path.startswith("~"):
        raise UsageError(bad_value(settings.KEY_FILE, raw, "a path (HOME is not set)"))
    return path


def _check_private(fd: int, path: str) -> bytes:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(bad_value(settings.KEY_FILE, path, "a regular file"))
    if st.st_uid != os.getuid():
        raise UsageError(bad_value(settings.KEY_FILE, path, f"a file owned by uid {os.getuid()} (owner: {st.st_uid})"))
    if st.st_mode & 0o077:
        raise UsageError(bad_value(settings.KEY_FILE, path,
                                   f"a file only its owner can read (mode {st.st_mode & 0o777:o}: chmod 600 it)"))
    data = os.read(fd, _MAX_KEY_FILE + 1)
    if not _KEY_BYTES <= len(data) <= _MAX_KEY_FILE:
        raise UsageError(bad_value(settings.KEY_FILE, path, f"{_KEY_BYTES} to {_MAX_KEY_FILE} bytes of key"))
    return data


def _read_key_file(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        return _check_private(fd, path)
    finally:
        os.close(fd)


def _create_key_file(path: str) -> None:
    """Write a new key at `path` unless another task (on any node) did first: written in full to
    a private temporary file, then linked into place (link fails when the name exists)."""
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, mode=0o700, exist_ok=True)
    st = os.lstat(folder)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
        raise UsageError(bad_value(settings.KEY_FILE, path, f"a file in a folder only you can write ({folder})"))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".key.")
    try:
        os.write(fd, secrets.token_hex(_KEY_BYTES).encode())
        os.fsync(fd)
        os.close(fd)
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
    finally:
        os.unlink(tmp)


def base_secret(env: Mapping[str, str]) -> bytes:
    """The step's base secret: TF_SLURM_SECRET, else the key file (made when missing)."""
    given = env.get(settings.SECRET)
    if given:
        if len(given) < MIN_SECRET or not given.isprintable():
            raise UsageError(f"{settings.SECRET}=<hidden, {len(given)} characters>: expected at least "
                             f"{MIN_SECRET} printable characters (e.g. python3 -c 'import secrets; "
                             "print(secrets.token_hex(32))')")
        return given.encode()
    path = _key_file_path(env)
    try:
        return _read_key_file(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UsageError(bad_value(settings.KEY_FILE, path, "a file, not a symbolic link")) from None
        raise UsageError(bad_value(settings.KEY_FILE, path, f"a readable key file ({exc.strerror})")) from None
    try:
        _create_key_file(path)
        return _read_key_file(path)
    except OSError as exc:
        raise UsageError(bad_value(settings.KEY_FILE, path, f"a key file this user can create ({exc.strerror}); "
                                   f"or set {settings.SECRET} for every task")) from None


def step_key(env: Mapping[str, str], tag: str) -> bytes:
    """The key of step `tag` (`<job>.<step>`): a different key for every step, from one base secret."""
    return hmac.new(base_secret(env), b"tf_slurm step key " + tag.encode(), hashlib.sha256).digest()
