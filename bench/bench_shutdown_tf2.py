"""How fast do TF2 ParameterServerStrategy servers exit after the coordinator ends, or dies?

Starts a real local job (chief + ps + workers, one process each on 127.0.0.1) with
tests/tf2_tasks/pss_task.py and measures, for each ps/worker process:

* end:  from the moment the coordinator's train_fn returned (shutdown_cluster starts) to the
        moment the server process is seen to have exited (polled every 5 ms);
* kill: from the coordinator's SIGKILL to the server process's exit (expected about
        poll + liveness_timeout + up to one more poll: it must wait to be sure the coordinator is gone).

Each is measured twice: with the interpreter's normal teardown (TensorFlow's takes seconds) and
with `tf2.exit_now` (flush logs, os._exit). For the end case the moment `serve_until_done`
returned (the library's own latency) is reported too.

`run() -> dict` returns the figures (seconds); `python bench/bench_shutdown_tf2.py` prints them.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "tf2_tasks"))
import tf2_cluster  # noqa: E402


def _summary(values: list) -> dict:
    if not values:
        return {"n": 0}
    return {"n": len(values), "min": round(min(values), 4), "median": round(statistics.median(values), 4),
            "max": round(max(values), 4)}


def _exit_flag(fast: bool) -> tuple:
    return ("--fast-exit",) if fast else ()


def _end_once(roles: list, steps: int, fast: bool) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench_tf2_end_") as out:
        job = tf2_cluster.start("pss_task.py", roles, out, ("--steps", str(steps)) + _exit_flag(fast))
        try:
            job.wait(timeout=180)
        finally:
            job.kill_all()
        bad = [(p.name, p.returncode) for p in job.procs if p.returncode != 0 or p.killed_at_deadline]
        if bad:
            raise RuntimeError(f"end run failed: {bad}\n" + job.procs[0].log()[-2000:])
        with open(os.path.join(out, "chief.json")) as f:
            end_time = json.load(f)["end_time"]
        servers, returned = {}, {}
        for p in job.procs[1:]:
            servers[p.name] = p.exit_time - end_time
            with open(os.path.join(out, f"{p.name}.exit")) as f:
                returned[p.name] = json.load(f)["time"] - end_time
        return {"servers": servers, "returned": returned,
                "coordinator": job.by_name("chief0").exit_time - end_time}


def _kill_once(roles: list, liveness_timeout: float, poll: float, fast: bool) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench_tf2_kill_") as out:
        job = tf2_cluster.start("pss_task.py", roles, out,
                                ("--steps", "3", "--mode", "hang", "--liveness-timeout", str(liveness_timeout),
                                 "--poll", str(poll)) + _exit_flag(fast))
        try:
            if not tf2_cluster.wait_for_file(os.path.join(out, "ready"), timeout=180, job=job):
                raise RuntimeError("coordinator never became ready\n" + job.procs[0].log()[-2000:])
            killed_at = time.time()
            job.by_name("chief0").popen.send_signal(signal.SIGKILL)
            names = [p.name for p in job.procs if not p.name.startswith("chief")]
            job.wait(timeout=60, names=names)
        finally:
            job.kill_all()
        servers = {}
        for p in job.procs[1:]:
            if p.killed_at_deadline:
                raise RuntimeError(f"{p.name} did not exit within 60 s of the coordinator's kill")
            servers[p.name] = {"latency": p.exit_time - killed_at, "status": p.returncode}
        return servers


def run(repeats: int = 2, workers: int = 1, steps: int = 10, liveness_timeout: float = 3.0,
        poll: float = 1.0) -> dict:
    """Measure server exit latency after the coordinator's end and after its SIGKILL (seconds)."""
    roles = ["chief", "ps"] + ["worker"] * workers
    figures: dict = {"cluster": ",".join(roles), "repeats": repeats, "liveness_timeout_s": liveness_timeout,
                     "poll_s": poll}
    kill_status: set = set()
    for fast in (False, True):
        mode = "exit_now" if fast else "normal_teardown"
        returned, end_lat, coord_exit, kill_lat = [], [], [], []
        for _ in range(repeats):
            end = _end_once(roles, steps, fast)
            returned.extend(end["returned"].values())
            end_lat.extend(end["servers"].values())
            coord_exit.append(end["coordinator"])
            for server in _kill_once(roles, liveness_timeout, poll, fast).values():
                kill_lat.append(server["latency"])
                kill_status.add(server["status"])
        figures[mode] = {
            "serve_until_done_returned_after_coordinator_end_s": _summary(returned),
            "server_process_exit_after_coordinator_end_s": _summary(end_lat),
            "coordinator_process_exit_after_train_end_s": _summary(coord_exit),
            "server_process_exit_after_coordinator_kill_s": _summary(kill_lat),
        }
    figures["server_status_after_kill"] = sorted(kill_status)
    return figures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--liveness-timeout", type=float, default=3.0)
    ap.add_argument("--poll", type=float, default=1.0)
    args = ap.parse_args()
    figures = run(repeats=args.repeats, workers=args.workers, liveness_timeout=args.liveness_timeout,
                  poll=args.poll)
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
