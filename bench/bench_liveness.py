"""Liveness figures for the `tf-slurm exec` supervisor, without TensorFlow (issue 7, item 7).

    .venv/bin/python bench/bench_liveness.py [--sizes 100,1000,4000] [--reports 16000]
                                             [--wait 10] [--unreachable 0.05] [--sims 4]

The REAL hub (tf_for_slurm.supervisor.Hub) runs in its own process for a localhost plan (chief +
N-1 workers, strategy mwms, the chief's command a long `sleep`); the N-1 other tasks' supervisors
are simulated by a few processes (`--sims`, each a selectors loop driving its share of raw TCP
connections) that speak the wire protocol as `Spoke` does: `hello <rank> local.0 <nonce>`, the
hub's `challenge` checked and answered with `proof` (the step's key from TF_SLURM_SECRET, set here), `hb` every
TF_SLURM_HEARTBEAT seconds after the hub's `ok`, `bye 143` when told `end` (and close on `ack`),
`exit <status>` (close on `ack`).  A fraction `--unreachable` of the tasks never connects (their
node is not reachable): the hub must spend nothing on them.  Timing comes from the environment as
in exec (TF_SLURM_HEARTBEAT, default 2 s; TF_SLURM_SILENCE, default 10 s); with TF_SLURM_STATUS_FILE
set, the hub also writes the step's status file (its cost is then in the CPU figures).

For each size, two hub runs:
- run 1: all reachable tasks join (join time, connects/s while joining); then, for `--wait`
  seconds, the hub's CPU (utime+stime from /proc/<pid>/stat) as % of one core, and the hub's
  accepted-connections counter (connects/s while waiting); then one task goes silent without
  closing its socket (a dead, unreachable node): time from its LAST heartbeat (the worst case)
  until the other tasks receive `end`.
- run 2: all join; one task's connection is closed abruptly (what the kernel does for a
  SIGKILLed supervisor): time from the close until the other tasks receive `end`.
In both, "chief's task ended" is the hub's exit after its decision: it ends its own command and
waits for every task to settle, at most its end grace (kill_grace + min(2 s, silence)) since the unreachable
tasks never do.
Then `--reports` simultaneous done reports (`exit 0` from that many tasks at one agreed instant,
8 simulator processes): time until every task had its `ack`, (a) while the chief's command still
runs and (b) after the chief's command has exited 0 (the hub is then draining trainers).

Figures against the issue's targets; exit status 0 unless a run could not be carried out
(figures over target are reported, not fatal: `--strict` makes them fatal).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import errno
import json
import os
import resource
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TAG = "local.0"  # localhost_plan's job.step
TICK = os.sysconf("SC_CLK_TCK")


def _raise_nofile() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            pass


def _timing_env():
    sys.path.insert(0, str(ROOT))
    from tf_for_slurm.supervise.supervisor import Timing

    return Timing.from_env(os.environ)


# ---------------------------------------------------------------------------------------------
# the hub process: the real Hub for a localhost plan, plus a control thread (stdin -> stdout)
# ---------------------------------------------------------------------------------------------
def hub_main(argv) -> int:
    p = argparse.ArgumentParser(prog="bench_liveness.py _hub")
    p.add_argument("--size", type=int, required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--strategy", default="mwms")
    p.add_argument("cmd", nargs="+")
    a = p.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    import logging

    from tf_for_slurm.host import job_folder
    from tf_for_slurm.plan import localhost_plan
    from tf_for_slurm.plan.strategy import step_roles
    from tf_for_slurm.supervise.supervisor import Hub, Timing

    logging.basicConfig(level=logging.WARNING, format="hub %(levelname)s %(message)s")
    plan = localhost_plan(["chief"] + ["worker"] * (a.size - 1), [1] * a.size, my_rank=0)
    plan = dataclasses.replace(plan, tasks=(plan.tasks[0]._replace(aux_port=a.port),) + plan.tasks[1:])
    hub = Hub(plan, step_roles(plan.tasks, a.strategy), a.cmd, dict(os.environ), Timing.from_env(os.environ),
              status_file=job_folder.status_path(os.environ),  # TF_SLURM_STATUS_FILE: the cost with it on
              key=_key())  # TF_SLURM_STATUS_FILE: the cost with it on
    out_lock = threading.Lock()

    def say(text: str) -> None:
        with out_lock:
            sys.stdout.write(text + "\n")
            sys.stdout.flush()

    def control() -> None:  # blocked in read: costs the hub nothing while waiting
        for line in sys.stdin:
            if line.strip() == "accepted":
                say(f"accepted {hub.gate.accepted}")

    threading.Thread(target=control, daemon=True).start()
    say("ready")
    status = hub.run()
    say(f"exit {status} {time.monotonic():.6f}")
    return status


# ---------------------------------------------------------------------------------------------
# a simulator process: many spokes' connections in one selectors loop
# ---------------------------------------------------------------------------------------------
def _key() -> bytes:
    sys.path.insert(0, str(ROOT))
    from tf_for_slurm.host.step_secret import step_key

    return step_key(os.environ, TAG)


class _SimConn:
    __slots__ = ("rank", "sock", "inbuf", "connecting", "joined", "silent", "done", "last_hb", "heartbeat", "nonce")

    def __init__(self, rank: int, sock: socket.socket):
        self.rank, self.sock, self.inbuf = rank, sock, b""
        self.nonce = ""
        self.connecting = True
        self.joined = self.silent = self.done = False  # done: exit/bye sent or end received: no more hb
        self.last_hb = 0.0
        self.heartbeat = 2.0  # replaced by the interval the hub asks for in its `ok`


def sim_main(argv) -> int:
    p = argparse.ArgumentParser(prog="bench_liveness.py _sim")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--first", type=int, required=True)
    p.add_argument("--count", type=int, required=True)  # ranks first .. first+count-1 connect
    p.add_argument("--heartbeat", type=float, required=True)
    a = p.parse_args(argv)
    _raise_nofile()
    step_key_ = _key()
    from tf_for_slurm.supervise.handshake import new_nonce, proof, proof_ok

    sel = selectors.DefaultSelector()
    os.set_blocking(0, False)
    sel.register(0, selectors.EVENT_READ, "ctl")
    conns = {}  # rank -> _SimConn
    retry = collections.deque()  # (when, rank) connections refused: try again
    beats = collections.deque()  # (due, rank): always appended with now + heartbeat: stays sorted
    st = dict(n=a.count, ok=0, t_ok_first=None, t_ok_last=None, refused=0, ends=0, t_end_first=None,
              t_end_last=None, end_status=[], acks=0, t_ack_last=None, hub_closed=0, errors=0, hb=0,
              exits=0, t_exit_first=None, t_exit_last=None, silent_ends=0)
    exit_at = None
    exit_status = 0
    ctl_buf = b""

    def out(obj) -> None:
        os.write(1, (json.dumps(obj) + "\n").encode())

    def connect(rank: int) -> None:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        rc = s.connect_ex(("127.0.0.1", a.port))
        if rc not in (0, errno.EINPROGRESS):
            s.close()
            st["refused"] += 1
            retry.append((time.monotonic() + 0.05, rank))
            return
        c = _SimConn(rank, s)
        c.heartbeat = a.heartbeat
        conns[rank] = c
        sel.register(s, selectors.EVENT_WRITE, c)

    def close(c: _SimConn) -> None:
        try:
            sel.unregister(c.sock)
        except (KeyError, ValueError):
            pass
        c.sock.close()
        conns.pop(c.rank, None)

    def send(c: _SimConn, text: str) -> None:
        try:
            c.sock.send(text.encode() + b"\n")
        except OSError:
            pass

    def on_writable(c: _SimConn) -> None:  # connect finished
        c.connecting = False
        err = c.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err:
            close(c)
            st["refused"] += 1
            retry.append((time.monotonic() + 0.05, c.rank))
            return
        sel.modify(c.sock, selectors.EVENT_READ, c)
        c.nonce = new_nonce()
        send(c, f"hello {c.rank} {TAG} {c.nonce}")

    def on_readable(c: _SimConn) -> None:
        try:
            data = c.sock.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        now = time.monotonic()
        if not data:
            st["hub_closed"] += 1
            close(c)
            return
        *lines, c.inbuf = (c.inbuf + data).split(b"\n")
        for line in lines:
            parts = line.decode().split()
            if parts[:1] == ["challenge"]:  # the hub proves itself; then we do
                if not proof_ok(step_key_, parts[2], "hub", TAG, c.rank, c.nonce, parts[1]):
                    st["errors"] += 1
                    close(c)
                    return
                send(c, f"proof {proof(step_key_, 'spoke', TAG, c.rank, parts[1], c.nonce)}")
            elif parts[:1] == ["ok"]:  # `ok <heartbeat seconds>`: the interval the hub asks for
                if len(parts) == 2:
                    c.heartbeat = float(parts[1])
                c.joined = True
                c.last_hb = now
                st["ok"] += 1
                st["t_ok_first"] = st["t_ok_first"] or now
                st["t_ok_last"] = now
                beats.append((now + c.heartbeat, c.rank))
            elif parts[:1] == ["end"]:
                if c.silent:  # a dead node hears nothing and says nothing
                    st["silent_ends"] += 1
                    continue
                st["ends"] += 1
                st["t_end_first"] = st["t_end_first"] or now
                st["t_end_last"] = now
                if parts[1:] and parts[1] not in st["end_status"]:
                    st["end_status"].append(parts[1])
                if not c.done:
                    c.done = True
                    send(c, "bye 143")  # as Spoke: its command got SIGTERM
            elif parts == ["ack"]:
                st["acks"] += 1
                st["t_ack_last"] = now
                close(c)  # as Spoke: it returns once acknowledged
                return
            elif parts[:1] == ["error"]:
                st["errors"] += 1
                close(c)
                return

    def on_control(line: str) -> bool:
        nonlocal exit_at, exit_status
        parts = line.split()
        if not parts:
            return True
        cmd = parts[0]
        if cmd == "join":
            for rank in range(a.first, a.first + a.count):
                connect(rank)
        elif cmd == "status":
            out(dict(st, live=len(conns), cpu=sum(os.times()[:2])))
        elif cmd == "kill":  # a SIGKILLed supervisor: the kernel closes its socket
            c = conns[int(parts[1])]
            t0 = time.monotonic()
            close(c)
            out({"t0": t0})
        elif cmd == "silence":  # a dead node: no more heartbeats, the socket stays open
            c = conns[int(parts[1])]
            c.silent = True
            out({"t0": c.last_hb})
        elif cmd == "exit":  # every joined connection says `exit <status>` at monotonic time T
            exit_status, exit_at = int(parts[1]), float(parts[2])
        elif cmd == "quit":
            return False
        return True

    running = True
    while running:
        now = time.monotonic()
        while beats and beats[0][0] <= now:
            _due, rank = beats.popleft()
            c = conns.get(rank)
            if c is None or c.silent or c.done:
                continue
            send(c, "hb")
            st["hb"] += 1
            c.last_hb = now
            beats.append((now + c.heartbeat, rank))
        while retry and retry[0][0] <= now:
            connect(retry.popleft()[1])
        if exit_at is not None and now >= exit_at:
            exit_at = None
            st["t_exit_first"] = time.monotonic()
            for c in list(conns.values()):
                if c.joined and not c.done:
                    c.done = True
                    send(c, f"exit {exit_status}")
                    st["exits"] += 1
            st["t_exit_last"] = time.monotonic()
        deadlines = [now + 1.0]
        if beats:
            deadlines.append(beats[0][0])
        if retry:
            deadlines.append(retry[0][0])
        if exit_at is not None:
            deadlines.append(exit_at)
        for key, _mask in sel.select(max(0.0, min(deadlines) - time.monotonic())):
            if key.data == "ctl":
                try:
                    chunk = os.read(0, 65536)
                except BlockingIOError:
                    continue
                if not chunk:
                    running = False
                    break
                ctl_buf += chunk
                *lines, ctl_buf = ctl_buf.split(b"\n")
                for line in lines:
                    if not on_control(line.decode()):
                        running = False
            elif key.data.connecting:  # (epoll's HUP/ERR also read as EVENT_WRITE: not the mask)
                on_writable(key.data)
            else:
                on_readable(key.data)
    for c in list(conns.values()):
        c.sock.close()
    return 0


# ---------------------------------------------------------------------------------------------
# the driver
# ---------------------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime (fields 14, 15)


class Sim:
    def __init__(self, port: int, first: int, count: int, heartbeat: float):
        self.first, self.count = first, count
        self.proc = subprocess.Popen([sys.executable, __file__, "_sim", "--port", str(port), "--first", str(first),
                                      "--count", str(count), "--heartbeat", str(heartbeat)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)

    def tell(self, line: str) -> None:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def ask(self, line: str) -> dict:
        self.tell(line)
        reply = self.proc.stdout.readline()
        if not reply:
            raise RuntimeError(f"simulator (ranks {self.first}+) exited: {self.proc.poll()}")
        return json.loads(reply)

    def stop(self) -> None:
        try:
            self.tell("quit")
            self.proc.wait(5)
        except (OSError, subprocess.TimeoutExpired, ValueError):
            self.proc.kill()
            self.proc.wait()


class Step:
    """One hub process and its simulators."""

    def __init__(self, size: int, sims: int, absent: float, heartbeat: float, chief_cmd, env=None):
        self.size = size
        self.port = _free_port()
        self.log = tempfile.TemporaryFile(mode="w+")
        self.hub = subprocess.Popen([sys.executable, __file__, "_hub", "--size", str(size), "--port", str(self.port),
                                     "--", *chief_cmd], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=self.log, text=True, bufsize=1, env=env, start_new_session=True)
        spokes = size - 1
        self.absent = int(spokes * absent)
        joining = spokes - self.absent
        self.sims = []
        first, k = 1, max(1, min(sims, joining))
        for i in range(k):
            count = joining // k + (1 if i < joining % k else 0)
            self.sims.append(Sim(self.port, first, count, heartbeat))
            first += count
        self.joining = joining  # ranks 1..joining connect; the rest never do (unreachable)
        self.exit_line = None
        self.statuses()  # every simulator is in its loop: join times exclude its start-up
        if self.hub.stdout.readline().strip() != "ready":
            raise RuntimeError("the hub did not start:\n" + self.hub_log())
        deadline = time.monotonic() + 30
        while True:  # the hub binds inside run(): wait until it listens (one accepted probe)
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or self.hub.poll() is not None:
                    raise RuntimeError("the hub never listened:\n" + self.hub_log())
                time.sleep(0.02)

    def hub_log(self, tail: int = 2000) -> str:
        self.log.seek(0)
        return self.log.read()[-tail:]

    def statuses(self):
        return [s.ask("status") for s in self.sims]

    def wait_for(self, what, timeout: float, every: float = 0.1):
        """Poll the simulators until what(list of statuses) is true; (ok, statuses)."""
        deadline = time.monotonic() + timeout
        while True:
            sts = self.statuses()
            if what(sts):
                return True, sts
            if time.monotonic() > deadline:
                return False, sts
            time.sleep(every)

    def join(self, timeout: float = 120.0) -> dict:
        t_go = time.monotonic()
        for s in self.sims:
            s.tell("join")
        ok, sts = self.wait_for(lambda sts: sum(x["ok"] for x in sts) >= self.joining, timeout)
        joined = sum(x["ok"] for x in sts)
        last = max((x["t_ok_last"] or t_go) for x in sts)
        secs = last - t_go
        return dict(ok=ok, joined=joined, secs=secs, rate=joined / secs if secs > 0 else float("inf"),
                    refused=sum(x["refused"] for x in sts), errors=sum(x["errors"] for x in sts))

    def accepted(self) -> int:
        self.hub.stdin.write("accepted\n")
        self.hub.stdin.flush()
        while True:
            line = self.hub.stdout.readline()
            if not line:
                raise RuntimeError("the hub exited:\n" + self.hub_log())
            if line.startswith("accepted "):
                return int(line.split()[1])
            if line.startswith("exit "):
                self.exit_line = line

    def hub_exit(self, timeout: float):
        """(status, monotonic time of the hub's exit) or None."""
        deadline = time.monotonic() + timeout
        while self.exit_line is None and time.monotonic() < deadline:
            try:
                line = self.hub.stdout.readline()
            except ValueError:
                break
            if not line:
                break
            if line.startswith("exit "):
                self.exit_line = line
        if self.exit_line is None:
            return None
        _, status, at = self.exit_line.split()
        return int(status), float(at)

    def close(self) -> None:
        for s in self.sims:
            s.stop()
        if self.hub.poll() is None:
            try:
                os.killpg(self.hub.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.hub.wait()
        self.log.close()


def _ends(sts) -> tuple:
    firsts = [x["t_end_first"] for x in sts if x["t_end_first"]]
    lasts = [x["t_end_last"] for x in sts if x["t_end_last"]]
    return sum(x["ends"] for x in sts), (min(firsts) if firsts else None), (max(lasts) if lasts else None)


def _hub_exit_thread(step: Step, timeout: float) -> dict:
    box = {}

    def run():
        box["exit"] = step.hub_exit(timeout)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    box["thread"] = t
    return box


def _exit_wait(timing) -> float:
    """How long to wait for the hub's exit after its decision: its end grace (Timing.end_grace)
    for tasks that never settle, its command's SIGTERM-to-SIGKILL grace, and a margin."""
    return 2 * timing.kill_grace + 2.0 + 5.0


def _cpu_after(step: Step, before: float, exited) -> float:
    """The hub's CPU seconds from its decision to its exit (its /proc entry outlives it until reaped:
    nothing here waits for it before step.close())."""
    if exited is None:
        return None
    try:
        return _cpu_seconds(step.hub.pid) - before
    except (OSError, IndexError):
        return None


def bench_size(n: int, args, timing) -> dict:
    fig = dict(size=n)
    hb = timing.heartbeat
    # -- run 1: join, wait, a node goes silent -------------------------------------------------
    step = Step(n, args.sims, args.unreachable, hb, ["sleep", "3600"])
    try:
        fig["absent"] = step.absent
        j = step.join()
        if not j["ok"]:
            raise RuntimeError(f"{n} tasks: only {j['joined']} of {step.joining} joined:\n{step.hub_log()}")
        fig["join"] = j
        time.sleep(min(hb, 1.0))
        sims0 = sum(x["cpu"] for x in step.statuses())
        hb0 = sum(x["hb"] for x in step.statuses())
        acc0, cpu0, t0 = step.accepted(), _cpu_seconds(step.hub.pid), time.monotonic()
        time.sleep(args.wait)
        acc1, cpu1, t1 = step.accepted(), _cpu_seconds(step.hub.pid), time.monotonic()
        sts = step.statuses()
        fig["cpu_pct"] = 100.0 * (cpu1 - cpu0) / (t1 - t0)
        fig["connects_per_s"] = (acc1 - acc0) / (t1 - t0)
        fig["hb_per_s"] = (sum(x["hb"] for x in sts) - hb0) / (t1 - t0)
        fig["us_per_hb"] = 1e6 * (cpu1 - cpu0) / max(1.0, fig["hb_per_s"] * (t1 - t0))
        fig["sims_cpu_pct"] = 100.0 * (sum(x["cpu"] for x in sts) - sims0) / (t1 - t0)
        if any(x["ends"] for x in sts):
            raise RuntimeError(f"{n} tasks: the hub ended the step while waiting:\n{step.hub_log()}")
        victim = step.sims[0]
        last_hb = victim.ask(f"silence {victim.first}")["t0"]
        box = _hub_exit_thread(step, timing.silence + _exit_wait(timing))
        want = step.joining - 1
        ok, sts = step.wait_for(lambda sts: _ends(sts)[0] >= want, timing.silence + 20, every=0.05)
        cpu_decided = _cpu_seconds(step.hub.pid)
        count, first, last = _ends(sts)
        fig["silent"] = dict(ok=ok, told=count, of=want, first=first - last_hb if first else None,
                             all=last - last_hb if last else None,
                             status=sorted({s for x in sts for s in x["end_status"]}))
        box["thread"].join(timing.silence + _exit_wait(timing))
        ex = box.get("exit")
        fig["silent"]["hub_exit"] = (ex[0], ex[1] - last_hb) if ex else None
        fig["silent"]["cpu_after"] = _cpu_after(step, cpu_decided, ex)
    finally:
        step.close()
    # -- run 2: join, one supervisor killed ----------------------------------------------------
    step = Step(n, args.sims, args.unreachable, hb, ["sleep", "3600"])
    try:
        j = step.join()
        if not j["ok"]:
            raise RuntimeError(f"{n} tasks: only {j['joined']} of {step.joining} joined:\n{step.hub_log()}")
        fig["join2"] = j
        time.sleep(args.settle)
        victim = step.sims[-1]
        rank = victim.first + victim.count - 1
        box = _hub_exit_thread(step, _exit_wait(timing))
        t_kill = victim.ask(f"kill {rank}")["t0"]
        want = step.joining - 1
        ok, sts = step.wait_for(lambda sts: _ends(sts)[0] >= want, 30, every=0.05)
        cpu_decided = _cpu_seconds(step.hub.pid)
        count, first, last = _ends(sts)
        fig["killed"] = dict(ok=ok, told=count, of=want, first=first - t_kill if first else None,
                             all=last - t_kill if last else None,
                             status=sorted({s for x in sts for s in x["end_status"]}))
        box["thread"].join(_exit_wait(timing))
        ex = box.get("exit")
        fig["killed"]["hub_exit"] = (ex[0], ex[1] - t_kill) if ex else None
        fig["killed"]["cpu_after"] = _cpu_after(step, cpu_decided, ex)
    finally:
        step.close()
    return fig


def bench_reports(r: int, chief_done: bool, args, timing) -> dict:
    """`r` tasks say `exit 0` at the same instant; the chief's command still running or done."""
    env = dict(os.environ)
    if chief_done:  # the chief's command exits 0 at once; the drain must outlast the bench
        env["TF_SLURM_DRAIN"] = "600"
        cmd = ["true"]
    else:
        cmd = ["sleep", "3600"]
    step = Step(r + 1, args.report_sims, 0.0, timing.heartbeat, cmd, env=env)
    fig = dict(reports=r, chief_done=chief_done)
    try:
        j = step.join()
        if not j["ok"]:
            raise RuntimeError(f"{r} reports: only {j['joined']} of {step.joining} joined:\n{step.hub_log()}")
        fig["join"] = j
        time.sleep(args.settle)
        cpu0 = _cpu_seconds(step.hub.pid)
        at = time.monotonic() + args.settle
        for s in step.sims:
            s.tell(f"exit 0 {at:.6f}")
        box = _hub_exit_thread(step, args.report_timeout + 10)
        gone = []

        def taken(sts) -> bool:  # every ack back, or the hub exited a second ago (the rest are lost)
            if step.hub.poll() is not None:
                gone.append(time.monotonic())
            return sum(x["acks"] for x in sts) >= step.joining or bool(gone and gone[-1] - gone[0] > 1.0)

        ok, sts = step.wait_for(taken, args.report_timeout, every=0.1)
        ok = sum(x["acks"] for x in sts) >= step.joining
        acks = sum(x["acks"] for x in sts)
        last = max((x["t_ack_last"] or 0.0) for x in sts)
        start = min(x["t_exit_first"] or at for x in sts)
        fig.update(ok=ok, acked=acks, of=step.joining, secs=(last - start) if acks else None,
                   send_secs=max((x["t_exit_last"] or start) for x in sts) - start,
                   hub_cpu=_cpu_seconds(step.hub.pid) - cpu0 if step.hub.poll() is None else None)
        if chief_done:
            box["thread"].join(args.report_timeout + 10)
            ex = box.get("exit")
            fig["hub_exit"] = (ex[0], ex[1] - start) if ex else None
        fig["hub_log"] = step.hub_log(1500)
    finally:
        step.close()
    return fig


def _s(x, fmt="{:.2f} s") -> str:
    return "-" if x is None else fmt.format(x)


def _exit_cell(case: dict, wait: float) -> str:
    ex = case["hub_exit"]
    if ex is None:
        return f"not in {wait:.0f}s"
    return f"{ex[1] - case['first']:.1f}s ({ex[0]})" if case["first"] is not None else f"? ({ex[0]})"


def _exit_ok(case: dict) -> bool:
    return case["hub_exit"] is not None and case["first"] is not None and case["hub_exit"][1] - case["first"] <= 10


def report(sizes, reports, timing, args) -> bool:
    met = True
    wait = _exit_wait(timing)
    print()
    print(f"liveness figures (heartbeat {timing.heartbeat:g} s, longer in large steps: the hub asks for "
          f"max(heartbeat, tasks/1000 s) up to silence/3; silence {timing.silence:g} s, "
          f"wait window {args.wait:g} s, {args.unreachable:.0%} of tasks unreachable; "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f})")
    head = f"{'':44}" + "".join(f"{f['size']:>13,}" for f in sizes) + "   target"
    print(head)
    print("-" * len(head))

    def row(label, values, target="", check=None):
        nonlocal met
        cells = "".join(f"{v:>13}" for v in values)
        flag = ""
        if check is not None and not all(check):
            flag, met = "   OVER", False
        print(f"{label:44}{cells}   {target}{flag}")

    row("tasks that never connect (unreachable)", [f"{f['absent']:,}" for f in sizes])
    row("join: all reachable tasks joined in", [_s(f["join"]["secs"]) for f in sizes])
    row("join: connects/s while joining", [f"{f['join']['rate']:,.0f}" for f in sizes])
    row("join: refused/retried connects", [f"{f['join']['refused'] + f['join2']['refused']:,}" for f in sizes])
    row("waiting: heartbeats/s received", [f"{f['hb_per_s']:,.0f}" for f in sizes])
    row("waiting: hub CPU, % of one core", [f"{f['cpu_pct']:.2f}%" for f in sizes], "<= 2% at 4,000",
        [f["cpu_pct"] <= 2.0 for f in sizes if f["size"] <= 4000])
    row("waiting: hub CPU per heartbeat", [f"{f['us_per_hb']:.1f} us" for f in sizes])
    row("waiting: hub connects/s", [f"{f['connects_per_s']:.2f}" for f in sizes], "~0")
    row("(simulators' CPU, % of one core, context)", [f"{f['sims_cpu_pct']:.1f}%" for f in sizes])
    row("killed task: first `end` after", [_s(f["killed"]["first"]) for f in sizes], "<= 5 s",
        [f["killed"]["first"] is not None and f["killed"]["first"] <= 5 for f in sizes])
    row("killed task: every task told after", [_s(f["killed"]["all"]) for f in sizes], "",
        [f["killed"]["ok"] for f in sizes])
    row("killed task: tasks told / status", [f"{f['killed']['told']}/{','.join(f['killed']['status'])}"
                                            for f in sizes])
    row("killed task: chief's task ended after (status)", [_exit_cell(f["killed"], wait) for f in sizes],
        "<= 10 s", [_exit_ok(f["killed"]) for f in sizes])
    row("killed task: hub CPU from decision to exit", [_s(f["killed"].get("cpu_after")) for f in sizes])
    row("dead node: first `end` after last heartbeat", [_s(f["silent"]["first"]) for f in sizes], "<= 15 s",
        [f["silent"]["first"] is not None and f["silent"]["first"] <= 15 for f in sizes])
    row("dead node: every task told after", [_s(f["silent"]["all"]) for f in sizes], "",
        [f["silent"]["ok"] for f in sizes])
    row("dead node: chief's task ended after (status)", [_exit_cell(f["silent"], wait) for f in sizes],
        "<= 10 s", [_exit_ok(f["silent"]) for f in sizes])
    row("dead node: hub CPU from decision to exit", [_s(f["silent"].get("cpu_after")) for f in sizes])
    for rep in reports:
        what = "chief done first (draining)" if rep["chief_done"] else "chief still running"
        print()
        print(f"{rep['reports']:,} simultaneous done reports ({what}):")
        print(f"  all joined in {rep['join']['secs']:.2f} s ({rep['join']['rate']:,.0f} connects/s, "
              f"{rep['join']['refused']} refused/retried)")
        print(f"  reports sent within {rep['send_secs']:.3f} s of the agreed instant")
        ok = rep["ok"] and rep["secs"] is not None and rep["secs"] <= 5.0
        met = met and ok
        print(f"  all taken (every `ack` back) in {_s(rep['secs'])} ({rep['acked']:,} of {rep['of']:,})"
              f"   target <= 5 s{'' if ok else '   OVER'}")
        if rep.get("hub_cpu") is not None:
            print(f"  hub CPU during the burst: {rep['hub_cpu']:.2f} s")
        if rep["acked"] < rep["of"]:
            print(f"  {rep['of'] - rep['acked']:,} acks never arrived (the hub took those reports, see its exit; "
                  "connections aborted under it: TCP keepalive / TCP_USER_TIMEOUT)")
        if rep["chief_done"]:
            ex = rep.get("hub_exit")
            print(f"  hub exited {ex[1]:.2f} s after the burst (status {ex[0]})" if ex else
                  "  hub had not exited")
    print()
    return met


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="100,1000,4000", help="tasks per step (comma-separated)")
    p.add_argument("--reports", type=int, default=16000, help="simultaneous done reports (0: skip)")
    p.add_argument("--wait", type=float, default=10.0, help="seconds of waiting measured")
    p.add_argument("--unreachable", type=float, default=0.05, help="fraction of tasks that never connect")
    p.add_argument("--sims", type=int, default=4, help="simulator processes")
    p.add_argument("--report-sims", type=int, default=8, help="simulator processes for the reports")
    p.add_argument("--report-timeout", type=float, default=30.0, help="give up on the reports after this")
    p.add_argument("--settle", type=float, default=0.5,
                   help="seconds of heartbeats after a join before the next event, and how far ahead the reports' "
                        "agreed instant lies (the tests' tiny run: less)")
    p.add_argument("--chief-done", choices=("both", "no", "yes"), default="both",
                   help="reports while the chief runs, after it is done, or both")
    p.add_argument("--strict", action="store_true", help="exit 1 when a figure misses its target")
    p.add_argument("--json", help="also write the figures to this file")
    args = p.parse_args(argv)
    if not os.environ.get("TF_SLURM_SECRET"):  # the hub and the simulated spokes derive one key from it
        os.environ["TF_SLURM_SECRET"] = os.urandom(32).hex()
    _raise_nofile()
    timing = _timing_env()
    sizes = [int(x) for x in args.sizes.split(",") if x.strip()]
    started = time.monotonic()
    figs = []
    for n in sizes:
        if n < 3:
            p.error("--sizes: each at least 3 (a chief and two others)")
        print(f"{n:,} tasks ...", flush=True)
        figs.append(bench_size(n, args, timing))
    reps = []
    if args.reports:
        for done in {"both": (False, True), "no": (False,), "yes": (True,)}[args.chief_done]:
            print(f"{args.reports:,} done reports (chief {'done' if done else 'running'}) ...", flush=True)
            reps.append(bench_reports(args.reports, done, args, timing))
    met = report(figs, reps, timing, args)
    print(f"bench time {time.monotonic() - started:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(dict(sizes=figs, reports=reps), indent=1, default=str))
    return 1 if (args.strict and not met) else 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_hub":
        sys.exit(hub_main(sys.argv[2:]))
    if len(sys.argv) > 1 and sys.argv[1] == "_sim":
        sys.exit(sim_main(sys.argv[2:]))
    sys.exit(main())
