"""The supervisors' handshake, played by a test: a hub or a spoke that holds (or lacks) the step's key.

Blocking sockets, for tests that stand in for one side of `tf-slurm exec` (supervise/wire.py).
"""

from __future__ import annotations

import socket
from typing import List, Optional, Tuple

from tf_for_slurm.host.step_secret import step_key
from tf_for_slurm.supervise.handshake import new_nonce, proof, proof_ok

SECRET = "t" * 40  # TF_SLURM_SECRET for the tests' steps


def key_for(tag: str, secret: str = SECRET) -> bytes:
    return step_key({"TF_SLURM_SECRET": secret}, tag)


def read_line(sock: socket.socket, buf: bytearray) -> Optional[str]:
    """The next line from `sock` (None at EOF); `buf` keeps what came after it."""
    while b"\n" not in buf:
        data = sock.recv(4096)
        if not data:
            return None
        buf += data
    line, _, rest = bytes(buf).partition(b"\n")
    buf[:] = rest
    return line.decode()


def answer_as_hub(conn: socket.socket, key: bytes, tag: str, buf: bytearray) -> Tuple[bool, List[str]]:
    """The hub's side of the handshake on an accepted connection: (proven, lines seen)."""
    seen: List[str] = []
    hello = read_line(conn, buf)
    if hello is None:
        return False, seen
    seen.append(hello)
    _, rank, _tag, theirs = hello.split()
    mine = new_nonce()
    conn.sendall(f"challenge {mine} {proof(key, 'hub', tag, int(rank), theirs, mine)}\n".encode())
    line = read_line(conn, buf)
    if line is None:
        return False, seen
    seen.append(line)
    return proof_ok(key, line.split()[1], "spoke", tag, int(rank), mine, theirs), seen


def join_as_spoke(sock: socket.socket, key: bytes, tag: str, rank: int, buf: bytearray) -> Optional[str]:
    """The spoke's side on a connected socket: the hub's answer to our proof (`ok ...`), or None
    when the hub did not prove itself (or closed)."""
    mine = new_nonce()
    sock.sendall(f"hello {rank} {tag} {mine}\n".encode())
    line = read_line(sock, buf)
    if line is None:
        return None
    parts = line.split()
    if len(parts) != 3 or parts[0] != "challenge" or not proof_ok(key, parts[2], "hub", tag, rank, mine, parts[1]):
        return None
    sock.sendall(f"proof {proof(key, 'spoke', tag, rank, parts[1], mine)}\n".encode())
    return read_line(sock, buf)
