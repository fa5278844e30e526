"""What the plan's names resolve to on this node, within a deadline: the preflight's view of the names.

Why here: the answer depends on the machine (/etc/hosts, DNS), and host/ is where the machine is asked
(host/network.py's `resolves` says only whether a name resolves; the check must say what it resolved
to, on both sides).  getaddrinfo has no timeout of its own, so the names are resolved on a helper
thread and a name whose answer has not come by the deadline is said to have none.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
from typing import Dict, Iterable, Mapping, NamedTuple, Tuple

from tf_for_slurm.host import settings, threads

#: the settings the check's fix line names (plan/ spells no setting's name)
FIX_NAMES = {"address": settings.ADDRESS, "ib_template": settings.IB_TEMPLATE, "base_port": settings.BASE_PORT,
             "timeout": settings.PREFLIGHT_TIMEOUT}


def preflight_timeout(env: Mapping[str, str]) -> float:
    """TF_SLURM_PREFLIGHT_TIMEOUT: seconds in (0, 3600), else its default (30)."""
    value = settings.seconds(env, settings.PREFLIGHT_TIMEOUT, 0.0, 3600.0, lo_open=True)
    return settings.default_seconds(settings.PREFLIGHT_TIMEOUT) if value is None else value


class Resolution(NamedTuple):
    addresses: Tuple[str, ...]  # getaddrinfo's order, each once; () when the name did not resolve
    error: str = ""  # why not, in the resolver's words


def resolve(host: str) -> Resolution:
    """`host`'s addresses for a TCP connection, as a connection from this node would try them."""
    try:
        ipaddress.ip_address(host)
        return Resolution((host,))
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        return Resolution((), getattr(exc, "strerror", None) or str(exc) or "does not resolve")
    return Resolution(tuple(dict.fromkeys(str(info[4][0]) for info in infos)))


def resolve_all(hosts: Iterable[str], timeout: float) -> Dict[str, Resolution]:
    """Every host's Resolution; one whose answer did not come within `timeout` s: none, and why."""
    names = list(dict.fromkeys(hosts))
    out: Dict[str, Resolution] = {}
    pending = []
    for host in names:
        try:
            ipaddress.ip_address(host)
            out[host] = Resolution((host,))
        except ValueError:
            pending.append(host)
    if not pending:
        return out
    done = threading.Event()

    def work() -> None:
        for host in pending:
            out[host] = resolve(host)
        done.set()

    threads.start_daemon(work, name="tf_slurm-resolve")
    done.wait(timeout)
    return {h: out.get(h) or Resolution((), f"no answer from the name service in {timeout:g} s") for h in names}
