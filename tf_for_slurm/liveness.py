"""Is a task's server still there?  A TCP connect is enough and needs no TensorFlow."""

from __future__ import annotations

import socket


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
