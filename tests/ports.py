"""Free TCP ports for the tests' and benchmarks' real TensorFlow steps (no pytest here: bench/ imports it)."""

from __future__ import annotations

import random
import socket


def free_base_port(n: int) -> int:
    """A base port whose 2n ports (server + auxiliary per task) are free right now.

    Other test suites on this machine start TensorFlow servers too; checking a random block below
    Linux's ephemeral range (32768+) just before the launch keeps a run from failing on their ports
    (the job-derived window would otherwise collide now and then).
    """
    rng = random.Random()
    for _ in range(200):
        base = rng.randint(20000, 32000)
        socks = []
        try:
            for port in range(base, base + 2 * n):
                s = socket.socket()
                socks.append(s)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind(("0.0.0.0", port))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free block of ports found")
