"""A network of its own for each pytest-xdist worker, so tests running side by side never share a port.

Why: two tests at once would otherwise meet on the same ports now and then: the hub's port is
derived from the job id (many tests use the same fake ids, and unrelated ids share a block with
probability 1/798), and `ports.free_base_port` checks a block is free only before the launch. A
worker in its own network namespace has its own loopback: every 127.0.0.1 port is its alone (the
`node1`.. names of /etc/hosts resolve to 127.0.0.1 there too). Tests that talk to the local Slurm
cluster (marker `slurm`) run in the machine's network: `enter_host` switches the calling thread
back for them, `enter_own` returns. Linux only, and it needs CAP_SYS_ADMIN (root, as the test
command runs on CI); without it `make_own` says so and the worker stays in the host's network.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import socket
import struct
from contextlib import contextmanager
from typing import Iterator, Optional

CLONE_NEWNET = 0x40000000
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
_IFREQ = "16sH22x"  # struct ifreq: the name, then ifr_flags in the union (40 bytes on 64-bit Linux)

_libc = ctypes.CDLL(None, use_errno=True)
_host_fd: Optional[int] = None  # the machine's network namespace
_own_fd: Optional[int] = None  # this worker's


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        name = struct.pack(_IFREQ, b"lo", 0)
        flags = struct.unpack(_IFREQ, fcntl.ioctl(s, SIOCGIFFLAGS, name))[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack(_IFREQ, b"lo", flags | IFF_UP))


def make_own() -> Optional[str]:
    """Move the calling thread (and what it starts later) into a new network namespace with its
    loopback up. None when done, else why not (the caller stays in the host's network)."""
    global _host_fd, _own_fd
    try:
        host = os.open("/proc/self/ns/net", os.O_RDONLY)
    except OSError as exc:
        return f"no /proc/self/ns/net ({exc.strerror})"
    try:
        _check(_libc.unshare(CLONE_NEWNET), "unshare(CLONE_NEWNET)")
        _loopback_up()
    except OSError as exc:
        os.close(host)
        return str(exc)
    _host_fd, _own_fd = host, os.open("/proc/self/ns/net", os.O_RDONLY)
    return None


def enter_host() -> bool:
    """Switch the calling thread to the machine's network (False: it never left it)."""
    if _host_fd is None:
        return False
    _check(_libc.setns(_host_fd, CLONE_NEWNET), "setns(host)")
    return True


def enter_own() -> None:
    """Switch the calling thread back to this worker's own network."""
    if _own_fd is not None:
        _check(_libc.setns(_own_fd, CLONE_NEWNET), "setns(own)")


@contextmanager
def host_network() -> Iterator[None]:
    """The machine's network for the block (a session fixture's teardown may run in any test's)."""
    left = enter_host()
    try:
        yield
    finally:
        if left:
            enter_own()
