"""Shutdown figures for the TF1 runtime (localhost cluster, 1 ps + 2 workers).

    .venv/bin/python bench/bench_shutdown.py [--runs 3]

Prints (median, min, max over the runs):
- ps exit latency: the ps process's exit, as seen by this script, minus the moment the last
  worker's report had completed (its launch() returned).  Target <= 1 s.
- killed-worker detection: the ps process's exit minus the SIGKILL of a training worker.
  Target <= 5 s (liveness_timeout=5).
- under `tf-slurm exec` (via `tf-slurm local`, unmodified scripts of tests/unmodified/), for each
  strategy: the step's end minus the exit of the last training task's command (the chief's, for
  ParameterServerStrategy).  Target <= 2 s where no drain is needed.
- a tf4slurm-era task (tests/tf4slurm_tasks, the ps ended by its own dequeue loop) under `tf-slurm
  local --slurm-env-only`: the ps's exit minus the last worker's, as tests/tf4slurm_tasks/timed.sh
  records them (the figure tests/faces/test_tf4slurm_runs.py prints; a loaded 2-core CI machine
  once took 1.14 s).  Target <= 1 s.
Figures, not pass/fail.  If bench/bench_shutdown_tf2.py exists, its `main()` runs afterwards
(with its default arguments; `--no-tf2` skips it).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TASK = ROOT / "tests" / "tf1_tasks" / "train_task.py"
ENV = {**os.environ, "GRPC_POLL_STRATEGY": "poll", "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(ROOT)}
ROLES = ["ps", "worker", "worker"]


def free_ports(n: int) -> list:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def start(tmp: Path, mode: str, steps: int) -> tuple:
    ports = free_ports(len(ROLES))
    events = tmp / f"events-{time.time_ns()}.jsonl"
    procs = [subprocess.Popen([sys.executable, str(TASK), "--roles", ",".join(ROLES), "--ports",
                               ",".join(map(str, ports)), "--rank", str(r), "--events", str(events),
                               "--mode", mode, "--steps", str(steps), "--liveness", "5"],
                              env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for r in range(len(ROLES))]
    return procs, events


def read_events(path: Path) -> list:
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def wait_exit(proc: subprocess.Popen, deadline_s: float) -> float:
    end = time.time() + deadline_s
    while time.time() < end:
        if proc.poll() is not None:
            return time.time()
        time.sleep(0.01)
    raise TimeoutError("process did not exit")


def cleanup(procs: list) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait(timeout=30)


def one_clean_run(tmp: Path) -> float:
    procs, events = start(tmp, "async", 100)
    try:
        t_ps = wait_exit(procs[0], 300)
        for p in procs[1:]:
            wait_exit(p, 120)
        ev = read_events(events)
        last_report = max(e["t"] for e in ev if e["event"] == "exit" and e["role"] != "ps")
        if any(p.returncode != 0 for p in procs):
            raise RuntimeError(f"a task failed: {[p.returncode for p in procs]}")
        return t_ps - last_report
    finally:
        cleanup(procs)


def one_kill_run(tmp: Path) -> float:
    procs, events = start(tmp, "async", 10**8)
    try:
        end = time.time() + 300
        while not any(e["rank"] == 2 and e["event"] == "training" for e in read_events(events)):
            if time.time() > end or procs[0].poll() is not None:
                raise RuntimeError("worker never started training")
            time.sleep(0.05)
        procs[2].send_signal(signal.SIGKILL)
        t_kill = time.time()
        t_ps = wait_exit(procs[0], 60)
        if procs[0].returncode == 0:
            raise RuntimeError("ps exited 0 after a worker was killed")
        return t_ps - t_kill
    finally:
        cleanup(procs)


# strategy -> (roles, unmodified script and its arguments, ranks that train: the chief and the others)
EXEC_CASES = {
    "tf1": ("ps,worker,worker", ["tf1_ps_worker.py", "--steps", "300"], (1, 2)),
    "pss": ("chief,ps,worker,worker", ["tf2_pss_fit.py"], (0,)),
    "mwms": ("worker,worker", ["tf2_mwms_fit.py"], (0, 1)),
}


def one_exec_run(tmp: Path, strategy: str) -> float:
    """`tf-slurm local` of an unmodified script: the step's end (the launcher's exit) minus the
    moment the last training task's command exited (each stamped by a shell wrapper right after the
    script's process ends).  (A TF1 non-chief that started before the chief initialised waits
    TensorFlow's own recovery_wait_secs, 30 s, before it trains: that is the script's time, not ours.)"""
    roles, args, trainers = EXEC_CASES[strategy]
    stamp = tmp / f"exit-{time.time_ns()}"
    wrapper = f'"$@"; s=$?; date +%s.%N > {stamp}.$SLURM_PROCID; exit $s'
    argv = [sys.executable, "-m", "tf_for_slurm", "local", "-n", str(roles.count(",") + 1), "--tasks", roles, "--",
            "sh", "-c", wrapper, "sh", sys.executable, str(ROOT / "tests" / "unmodified" / args[0]), *args[1:]]
    env = {k: v for k, v in ENV.items() if k not in ("TF_CONFIG", "TF_USE_LEGACY_KERAS", "GRPC_POLL_STRATEGY")}
    proc = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=300)
    ended = time.time()
    if proc.returncode != 0:
        raise RuntimeError(f"{strategy}: the step failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return ended - max(float(Path(f"{stamp}.{rank}").read_text()) for rank in trainers)


ORIGINAL = ["-ps", "1", "-workers", "2", "-Iterations", "40", "-batch_size", "16",
            "--train_module", "SmallModel_DistributedTRAIN"]


def one_original_run(tmp: Path) -> float:
    """The ps's exit minus the last worker's, each stamped by timed.sh as its task's command ended."""
    tasks = ROOT / "tests" / "tf4slurm_tasks"
    times = tmp / f"times-{time.time_ns()}"
    argv = [sys.executable, "-m", "tf_for_slurm", "local", "-n", "3", "--slurm-env-only", "--",
            "bash", str(tasks / "timed.sh"), sys.executable, str(tasks / "LaunchTFServerWithHooks.py"), *ORIGINAL,
            "--model_dir", str(tmp / f"model-{time.time_ns()}")]
    env = {k: v for k, v in ENV.items() if not k.startswith(("SLURM_", "TF_SLURM_", "TF_CONFIG"))}
    env["TASK_TIMES"] = str(times)
    proc = subprocess.run(argv, env=env, cwd=str(tmp), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"tf4slurm-era task: the step failed ({proc.returncode}): {proc.stderr[-2000:]}")
    ended = {int(p): float(t) for p, _, t in (line.split() for line in times.read_text().splitlines())}
    return ended[0] - max(ended[1], ended[2])


def summary(name: str, values: list, target: float) -> str:
    med = statistics.median(values)
    return (f"{name}: median {med:.3f} s (min {min(values):.3f}, max {max(values):.3f}, n={len(values)}); "
            f"target <= {target:g} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--no-tf2", action="store_true", help="skip bench_shutdown_tf2.py")
    ap.add_argument("--exec-only", action="store_true", help="only the tf-slurm exec section")
    ap.add_argument("--original-only", action="store_true", help="only the tf4slurm-era task's ps exit")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        gaps = [one_original_run(tmp) for _ in range(args.runs)]
        print(summary("tf4slurm-era task, --slurm-env-only: ps exit after the last worker's exit", gaps, 1.0),
              flush=True)
        if args.original_only:
            return
        for strategy in EXEC_CASES:
            ends = [one_exec_run(tmp, strategy) for _ in range(args.runs)]
            print(summary(f"exec {strategy}: step end after the last training command exited (unmodified script)",
                          ends, 2.0), flush=True)
        if args.exec_only:
            return
        clean = [one_clean_run(tmp) for _ in range(args.runs)]
        print(summary("TF1 ps exit latency after the last worker's report", clean, 1.0), flush=True)
        kill = [one_kill_run(tmp) for _ in range(args.runs)]
        print(summary("TF1 time to detect a SIGKILLed worker (ps exits non-zero)", kill, 5.0), flush=True)
    tf2 = Path(__file__).with_name("bench_shutdown_tf2.py")
    if tf2.exists() and not args.no_tf2:
        spec = importlib.util.spec_from_file_location("bench_shutdown_tf2", tf2)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        if hasattr(module, "main"):
            saved, sys.argv = sys.argv, [str(tf2)]  # its own defaults, not our arguments
            try:
                module.main()
            finally:
                sys.argv = saved


if __name__ == "__main__":
    main()
