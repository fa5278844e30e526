"""What the supervision channel's authentication costs, and what hostile peers cost the hub (no TensorFlow).

    .venv/bin/python bench/bench_hostile.py [--handshakes 500] [--idle 1000] [--junk-rate 1000000]
                                            [--junk blank|random] [--reconnect-delay 0.1] [--sleep 3]

Why: the hub listens on a port every user of the cluster can reach (supervise/handshake.py).  A
task must not start noticeably later because of the handshake, and peers that never prove they
hold the step's key must not keep a real step from ending on time.

(a) handshake cost, against a real Hub process (bench_liveness.py's `_hub`: a localhost plan of
    `--handshakes`+1 tasks): a spoke's time from TCP connect to the hub's `ok` (hello, the hub's
    challenge checked, our proof; every joined connection kept open, one per rank), median and p99;
    and, interleaved with those, a plain connect + hello round trip the hub answers without any HMAC
    work (a hello for another step: `error other-job`), so the difference is what authentication adds
    (target: at most 5 ms).  Then the CPU cost of one proof() and one proof_ok() (timeit).
(b) a real step, `tf-slurm local -n 3 -- sh -c 'sleep S'` (TF_SLURM_BASE_PORT set to a free block,
    the hub's port from `tf-slurm explain`), once alone and once under attack by one other process
    (`_attack`): `--idle` connections that never say hello, each reopened `--reconnect-delay` seconds
    after the hub drops it, and one connection streaming `--junk-rate` bytes/s of junk lines (`blank`:
    lines of spaces and tabs, which the hub reads and skips until the hello deadline, the costliest;
    `random`: garbage, dropped at its first line), reopened at once when dropped.  Printed: the step's
    wall time and status with and without the attack (target: within 1 s of the unattacked run), the
    hub's CPU (utime+stime of the process holding the listening socket) as % of one core, and what the
    attacker achieved (connects/s, junk sent, drops).
(c) the hub's liveness figures at 4,000 tasks (CPU while every spoke heart-beats, time until a killed
    or silent task is noticed) are bench_liveness.py's, not repeated here:
        .venv/bin/python bench/bench_liveness.py --sizes 4000 --reports 0 --wait 10

Exit status 0 unless a run could not be carried out (figures over target are marked OVER, not fatal:
`--strict` makes them fatal).  The attacker and the step share this machine's cores: on a small
machine the attacker's own CPU (printed) is part of what slows the step.
"""

from __future__ import annotations

import argparse
import errno
import heapq
import json
import os
import random
import resource
import selectors
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIVENESS = ROOT / "bench" / "bench_liveness.py"
TICK = os.sysconf("SC_CLK_TCK")
TAG = "local.0"  # localhost_plan's job.step (bench_liveness's hub)
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]


def _raise_nofile(want: int) -> int:
    """Lift the soft descriptor limit toward `want` (the attacker holds one per connection); the limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            pass
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def _clean_env(**extra: str) -> dict:
    """This environment without any Slurm step or tf-slurm setting of the caller's, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "TF_SLURM_"))}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


def _pct(values, q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


# ---------------------------------------------------------------------------------------------
# (a) the handshake's cost
# ---------------------------------------------------------------------------------------------
def _line(sock: socket.socket, buf: bytearray) -> str:
    while b"\n" not in buf:
        data = sock.recv(4096)
        if not data:
            raise ConnectionError("the hub closed the connection")
        buf += data
    line, _, rest = bytes(buf).partition(b"\n")
    buf[:] = rest
    return line.decode()


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as a spoke's (wire.keepalive)
    return sock


def handshake_figures(n: int) -> dict:
    """Connect-to-ok for n ranks (kept joined), and n plain hello round trips, interleaved."""
    from tf_for_slurm.host.step_secret import step_key
    from tf_for_slurm.supervise.handshake import hello_line, new_nonce, proof, proof_ok

    secret = os.urandom(32).hex()
    key = step_key({"TF_SLURM_SECRET": secret}, TAG)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # silence and grace far beyond the measurement: joined connections need not heart-beat
    env = _clean_env(TF_SLURM_SECRET=secret, TF_SLURM_SILENCE="600", TF_SLURM_CONNECT_GRACE="600")
    log = tempfile.TemporaryFile(mode="w+")
    hub = subprocess.Popen([sys.executable, str(LIVENESS), "_hub", "--size", str(n + 1), "--port", str(port),
                            "--", "sleep", "3600"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                           text=True, env=env, start_new_session=True)
    joined = []
    try:
        if hub.stdout.readline().strip() != "ready":
            log.seek(0)
            raise RuntimeError("the hub did not start:\n" + log.read()[-2000:])
        deadline = time.monotonic() + 30
        while True:  # it binds inside run(): wait until it listens
            try:
                _connect(port).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("the hub never listened") from None
                time.sleep(0.02)
        plain, auth = [], []
        for rank in range(1, n + 1):
            t0 = time.perf_counter()
            sock, buf = _connect(port), bytearray()
            sock.sendall((hello_line(rank, "other.0", new_nonce()) + "\n").encode())
            answer = _line(sock, buf)
            plain.append(time.perf_counter() - t0)
            sock.close()
            if answer != "error other-job":
                raise RuntimeError(f"plain hello answered {answer!r}")

            t0 = time.perf_counter()
            sock, buf, mine = _connect(port), bytearray(), new_nonce()
            sock.sendall((hello_line(rank, TAG, mine) + "\n").encode())
            _, theirs, mac = _line(sock, buf).split()
            if not proof_ok(key, mac, "hub", TAG, rank, mine, theirs):
                raise RuntimeError("the hub's proof failed")
            sock.sendall(f"proof {proof(key, 'spoke', TAG, rank, theirs, mine)}\n".encode())
            answer = _line(sock, buf)
            auth.append(time.perf_counter() - t0)
            joined.append(sock)
            if not answer.startswith("ok "):
                raise RuntimeError(f"the handshake of rank {rank} ended with {answer!r}")
    finally:
        for sock in joined:
            sock.close()
        try:
            os.killpg(hub.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        hub.wait()
        log.close()
    mac = proof(key, "hub", TAG, 1, new_nonce(), new_nonce())
    calls = 20000
    t_proof = timeit.timeit(lambda: proof(key, "hub", TAG, 1, "a" * 32, "b" * 32), number=calls) / calls
    t_ok = timeit.timeit(lambda: proof_ok(key, mac, "hub", TAG, 1, "a" * 32, "b" * 32), number=calls) / calls
    return dict(n=n, plain=plain, auth=auth, proof_us=t_proof * 1e6, proof_ok_us=t_ok * 1e6)


# ---------------------------------------------------------------------------------------------
# (b) the attacker: one process, one selectors loop
# ---------------------------------------------------------------------------------------------
def _junk(kind: str, size: int = 1 << 20) -> bytes:
    """A buffer of junk lines to stream from (never a protocol line)."""
    rng = random.Random(7)
    out = bytearray()
    while len(out) < size:
        if kind == "blank":  # read and skipped by the hub: the connection lives until its hello deadline
            out += bytes(rng.choice(b" \t") for _ in range(rng.randint(0, 60))) + b"\n"
        else:
            out += bytes(rng.randint(33, 126) for _ in range(rng.randint(1, 60))) + b"\n"
    return bytes(out[:size])


class _Slot:
    __slots__ = ("sock", "connecting", "streamer")

    def __init__(self, streamer: bool):
        self.sock = None
        self.connecting = False
        self.streamer = streamer


def attack_main(argv) -> int:
    p = argparse.ArgumentParser(prog="bench_hostile.py _attack")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--idle", type=int, required=True)
    p.add_argument("--junk-rate", type=float, required=True)
    p.add_argument("--junk", default="blank")
    p.add_argument("--reconnect-delay", type=float, required=True)
    a = p.parse_args(argv)
    limit = _raise_nofile(a.idle + 256)
    idle = max(0, min(a.idle, limit - 64))
    junk = _junk(a.junk)
    offset = 0
    sel = selectors.DefaultSelector()
    os.set_blocking(0, False)
    sel.register(0, selectors.EVENT_READ, "ctl")
    slots = [_Slot(False) for _ in range(idle)] + ([_Slot(True)] if a.junk_rate > 0 else [])
    timers = [(0.0, i) for i in range(len(slots))]  # (when, slot): connect then
    st = dict(idle=idle, attempts=0, established=0, refused=0, dropped=0, junk_bytes=0, open=0, max_open=0)
    budget, last = 0.0, time.monotonic()
    ctl = b""

    def out(obj) -> None:
        os.write(1, (json.dumps(obj) + "\n").encode())

    def close(i: int, delay: float, count: str) -> None:
        slot = slots[i]
        if slot.sock is not None:
            try:
                sel.unregister(slot.sock)
            except (KeyError, ValueError):
                pass
            slot.sock.close()
            if not slot.connecting:
                st["open"] -= 1
        slot.sock, slot.connecting = None, False
        st[count] += 1
        heapq.heappush(timers, (time.monotonic() + delay, i))

    def connect(i: int) -> None:
        st["attempts"] += 1
        try:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        except OSError:
            heapq.heappush(timers, (time.monotonic() + 0.2, i))
            return
        sock.setblocking(False)
        rc = sock.connect_ex(("127.0.0.1", a.port))
        slots[i].sock, slots[i].connecting = sock, True
        if rc not in (0, errno.EINPROGRESS):
            close(i, 0.2, "refused")  # the hub is not (or no longer) listening
            return
        sel.register(sock, selectors.EVENT_WRITE, i)

    running = True
    while running:
        now = time.monotonic()
        while timers and timers[0][0] <= now:
            i = heapq.heappop(timers)[1]
            if slots[i].sock is None:
                connect(i)
        streamer = slots[-1] if slots and slots[-1].streamer else None
        if streamer is not None:
            budget = min(budget + a.junk_rate * (now - last), a.junk_rate * 0.1)
            if streamer.sock is not None and not streamer.connecting and budget >= 1:
                chunk = junk[offset:offset + min(int(budget), 65536)] or junk[:min(int(budget), 65536)]
                try:
                    sent = streamer.sock.send(chunk)
                    st["junk_bytes"] += sent
                    budget -= sent
                    offset = (offset + sent) % len(junk)
                except (BlockingIOError, InterruptedError):
                    pass
                except OSError:
                    close(len(slots) - 1, 0.0, "dropped")
        last = now
        wait = 0.01 if streamer is not None else 0.5
        if timers:
            wait = min(wait, max(0.0, timers[0][0] - time.monotonic()))
        for key, _mask in sel.select(wait):
            if key.data == "ctl":
                try:
                    chunk = os.read(0, 4096)
                except BlockingIOError:
                    continue
                if not chunk:
                    running = False
                    break
                ctl += chunk
                *cmds, ctl = ctl.split(b"\n")
                for cmd in cmds:
                    if cmd.strip() == b"stats":
                        out(dict(st, cpu=sum(os.times()[:2]), t=time.monotonic()))
                    elif cmd.strip() == b"quit":
                        running = False
                continue
            i = key.data
            slot = slots[i]
            if slot.connecting:  # (epoll's HUP/ERR also read as EVENT_WRITE)
                if slot.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                    close(i, 0.2, "refused")
                    continue
                slot.connecting = False
                st["established"] += 1
                st["open"] += 1
                st["max_open"] = max(st["max_open"], st["open"])
                sel.modify(slot.sock, selectors.EVENT_READ, i)
                continue
            try:
                data = slot.sock.recv(65536)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                data = b""
            if not data:  # the hub dropped us: open another
                close(i, 0.0 if slot.streamer else a.reconnect_delay, "dropped")
    for slot in slots:
        if slot.sock is not None:
            slot.sock.close()
    return 0


class Attacker:
    def __init__(self, port: int, args):
        self.proc = subprocess.Popen([sys.executable, __file__, "_attack", "--port", str(port), "--idle",
                                      str(args.idle), "--junk-rate", str(args.junk_rate), "--junk", args.junk,
                                      "--reconnect-delay", str(args.reconnect_delay)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)

    def stats(self) -> dict:
        self.proc.stdin.write("stats\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the attacker exited ({self.proc.poll()})")
        return json.loads(line)

    def stop(self) -> None:
        try:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.flush()
            self.proc.wait(10)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()


# ---------------------------------------------------------------------------------------------
# (b) the step
# ---------------------------------------------------------------------------------------------
def _hub_port(base: int) -> int:
    """The chief's auxiliary port of `local -n 3` with this base port, as the plan gives it."""
    out = subprocess.run([sys.executable, "-m", "tf_for_slurm", "explain", "--nodelist", "node1",
                          "--tasks-per-node", "3", "--json"], capture_output=True, text=True, check=True,
                         env=_clean_env(TF_SLURM_BASE_PORT=str(base)), cwd=ROOT, timeout=60).stdout
    plan = json.loads(out)
    return next(t["aux_port"] for t in plan["tasks"] if t["rank"] == plan["chief"])


def _descendants(root: int) -> list:
    parents = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                parents[int(name)] = int(Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    found, frontier = [], [root]
    while frontier:
        pid = frontier.pop()
        kids = [c for c, pp in parents.items() if pp == pid]
        found += kids
        frontier += kids
    return found


def _listener(port: int, pids: list):
    """The pid among `pids` holding the socket that listens on `port`, else None."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{cols[9]}]")
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                    return pid
        except OSError:
            continue
    return None


def run_step(sleep: float, args, attack: bool) -> dict:
    from ports import free_base_port

    base = free_base_port(3)
    port = _hub_port(base)
    attacker = Attacker(port, args) if attack else None
    folder = tempfile.mkdtemp(prefix="bench_hostile.")
    log = tempfile.TemporaryFile(mode="w+")
    fig = dict(attack=attack, port=port)
    try:
        if attacker is not None:
            attacker.stats()  # its loop runs (hammering a closed port) before the step starts
            time.sleep(0.5)
        a0 = attacker.stats() if attacker is not None else None
        t0 = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-m", "tf_for_slurm", "local", "-n", "3", "--folder", folder,
                                 "--", "sh", "-c", f"sleep {sleep:g}"], cwd=ROOT, stdout=log, stderr=log,
                                env=_clean_env(TF_SLURM_BASE_PORT=str(base)), start_new_session=True)
        hub, samples = None, []
        deadline = t0 + sleep + 60
        while proc.poll() is None:
            if time.monotonic() > deadline:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                break
            if hub is None:
                hub = _listener(port, _descendants(proc.pid))
            if hub is not None:
                try:
                    samples.append((time.monotonic(), _cpu_seconds(hub)))
                except (OSError, IndexError):
                    pass
            time.sleep(0.05)
        fig["wall"] = time.monotonic() - t0
        fig["status"] = proc.returncode
        a1 = attacker.stats() if attacker is not None else None
        if len(samples) >= 2 and samples[-1][0] > samples[0][0]:
            fig["hub_cpu_pct"] = 100.0 * (samples[-1][1] - samples[0][1]) / (samples[-1][0] - samples[0][0])
            fig["hub_window"] = samples[-1][0] - samples[0][0]
        if a0 is not None and a1 is not None:
            span = a1["t"] - a0["t"]
            fig["attack"] = {k: a1[k] - a0[k] for k in ("attempts", "established", "refused", "dropped", "junk_bytes")}
            fig["attack"].update(span=span, max_open=a1["max_open"], idle=a1["idle"],
                                 cpu_pct=100.0 * (a1["cpu"] - a0["cpu"]) / span)
        log.seek(0)
        fig["log"] = log.read()[-3000:]
    finally:
        if attacker is not None:
            attacker.stop()
        log.close()
        shutil.rmtree(folder, ignore_errors=True)
    return fig


# ---------------------------------------------------------------------------------------------
# the report
# ---------------------------------------------------------------------------------------------
def report(hs: dict, calm: dict, hostile: dict, args) -> bool:
    met = True

    def row(label: str, value: str, target: str = "", ok: bool = True) -> None:
        nonlocal met
        met = met and ok
        print(f"  {label:58}{value:>24}   {target}{'' if ok else '   OVER'}")

    ms = 1e3
    print()
    print(f"hostile-peer figures ({os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f})")
    print(f"(a) handshake, {hs['n']} connections to a real hub process (each rank joins once and stays)")
    plain_med, plain_p99 = statistics.median(hs["plain"]) * ms, _pct(hs["plain"], 0.99) * ms
    auth_med, auth_p99 = statistics.median(hs["auth"]) * ms, _pct(hs["auth"], 0.99) * ms
    row("connect + hello -> answer, no HMAC: median / p99", f"{plain_med:.2f} / {plain_p99:.2f} ms")
    row("connect + handshake -> `ok`: median / p99", f"{auth_med:.2f} / {auth_p99:.2f} ms")
    row("added by authentication: median / p99", f"{auth_med - plain_med:.2f} / {auth_p99 - plain_p99:.2f} ms",
        "<= 5 ms", max(auth_med - plain_med, auth_p99 - plain_p99) <= 5.0)
    row("proof(): CPU per call", f"{hs['proof_us']:.1f} us")
    row("proof_ok(): CPU per call", f"{hs['proof_ok_us']:.1f} us")
    print(f"(b) `tf-slurm local -n 3 -- sh -c 'sleep {args.sleep:g}'`; attack: {args.idle} idle connections "
          f"(reopened {args.reconnect_delay:g} s after a drop) + 1 streaming {args.junk_rate / 1e6:g} MB/s of "
          f"{args.junk} junk lines")
    for fig, what in ((calm, "no attack"), (hostile, "under attack")):
        row(f"step wall time / status, {what}", f"{fig['wall']:.2f} s / {fig['status']}",
            "<= no attack + 1 s" if fig is hostile else "",
            fig["status"] == 0 and (fig is calm or fig["wall"] <= calm["wall"] + 1.0))
    for fig, what in ((calm, "no attack"), (hostile, "under attack")):
        cpu = fig.get("hub_cpu_pct")
        row(f"hub CPU, % of one core, {what}", "-" if cpu is None else f"{cpu:.1f}% over {fig['hub_window']:.1f} s")
    at = hostile.get("attack")
    if at:
        span = at["span"]
        row("attack: connects/s (accepted by the kernel)", f"{at['established'] / span:,.0f}")
        row("attack: drops by the hub/s", f"{at['dropped'] / span:,.0f}")
        row("attack: connects refused (port closed)/s", f"{at['refused'] / span:,.0f}")
        row("attack: junk sent", f"{at['junk_bytes'] / span / 1e6:.2f} MB/s")
        row("attack: most connections open at once", f"{at['max_open']:,} of {at['idle'] + 1:,}")
        row("(attacker's own CPU, % of one core, context)", f"{at['cpu_pct']:.1f}%")
    for fig in (calm, hostile):
        if fig["status"] != 0:
            print(f"--- step log ({'attacked' if fig['attack'] else 'calm'}) ---\n{fig['log']}")
    print()
    return met


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--handshakes", type=int, default=500, help="connections measured in (a)")
    p.add_argument("--idle", type=int, default=1000, help="hostile idle connections in (b)")
    p.add_argument("--junk-rate", type=float, default=1e6, help="bytes/s of junk lines in (b) (0: none)")
    p.add_argument("--junk", choices=("blank", "random"), default="blank", help="what the junk lines hold")
    p.add_argument("--reconnect-delay", type=float, default=0.1, help="seconds before an idle one is reopened")
    p.add_argument("--sleep", type=float, default=3.0, help="the step's command: sh -c 'sleep S'")
    p.add_argument("--strict", action="store_true", help="exit 1 when a figure misses its target")
    p.add_argument("--json", help="also write the figures to this file")
    args = p.parse_args(argv)
    started = time.monotonic()
    print(f"(a) {args.handshakes} handshakes ...", flush=True)
    hs = handshake_figures(args.handshakes)
    print("(b) the step alone ...", flush=True)
    calm = run_step(args.sleep, args, attack=False)
    print("(b) the step under attack ...", flush=True)
    hostile = run_step(args.sleep, args, attack=True)
    met = report(hs, calm, hostile, args)
    print(f"bench time {time.monotonic() - started:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(dict(handshake=hs, calm=calm, hostile=hostile), indent=1))
    return 1 if (args.strict and not met) else 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_attack":
        sys.exit(attack_main(sys.argv[2:]))
    sys.exit(main())
