"""End-to-end benchmark of the distributed MNIST example (1 ps + 2 workers on this machine).

Prints two things:

1. Start-up cost: seconds from job start (just before the processes are spawned) to the end of
   the chief's first training step, for the same model and flags launched three ways:
     hand     - a hand-written launch: each process gets TF_CONFIG, builds its ClusterSpec and
                tf.distribute.Server itself; the ps only join()s, so the benchmark kills it;
     library  - examples/mnist_distributed/LaunchTFServerWithHooks.py on tf_for_slurm, each
                process spawned directly with the environment srun would give it (the library's
                own cost: plan from Slurm variables, port checks, done queue);
     local    - the same through `tf-slurm local` (adds the launcher process, the srun stand-in).
   The overhead figure is library vs hand (target <= 5%).  Runs alternate between the variants
   and the median of --repeats is reported, because other work on the machine moves every
   wall-clock figure by seconds; the chief's CPU seconds up to its first step are reported too,
   as they depend much less on that load.
2. Held-out accuracy after the same global-step target, asynchronous vs synchronous updates
   (`tf-slurm local` runs of the example with default hyper-parameters).

    .venv/bin/python bench/bench_e2e.py [--data_dir ../shared/data/mnist] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(REPO, "examples", "mnist_distributed")
LAUNCH_SCRIPT = os.path.join(EXAMPLE, "LaunchTFServerWithHooks.py")
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "tests"))
from ports import free_base_port  # noqa: E402  (shared with the tests)


# -- the hand-written task (what people write without the library) ---------------------------------

def hand_task(model_dir: str, data_dir: str, iterations: int, sync: bool) -> int:
    """One task of a hand-written TF_CONFIG launch of the same model."""
    import tensorflow as tf

    cfg = json.loads(os.environ["TF_CONFIG"])
    job, index = cfg["task"]["type"], cfg["task"]["index"]
    server = tf.distribute.Server(tf.train.ClusterSpec(cfg["cluster"]), job_name=job, task_index=index)
    if job == "ps":
        server.join()  # never returns: the launcher of a hand-written job must kill it
    sys.path.insert(0, EXAMPLE)
    from DeepMNIST_DistributedTRAIN import DistributedTrain
    from mnist_data import load_mnist

    DistributedTrain(server, cfg["cluster"], job, index, data=load_mnist(data_dir), model_dir=model_dir,
                     iterations=iterations, sync=sync, eval_every=0)
    return 0


# -- running the variants ------------------------------------------------------------------------

def _base_env() -> dict:
    env = dict(os.environ)
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _metrics(model_dir: str) -> dict:
    with open(os.path.join(model_dir, "metrics.json")) as f:
        return json.load(f)


def _wait_all(procs: list, timeout: float) -> list:
    deadline = time.monotonic() + timeout
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=max(0.1, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise RuntimeError(f"a task did not finish within {timeout} s")
    return codes


def run_hand(data_dir: str, iterations: int, sync: bool, workers: int, timeout: float) -> dict:
    n = 1 + workers
    base = free_base_port(n)
    cluster = {"ps": [f"127.0.0.1:{base}"], "worker": [f"127.0.0.1:{base + 1 + i}" for i in range(workers)]}
    with tempfile.TemporaryDirectory(prefix="bench_hand_") as model_dir:
        logs = [open(os.path.join(model_dir, f"task{i}.log"), "w") for i in range(n)]
        t0 = time.time()
        procs = []
        for i, (job, index) in enumerate([("ps", 0)] + [("worker", k) for k in range(workers)]):
            env = _base_env()
            env["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": {"type": job, "index": index}})
            cmd = [sys.executable, __file__, "--hand-task", model_dir, "--data_dir", data_dir,
                   "--iterations", str(iterations)] + (["--sync"] if sync else [])
            procs.append(subprocess.Popen(cmd, env=env, stdout=logs[i], stderr=subprocess.STDOUT))
        codes = _wait_all(procs[1:], timeout)
        t_end = time.time()
        procs[0].kill()  # the hand-written ps never exits by itself
        procs[0].wait()
        for f in logs:
            f.close()
        if any(codes):
            raise RuntimeError(f"hand-written run failed (worker codes {codes}); see logs in {model_dir}")
        m = _metrics(model_dir)
    return {"first_step_s": m["first_step_time"] - t0, "first_step_cpu_s": m["first_step_cpu_s"],
            "workers_done_s": t_end - t0,
            "accuracy": m["accuracy"], "global_step": m["global_step"], "ps_exit": "killed (join() never returns)"}


def _example_args(data_dir: str, model_dir: str, iterations: int, sync: bool, workers: int) -> list:
    return (["--data_dir", data_dir, "--model_dir", model_dir, "--ps", "1", "--workers", str(workers),
             "--Iterations", str(iterations), "--eval_every", "0"] + (["--sync"] if sync else []))


def run_library(data_dir: str, iterations: int, sync: bool, workers: int, timeout: float) -> dict:
    from tf_for_slurm.supervise.launcher import make_layout, task_env

    n = 1 + workers
    layout = make_layout(n)
    with tempfile.TemporaryDirectory(prefix="bench_lib_") as model_dir:
        base = _base_env()
        base["TF_SLURM_BASE_PORT"] = str(free_base_port(n))
        logs = [open(os.path.join(model_dir, f"task{i}.log"), "w") for i in range(n)]
        job_id = str(4_000_000 + os.getpid())  # one job id for every task, as srun gives
        t0 = time.time()
        procs = [subprocess.Popen([sys.executable, LAUNCH_SCRIPT,
                                   *_example_args(data_dir, model_dir, iterations, sync, workers)],
                                  env=task_env(layout, rank, job_id, base),
                                  stdout=logs[rank], stderr=subprocess.STDOUT)
                 for rank in range(n)]
        codes = _wait_all(procs, timeout)
        t_end = time.time()
        for f in logs:
            f.close()
        if any(codes):
            raise RuntimeError(f"library run failed (codes {codes}); see logs in {model_dir}")
        m = _metrics(model_dir)
    return {"first_step_s": m["first_step_time"] - t0, "first_step_cpu_s": m["first_step_cpu_s"],
            "all_exited_s": t_end - t0, "accuracy": m["accuracy"], "global_step": m["global_step"],
            "ps_exit": f"exit {codes[0]}"}


def run_local(data_dir: str, iterations: int, sync: bool, workers: int, timeout: float) -> dict:
    n = 1 + workers
    with tempfile.TemporaryDirectory(prefix="bench_local_") as model_dir:
        env = _base_env()
        env["TF_SLURM_BASE_PORT"] = str(free_base_port(n))
        cmd = [sys.executable, "-m", "tf_for_slurm", "local", "-n", str(n), "--ps", "1", "--",
               sys.executable, LAUNCH_SCRIPT, *_example_args(data_dir, model_dir, iterations, sync, workers)]
        t0 = time.time()
        r = subprocess.run(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=timeout)
        t_end = time.time()
        if r.returncode:
            raise RuntimeError(f"tf-slurm local run failed ({r.returncode}):\n{r.stdout[-3000:]}")
        m = _metrics(model_dir)
        clean = "exiting cleanly (status 0)" in r.stdout
    return {"first_step_s": m["first_step_time"] - t0, "first_step_cpu_s": m["first_step_cpu_s"],
            "all_exited_s": t_end - t0, "accuracy": m["accuracy"], "global_step": m["global_step"],
            "train_s": t_end - m["first_step_time"] if "first_step_time" in m else float("nan"),
            "ps_exit": "exit 0 (clean)" if clean else "?"}


RUNNERS = {"hand": run_hand, "library": run_library, "local": run_local}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data_dir", default=os.path.join(REPO, "..", "shared", "data", "mnist"))
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3, help="start-up runs per variant (median reported)")
    p.add_argument("--timing_iterations", type=int, default=20, help="global steps of each start-up run")
    p.add_argument("--accuracy_iterations", type=int, default=None,
                   help="global-step target of the async/sync runs (default: the example's default)")
    p.add_argument("--skip_accuracy", action="store_true")
    p.add_argument("--skip_startup", action="store_true")
    p.add_argument("--timeout", type=float, default=400.0, help="seconds per run")
    p.add_argument("--json", default=None, help="also write the results here")
    p.add_argument("--hand-task", default=None, help=argparse.SUPPRESS)
    p.add_argument("--iterations", type=int, default=20, help=argparse.SUPPRESS)
    p.add_argument("--sync", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.hand_task:
        return hand_task(args.hand_task, args.data_dir, args.iterations, args.sync)

    sys.path.insert(0, EXAMPLE)
    from mnist_data import load_mnist

    data = load_mnist(args.data_dir)  # fail here, clearly, if the data is missing
    print(f"data: {data.source}")
    print(f"machine: {os.cpu_count()} CPUs; cluster: 1 ps + {args.workers} workers on 127.0.0.1")
    results: dict = {"workers": args.workers}

    if not args.skip_startup:
        runs: dict = {k: [] for k in RUNNERS}
        for rep in range(args.repeats):
            for name, fn in RUNNERS.items():  # interleaved so load drifts hit every variant alike
                r = fn(args.data_dir, args.timing_iterations, False, args.workers, args.timeout)
                runs[name].append(r)
                print(f"  run {rep + 1}/{args.repeats} {name:8s} first step after {r['first_step_s']:.2f} s "
                      f"(chief CPU {r['first_step_cpu_s']:.2f} s)", flush=True)
        med = {k: statistics.median(r["first_step_s"] for r in v) for k, v in runs.items()}
        cpu = {k: statistics.median(r["first_step_cpu_s"] for r in v) for k, v in runs.items()}
        print(f"\nTime from job start to the chief's first training step "
              f"(median of {args.repeats}; min-max), and the chief's CPU seconds until then:")
        for k, v in runs.items():
            xs = [r["first_step_s"] for r in v]
            print(f"  {k:8s} wall {med[k]:6.2f} s ({min(xs):.2f}-{max(xs):.2f})   "
                  f"chief CPU {cpu[k]:5.2f} s   ps: {v[0]['ps_exit']}")
        overhead = (med["library"] - med["hand"]) / med["hand"] * 100
        launcher = (med["local"] - med["hand"]) / med["hand"] * 100
        cpu_overhead = (cpu["library"] - cpu["hand"]) / cpu["hand"] * 100
        print(f"  library overhead vs hand-written: wall {overhead:+.1f}%, chief CPU {cpu_overhead:+.1f}% "
              f"(target <= 5%); wall with the tf-slurm local launcher: {launcher:+.1f}%")
        print(f"  load average now: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs "
              "(wall figures move with it; CPU seconds much less)")
        results["startup"] = {"runs": runs, "median_first_step_s": med, "median_first_step_cpu_s": cpu,
                              "library_overhead_pct": overhead, "library_cpu_overhead_pct": cpu_overhead,
                              "local_overhead_pct": launcher}

    if not args.skip_accuracy:
        from defaults import ITERATIONS

        iters = args.accuracy_iterations or ITERATIONS
        acc = {}
        for mode, sync in (("async", False), ("sync", True)):
            acc[mode] = run_local(args.data_dir, iters, sync, args.workers, args.timeout)
            print(f"  {mode:5s} done: accuracy {acc[mode]['accuracy']:.4f}", flush=True)
        print(f"\nHeld-out accuracy after global step {iters} ({len(data.heldout_labels)} held-out examples, "
              f"tf-slurm local, default hyper-parameters):")
        for mode, r in acc.items():
            per_step = args.workers if mode == "sync" else 1
            print(f"  {mode:5s} accuracy {r['accuracy']:.4f}  global step {r['global_step']}  "
                  f"~{r['global_step'] * per_step} worker batches  first step to end {r['train_s']:.1f} s  "
                  f"job {r['all_exited_s']:.1f} s  ps: {r['ps_exit']}")
        results["accuracy"] = acc

    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
