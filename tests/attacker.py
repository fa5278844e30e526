"""Another user of the cluster, for the adversarial tests: a stdlib-only program run as `nobody`.

It knows what any user knows (the hub's host and port, the job and step id) and nothing else; it
runs with `python3 -I` from `/`, so it imports nothing of ours.  Modes: `lines` (fake hellos,
exits, ends, malformed and overlong lines, over and over; prints `cycle` before each round),
`hold` (claims a rank and sends heartbeats), `flood` (never reads: acks would pile up), `junk`
(about 1 MB/s), `idle` (1000 silent connections), `fakehub SECONDS [COUNT CAP]` (takes the port first
and answers like a hub: for SECONDS, then until it answered COUNT connections, at most CAP s).
"""

from __future__ import annotations

import subprocess

SYSTEM_PY = "/usr/bin/python3"

# The attacker: stdlib only, run as nobody.  argv: host port tag mode [seconds]
ATTACKER = r'''
import os, random, resource, select, socket, sys, time
host, port, tag, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
N = "0" * 32
SEQS = [
    [f"hello 2 {tag}", "exit 256"],                    # the old protocol: ended every task with 0
    [f"hello 2 {tag}", "exit --1"],
    [f"hello 2 {tag} {N}", "exit 256"],
    [f"hello 2 {tag} {N}", "proof " + "0" * 64, "exit 1"],
    [f"hello 1 {tag} {N}", "proof " + "a" * 64, "exit 137"],
    [f"hello 2 {tag} {N}", "exit 42"],
    [f"hello 2 {tag} {N}", "started", "bye 0"],
    ["exit --1"], ["end --1"], ["exit 0"], ["bye 0"] * 1000,
    [f"hello -1 {tag} {N}"], [f"hello 99999999999999999999 {tag} {N}"], [f"hello 2 {tag} " + "g" * 32],
    [f"hello 0 {tag} {N}"], [f"hello 2 1.0 {N}"], ["x" * 10000],
]

def connect():
    s = socket.socket()
    s.settimeout(1)
    s.connect((host, port))
    return s

def lines():
    while True:
        print("cycle", flush=True)
        for seq in SEQS:
            try:
                s = connect()
                s.sendall("".join(l + "\n" for l in seq).encode())
                select.select([s], [], [], 0.05)
                s.close()
            except OSError:
                time.sleep(0.02)

HELLOS = [f"hello 2 {tag}", f"hello 2 {tag} {N}"]  # the old protocol's and today's

def hold():  # claim rank 2 and keep the connection busy with heartbeats
    n = 0
    while True:
        n += 1
        try:
            s = connect()
            s.sendall(f"{HELLOS[n % 2]}\n".encode())
            while True:
                s.sendall(b"hb\n")
                time.sleep(0.1)
        except OSError:
            time.sleep(0.02)

def flood():  # never read: every `bye` would queue an `ack`
    n = 0
    while True:
        n += 1
        try:
            s = connect()
            s.setblocking(True)
            s.sendall(f"{HELLOS[n % 2]}\nproof {'0' * 64}\n".encode() + b"bye 0\n" * 200000)
        except OSError:
            time.sleep(0.02)

def junk():  # about 1 MB/s of junk lines on one connection, reconnecting when dropped
    chunk = bytes(random.getrandbits(8) for _ in range(10000)).replace(b"\0", b"\n")
    while True:
        try:
            s = connect()
            while True:
                s.sendall(chunk)
                time.sleep(0.01)
        except OSError:
            time.sleep(0.02)

def idle(count=1000):  # connections that never say anything, reopened when dropped
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    socks = []
    while True:
        while len(socks) < count:
            try:
                s = socket.socket()
                s.setblocking(False)
                s.connect_ex((host, port))
                socks.append(s)
            except OSError:
                break
        r, _, _ = select.select(socks[:1000], [], [], 0.05)
        for s in r:
            try:
                if s.recv(4096) == b"":
                    raise OSError
            except OSError:
                s.close()
                socks.remove(s)

def fakehub(seconds, count=0, cap=0.0):  # takes the hub's port first and answers like a hub would
    srv = socket.create_server(("", port))
    srv.settimeout(0.05)
    print("bound", flush=True)
    answers = [f"ok 0.2", "end 0 training is over", "regroup 0", f"restart 0", f"challenge {N} {'0' * 64}",
               "error duplicate-task"]
    start = time.monotonic()
    i = 0
    while time.monotonic() - start < seconds or (i < count and time.monotonic() - start < cap):
        try:
            c, _ = srv.accept()
        except OSError:
            continue
        try:
            c.sendall((answers[i % len(answers)] + "\n" + "ok 0.2\nend 0 x\n").encode())
        except OSError:
            pass
        i += 1
        c.close()
    srv.close()
    print("released", i, flush=True)

if mode == "fakehub":
    fakehub(float(sys.argv[5]), *([int(sys.argv[6]), float(sys.argv[7])] if len(sys.argv) > 7 else []))
else:
    {"lines": lines, "hold": hold, "flood": flood, "junk": junk, "idle": idle}[mode]()
'''


def attacker(port: int, tag: str, mode: str, *extra: str) -> subprocess.Popen:
    cmd = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", SYSTEM_PY, "-I", "-c", ATTACKER,
           "127.0.0.1", str(port), tag, mode, *extra]
    return subprocess.Popen(cmd, cwd="/", stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


