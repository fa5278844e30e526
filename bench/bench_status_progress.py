"""What training progress costs the hub: N tasks each reporting `progress <json>` once in 2 s (the
spoke's rate, spoke.REPORT_EVERY), against the same step without progress (issue: "status with 128
tasks reporting: hub CPU at most 2% of a core").

    .venv/bin/python bench/bench_status_progress.py [--sizes 128,1024] [--window 30] [--quick]

The REAL hub (tf_for_slurm.supervise.hub.Hub) runs in its own process for a localhost plan (chief +
N-1 workers, strategy tf1: asynchronous, so the slow-worker rule runs at every status write too; the
chief's command a long `sleep`), writing the step's status.json as under `tf-slurm exec`.  The N-1
other tasks' supervisors are simulated by `--sims` processes (each one selectors loop over raw TCP
connections) that speak the wire words as `Spoke` does (docs/INTERFACES.md): `hello <rank> local.0
<nonce>`, the hub's `challenge` checked and answered with `proof` (the step's key from
TF_SLURM_SECRET, set here), `hb` at the interval the hub's `ok` asks for, and, with progress on,
`progress {"v":1,"step":S,"t":T,"kind":"tf1","loss":L,"target":X}` at the spoke's rate per task, its
step advancing 10 a second (so every task has a track and the hang rule's look in the hub judges all
of them; no task is ever hung), each task's report at its own phase.

Three hub runs per size, the same heartbeats in each:
  off   no progress lines (the baseline: status.json rewritten every 5 s, no tracks, no hang look);
  cold  progress lines from the join on (the tracks hold only this run's `--window` seconds);
  warm  progress lines, and the hub starts from a status.json whose `progress` holds 240 s of history
        per task (as a requeued or relaunched step's hub does, ProgressBoard.from_file): the steady
        state of a long training (120 s of recent samples per track for the hang rule's median step
        time, 120-240 history points per task in status.json up to 256 tasks).
For each: the hub's CPU (utime+stime from /proc/<pid>/stat) over `--window` seconds of wall time after
every task joined (and, with progress, a few seconds after the first reports), as % of one core; the
status file's size at the end; the median wall time of `tf-slurm status <folder> --json` on it (a fresh
Python each time: no Slurm here, so it says so and reads the job folder), and of `python -c pass` for
the interpreter's own start.  Then, in this process, what one second of the progress work costs per
part (reports read, hang look, the status file's progress part and its write).  Target: with
progress, <= 2% of a core at 128 tasks.

Measured on this repository's 2-core machine (nothing else running, defaults, 3.5 min): hub CPU
without / with progress (cold) / with progress (warm): 128 tasks 0.13% / 1.70% / 2.23% (status.json
376 KiB warm, `tf-slurm status --json` 150-170 ms); 1024 tasks 0.50% / 7.33% / 7.80%.  The first
version (a report a second, the status file rewritten each second a report came, the hang look each
second) measured 0.13% / 3.60% / 5.00% and 0.43% / 12.07% / 14.30%.  Of the 128-task warm cost, the
parts measured in-process are 0.58%; the rest is the hub's handling of each progress line.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import selectors
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TAG = "local.0"  # localhost_plan's job.step
TICK = os.sysconf("SC_CLK_TCK")
STEPS_PER_SECOND = 10
TARGET = 10 ** 6


def _key() -> bytes:
    sys.path.insert(0, str(ROOT))
    from tf_for_slurm.host.step_secret import step_key

    return step_key(os.environ, TAG)


# ---------------------------------------------------------------------------------------------
# the hub process: the real Hub for a localhost plan, writing the status file
# ---------------------------------------------------------------------------------------------
def hub_main(argv) -> int:
    p = argparse.ArgumentParser(prog="bench_status_progress.py _hub")
    p.add_argument("--size", type=int, required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--status", required=True)
    p.add_argument("--strategy", default="tf1")
    p.add_argument("cmd", nargs="+")
    a = p.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    import dataclasses
    import logging

    from tf_for_slurm.plan import localhost_plan
    from tf_for_slurm.plan.strategy import step_roles
    from tf_for_slurm.supervise.hub import Hub
    from tf_for_slurm.supervise.wire import Timing

    logging.basicConfig(level=logging.WARNING, format="hub %(levelname)s %(message)s")
    plan = localhost_plan(["chief"] + ["worker"] * (a.size - 1), [1] * a.size, my_rank=0)
    plan = dataclasses.replace(plan, tasks=(plan.tasks[0]._replace(aux_port=a.port),) + plan.tasks[1:])
    hub = Hub(plan, step_roles(plan.tasks, a.strategy), a.cmd, dict(os.environ), Timing.from_env(os.environ),
              status_file=a.status, key=_key())
    print("ready", flush=True)
    return hub.run()


# ---------------------------------------------------------------------------------------------
# a simulator process: many spokes' connections in one selectors loop
# ---------------------------------------------------------------------------------------------
def sim_main(argv) -> int:
    p = argparse.ArgumentParser(prog="bench_status_progress.py _sim")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--first", type=int, required=True)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--progress", type=int, default=1)
    p.add_argument("--step0", type=int, default=0)
    a = p.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from tf_for_slurm.supervise.handshake import new_nonce, proof, proof_ok
    from tf_for_slurm.supervise.spoke import REPORT_EVERY  # the real spoke's rate

    key = _key()
    sel = selectors.DefaultSelector()
    os.set_blocking(0, False)
    sel.register(0, selectors.EVENT_READ, None)
    conns = {}  # rank -> [sock, inbuf, nonce, joined, heartbeat]
    due = []  # (when, rank, what) kept sorted by a heap
    st = dict(ok=0, hb=0, progress=0, errors=0, ends=0)
    t_start = time.time()

    def send(rank: int, text: str) -> None:
        try:
            conns[rank][0].send(text.encode() + b"\n")
        except OSError:
            st["errors"] += 1

    for rank in range(a.first, a.first + a.count):
        s = socket.create_connection(("127.0.0.1", a.port))
        s.setblocking(False)
        nonce = new_nonce()
        conns[rank] = [s, b"", nonce, False, 2.0]
        sel.register(s, selectors.EVENT_READ, rank)
        send(rank, f"hello {rank} {TAG} {nonce}")
    running = True
    while running:
        now = time.monotonic()
        while due and due[0][0] <= now:
            when, rank, what = heapq.heappop(due)
            if rank not in conns:
                continue
            if what == "hb":
                send(rank, "hb")
                st["hb"] += 1
                heapq.heappush(due, (when + conns[rank][4], rank, "hb"))
            else:
                wall = time.time()
                step = a.step0 + int((wall - t_start) * STEPS_PER_SECOND)
                line = json.dumps({"v": 1, "step": step, "t": round(wall, 3), "kind": "tf1",
                                   "loss": round(1.0 / (1 + step), 6), "target": TARGET}, separators=(",", ":"))
                send(rank, "progress " + line)
                st["progress"] += 1
                heapq.heappush(due, (when + REPORT_EVERY, rank, "progress"))
        timeout = max(0.0, (due[0][0] if due else now + 1.0) - time.monotonic())
        for k, _mask in sel.select(min(timeout, 1.0)):
            if k.data is None:
                try:
                    chunk = os.read(0, 4096)
                except BlockingIOError:
                    continue
                if not chunk or b"quit" in chunk:
                    running = False
                    break
                os.write(1, (json.dumps(st) + "\n").encode())
                continue
            rank = k.data
            c = conns.get(rank)
            if c is None:
                continue
            try:
                data = c[0].recv(4096)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                data = b""
            if not data:
                sel.unregister(c[0])
                c[0].close()
                del conns[rank]
                continue
            *lines, c[1] = (c[1] + data).split(b"\n")
            for raw in lines:
                parts = raw.decode().split()
                if parts[:1] == ["challenge"]:
                    if not proof_ok(key, parts[2], "hub", TAG, rank, c[2], parts[1]):
                        st["errors"] += 1
                        continue
                    send(rank, f"proof {proof(key, 'spoke', TAG, rank, parts[1], c[2])}")
                elif parts[:1] == ["ok"]:
                    c[3], c[4] = True, float(parts[1]) if len(parts) == 2 else 2.0
                    st["ok"] += 1
                    now = time.monotonic()
                    heapq.heappush(due, (now + c[4], rank, "hb"))
                    if a.progress:  # each task at its own phase within the second
                        heapq.heappush(due, (now + (rank * 0.6180339) % REPORT_EVERY, rank, "progress"))
                elif parts[:1] == ["end"]:
                    st["ends"] += 1
    for c in conns.values():
        c[0].close()
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


def _seed(path: str, size: int, now: float) -> int:
    """A status.json an earlier run of the job left: 240 s of progress per task (rank 1..size-1);
    the step the simulated tasks go on from."""
    sys.path.insert(0, str(ROOT))
    from tf_for_slurm.host.job_folder import write_json
    from tf_for_slurm.plan.train_progress import MAX_HISTORY

    span = MAX_HISTORY  # one point a second
    step0 = span * STEPS_PER_SECOND
    hist = [[round(now - span + i, 3), i * STEPS_PER_SECOND] for i in range(span)]
    last = hist[-1]
    one = {"step": last[1], "rate": float(STEPS_PER_SECOND), "loss": 0.01, "last_step_at": last[0],
           "last_progress_at": last[0], "reported_at": last[0], "target": TARGET, "kind": "tf1", "epoch": None,
           "history": hist}
    write_json(path, {"progress": {str(r): one for r in range(1, size)}})
    return step0


def _ask(proc: subprocess.Popen) -> dict:
    proc.stdin.write("status\n")
    proc.stdin.flush()
    return json.loads(proc.stdout.readline())


def run_hub(size: int, mode: str, args) -> dict:
    work = tempfile.mkdtemp(prefix="bench_status_progress.")
    folder = os.path.join(work, "job")
    os.makedirs(folder, mode=0o700)
    status = os.path.join(folder, "status.json")
    step0 = _seed(status, size, time.time()) if mode == "warm" else 0
    port = _free_port()
    log = tempfile.TemporaryFile(mode="w+")
    hub = subprocess.Popen([sys.executable, __file__, "_hub", "--size", str(size), "--port", str(port),
                            "--status", status, "--", "sleep", "3600"], stdout=subprocess.PIPE, stderr=log,
                           text=True, start_new_session=True)
    sims = []
    try:
        if hub.stdout.readline().strip() != "ready":
            log.seek(0)
            raise RuntimeError("the hub did not start:\n" + log.read()[-2000:])
        deadline = time.monotonic() + 30
        while True:  # the hub binds inside run()
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError as exc:
                if time.monotonic() > deadline or hub.poll() is not None:
                    raise RuntimeError("the hub never listened") from exc
                time.sleep(0.02)
        spokes = size - 1
        k = max(1, min(args.sims, spokes))
        first = 1
        for i in range(k):
            count = spokes // k + (1 if i < spokes % k else 0)
            sims.append(subprocess.Popen([sys.executable, __file__, "_sim", "--port", str(port), "--first", str(first),
                                          "--count", str(count), "--progress", "0" if mode == "off" else "1",
                                          "--step0", str(step0)],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1))
            first += count
        deadline = time.monotonic() + 60
        while sum(_ask(s)["ok"] for s in sims) < spokes:
            if time.monotonic() > deadline:
                raise RuntimeError(f"only some of {spokes} tasks joined")
            time.sleep(0.1)
        time.sleep(args.settle)  # the first reports in, the status file's first writes made
        sims0 = [_ask(s) for s in sims]
        cpu0, t0 = _cpu_seconds(hub.pid), time.monotonic()
        time.sleep(args.window)
        cpu1, t1 = _cpu_seconds(hub.pid), time.monotonic()
        sims1 = [_ask(s) for s in sims]
        if hub.poll() is not None or any(x["ends"] for x in sims1):
            log.seek(0)
            raise RuntimeError(f"the hub ended the step during the window:\n{log.read()[-2000:]}")
        reports = sum(x["progress"] for x in sims1) - sum(x["progress"] for x in sims0)
        saved = json.loads(Path(status).read_text())
        tracks = saved.get("progress") or {}
        points = [len(t.get("history") or []) for t in tracks.values()]
        reads = []
        for _ in range(args.reads):
            r0 = time.perf_counter()
            out = subprocess.run([sys.executable, "-m", "tf_for_slurm", "status", folder, "--json"], cwd=ROOT,
                                 capture_output=True, text=True)
            reads.append(time.perf_counter() - r0)
        try:
            json.loads(out.stdout)
            read_ok = True
        except ValueError:
            read_ok = False
        log.seek(0)
        errors = [line for line in log.read().splitlines() if "ERROR" in line]
        return dict(size=size, mode=mode, cpu_pct=100.0 * (cpu1 - cpu0) / (t1 - t0), reports_per_s=reports / (t1 - t0),
                    kib=os.path.getsize(status) / 1024, tracks=len(tracks),
                    history=statistics.median(points) if points else 0, read_ms=1000 * statistics.median(reads),
                    read_ok=read_ok, errors=errors)
    finally:
        for s in sims:
            try:
                s.stdin.write("quit\n")
                s.stdin.flush()
                s.wait(5)
            except (OSError, ValueError, subprocess.TimeoutExpired):
                s.kill()
                s.wait()
        if hub.poll() is None:
            os.killpg(hub.pid, signal.SIGKILL)
        hub.wait()
        log.close()


def breakdown(size: int, warm: bool, repeat: int = 5) -> dict:
    """In this process: what one second of the hub's progress work costs at `size` tasks (CPU ms):
    the reports read (ProgressBoard.hear), the hang rule's look (train_progress.hung, every track's
    median step time new), the status file's `progress` part (ProgressBoard.to_json, slow-worker rule
    included) and the write of that part (job_folder.write_json)."""
    sys.path.insert(0, str(ROOT))
    from tf_for_slurm.host.job_folder import write_json
    from tf_for_slurm.plan.train_progress import Report, hung
    from tf_for_slurm.supervise.progress_board import ProgressBoard

    board = ProgressBoard(asynchronous=True)
    secs = 240 if warm else 30
    now = time.time() - secs
    for s in range(secs):
        for r in range(1, size):
            t = now + s + (r * 0.6180339) % 1.0
            board.add(r, Report(step=s * STEPS_PER_SECOND, t=t, kind="tf1", loss=0.1, target=TARGET), t)
    clock = {"step": secs * STEPS_PER_SECOND, "t": now + secs}

    def reports() -> None:
        clock["step"] += STEPS_PER_SECOND
        clock["t"] += 1.0
        for r in range(1, size):
            board._read_at.pop(r, None)  # noqa: SLF001 (a second has passed for each)
            board.hear(r, json.dumps({"v": 1, "step": clock["step"], "t": round(clock["t"], 3), "kind": "tf1",
                                      "loss": 0.1, "target": TARGET}, separators=(",", ":")), clock["t"])

    def look() -> None:
        hung(board.tracks, clock["t"], floor=60.0, factor=10.0, running=list(board.tracks))

    folder = tempfile.mkdtemp(prefix="bench_status_progress.")
    out = {}
    for name, fn in (("reports", reports), ("hang look", look), ("to_json", lambda: board.to_json(clock["t"]))):
        c0 = time.process_time()
        for _ in range(repeat):
            fn()
        out[name] = 1000 * (time.process_time() - c0) / repeat
    part = {"progress": board.to_json(clock["t"])}
    c0 = time.process_time()
    for _ in range(repeat):
        write_json(os.path.join(folder, "s.json"), part)
    out["write"] = 1000 * (time.process_time() - c0) / repeat
    return out


def python_start_ms(reads: int) -> float:
    times = []
    for _ in range(reads):
        r0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        times.append(time.perf_counter() - r0)
    return 1000 * statistics.median(times)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="128,1024", help="tasks per step (default 128,1024)")
    p.add_argument("--window", type=float, default=30.0, help="seconds of hub CPU measured per run (default 30)")
    p.add_argument("--settle", type=float, default=3.0, help="seconds after the join before the window (default 3)")
    p.add_argument("--modes", default="off,cold,warm", help="which runs (default off,cold,warm)")
    p.add_argument("--sims", type=int, default=2, help="simulator processes (default 2)")
    p.add_argument("--reads", type=int, default=5, help="`tf-slurm status --json` runs timed (default 5)")
    p.add_argument("--quick", action="store_true", help="10 s windows, 3 status reads")
    a = p.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from tf_for_slurm.supervise.hang_watch import LOOK_EVERY
    from tf_for_slurm.supervise.spoke import REPORT_EVERY
    from tf_for_slurm.supervise.status_file import REFRESH

    if a.quick:
        a.window, a.reads, a.settle = 10.0, 3, 2.0
    if not os.environ.get("TF_SLURM_SECRET"):  # the hub and the simulated spokes derive one key from it
        os.environ["TF_SLURM_SECRET"] = os.urandom(32).hex()
    modes = a.modes.split(",")
    rows = {}
    for size in (int(s) for s in a.sizes.split(",")):
        for mode in modes:
            r = rows[(size, mode)] = run_hub(size, mode, a)
            print(f"  {size} tasks, {mode}: hub {r['cpu_pct']:.2f}% of a core, {r['reports_per_s']:.0f} reports/s, "
                  f"status.json {r['kib']:.0f} KiB ({r['tracks']} tracks, {r['history']:.0f} history points each), "
                  f"status --json {r['read_ms']:.0f} ms{'' if r['read_ok'] else ' (NOT JSON)'}"
                  + (f"; hub errors: {r['errors'][:2]}" if r["errors"] else ""), flush=True)
    bare = python_start_ms(a.reads)
    parts = {(size, warm): breakdown(size, warm) for size in sorted({s for s, _ in rows}) for warm in (False, True)}
    print()
    print(f"hub CPU, % of one core, over {a.window:g} s windows ({os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f}); each task: a progress report every {REPORT_EVERY:g} s (on), heartbeats in "
          "every run")
    on_modes = [m for m in modes if m != "off"]
    head = f"{'tasks':>6} {'without %':>10}" + "".join(f" {'with (' + m + ') %':>15} {'diff':>7}" for m in on_modes) \
        + f" {'status KiB':>11} {'status read ms':>15}"
    print(head)
    print("-" * len(head))
    met = True
    for size in sorted({s for s, _ in rows}):
        off = rows.get((size, "off"))
        line = f"{size:>6} {off['cpu_pct'] if off else float('nan'):>9.2f}%"
        for m in on_modes:
            r = rows[(size, m)]
            line += f" {r['cpu_pct']:>14.2f}% {r['cpu_pct'] - (off['cpu_pct'] if off else 0):>+6.2f}"
            if size == 128 and r["cpu_pct"] > 2.0:
                met = False
        last = rows[(size, on_modes[-1] if on_modes else "off")]
        line += f" {last['kib']:>11.0f} {last['read_ms']:>15.0f}"
        print(line)
    print(f"(status read: `tf-slurm status <folder> --json`, a fresh Python each time, on the "
          f"{on_modes[-1] if on_modes else 'off'} run's status.json; `python -c pass` alone: {bare:.0f} ms)")
    print()
    print("where a second of progress goes, in-process CPU ms (each part at the hub's own rate; cold: 30 s of "
          "tracks, warm: 240 s)")
    print(f"{'tasks':>6} {'tracks':>6} {'reports read':>13} {'hang look':>10} {'progress to_json':>17} "
          f"{'its write':>10} {'sum = % core':>13}")
    look_every = min(max(60.0 / 12, LOOK_EVERY[0]), LOOK_EVERY[1])  # at the default floor, 60 s
    for (size, warm), ms in parts.items():
        per_s = {"reports": ms["reports"] / REPORT_EVERY, "hang look": ms["hang look"] / look_every,
                 "to_json": ms["to_json"] / REFRESH, "write": ms["write"] / REFRESH}
        print(f"{size:>6} {'warm' if warm else 'cold':>6} {per_s['reports']:>13.2f} {per_s['hang look']:>10.2f} "
              f"{per_s['to_json']:>17.2f} {per_s['write']:>10.2f} {sum(per_s.values()) / 10:>12.2f}%")
    print(f"(each task's report read once in {REPORT_EVERY:g} s, the hang look every {look_every:g} s, the status "
          f"file's progress written every {REFRESH:g} s; snapshot of the task rows not included)")
    if any(s == 128 for s, _ in rows) and on_modes:
        print(f"target: with progress, <= 2% of a core at 128 tasks: {'met' if met else 'MISSED'}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_hub":
        sys.exit(hub_main(sys.argv[2:]))
    if len(sys.argv) > 1 and sys.argv[1] == "_sim":
        sys.exit(sim_main(sys.argv[2:]))
    sys.exit(main())
