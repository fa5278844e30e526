"""The network as this host sees it: name resolution, interface addresses, port probes.

Why together: these are the calls whose answers depend on the machine (DNS, interfaces, who
listens where); `plan` takes their answers as values (`plan.addresses.decide_auto` takes a
`resolves` function), so it stays testable with plain data.
"""

from __future__ import annotations

import errno
import fcntl
import socket
import struct

from tf_for_slurm.errors import PlanError, UsageError, bad_value
from tf_for_slurm.host import settings


def port_accepts(host: str, port: int, timeout: float = 0.5) -> bool:
    """True when something accepts TCP connections on host:port within `timeout` seconds."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False



def port_state(host: str, port: int, timeout: float = 0.5) -> str:
    """'up', 'refused' (the host answered that nothing listens: the server is gone) or 'no answer'
    (timeout, unreachable: maybe only slow)."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return "up"
    except ConnectionRefusedError:
        return "refused"
    except OSError:
        return "no answer"


def interface_address(iface: str) -> str:
    """IPv4 address of a local network interface (Linux), e.g. 'ib0'."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            packed = fcntl.ioctl(sock.fileno(), 0x8915, struct.pack("256s", iface.encode()[:15]))  # SIOCGIFADDR
        except OSError:
            names = [n for _, n in socket.if_nameindex()]
            raise UsageError(bad_value("iface", iface, f"an interface with an IPv4 address, one of {names}")) from None
    return socket.inet_ntoa(packed[20:24])


def check_resolvable(host: str, who: str) -> None:
    """getaddrinfo the host now, so a typo in a template fails with a name, not a gRPC timeout."""
    try:
        socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise PlanError(f"address host {host!r} of {who} does not resolve ({exc.strerror}): "
                        "expected a resolvable name (check " + settings.ADDRESS + " / the IB template)") from None


def resolves(host: str) -> bool:
    """True when getaddrinfo knows `host` (the resolver `decide_auto` uses in a real step)."""
    try:
        socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        return False
    return True


def ensure_bindable(port: int, who: str, host: str = "0.0.0.0") -> None:
    """Fail now, naming the port and the task, if the task's own port is taken.

    TensorFlow listens on all interfaces with SO_REUSEADDR, so the check binds the same way: a
    port in TIME_WAIT passes, a port another server listens on fails.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            reason = "already in use" if exc.errno == errno.EADDRINUSE else exc.strerror
            raise PlanError(bad_value(f"port of {who}", port, f"a free TCP port on this host ({reason}; "
                                      "another job on this node? set " + settings.BASE_PORT + " or use srun "
                                      "--resv-ports)")) from None


def interface_names() -> list:
    """This host's network interfaces by name ([] when the system will not say)."""
    try:
        return [n for _, n in socket.if_nameindex()]
    except OSError:
        return []
