"""SlurmClusterResolver cost for one task: TensorFlow's own, TensorFlow's patched as under `tf-slurm exec`,
and the drop-in `tf_for_slurm.SlurmClusterResolver`, at 1,024 and 16,384 tasks (8 tasks per node).

Why: every task of a step builds the resolver once at start-up; under exec TensorFlow's class answers
from the step's TF_CONFIG (runtime.slurm_resolver.patch_tf_class), outside it the drop-in plans the step
itself.  Neither should cost much more than TensorFlow's own arithmetic.

Each (implementation, size, rank) runs in a fresh Python that imports TensorFlow (and, for the patched
class, applies the patch; for the drop-in, imports it) and runs gc.collect() before timing starts; it then
times, with time.perf_counter, constructing the resolver (gpus_per_node=8, so TensorFlow never runs
nvidia-smi) and one cluster_spec() call, N times.  Printed per row: the medians of construct and
cluster_spec, their sum, the first (cold) construct + cluster_spec (a task pays only that one) and the
garbage collection inside it, the peak RSS increase over the timed work, and the ratio of the row's
median total and first call to TensorFlow's own.

Why gc.collect(): importing TensorFlow leaves a full collection due (~0.1-0.2 s over its objects); the
first code that allocates many containers pays it (the plan's 16k Task objects do, TensorFlow's strings
do not), and the program's next allocations would pay it anyway.  --gc-debt skips it, to see that cost.

Environments: the Slurm step variables of tasks 0 and N-1 (host.slurm.fake_step_env, node[0001-NNNN]);
patched: plus TF_SLURM_SUPERVISED = step_tag and the step's TF_CONFIG (plan_from_env(ps=0), what exec gives
a jobs=None script), loaded into the interpreter's os.environ as the exec shim does (over 128 KiB it cannot
be in the C environment); drop-in: no TF_SLURM_SUPERVISED, no TF_CONFIG.
Run: .venv/bin/python bench/bench_slurm_resolver.py [--repeat N] [--quick] [--gc-debt]
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
from typing import Dict, List, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tf_for_slurm.host.environment import plan_from_env  # noqa: E402
from tf_for_slurm.host.slurm import fake_step_env, step_tag  # noqa: E402

PER_NODE = 8
SIZES = (128, 2048)  # nodes: 1,024 and 16,384 tasks
IMPLS = ("tf", "patched", "drop-in")
NAMES = {"tf": "TensorFlow's own", "patched": "TF's, patched (exec)", "drop-in": "tf_for_slurm drop-in"}

CHILD = r"""
import gc, json, os, resource, sys, time
impl, repeat, rank, ntasks, config_file, debt = (sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]),
                                                 sys.argv[5], sys.argv[6] == "1")
import tensorflow as tf
from tensorflow.python.distribute.cluster_resolver import slurm_cluster_resolver as module
if impl == "patched":
    from tf_for_slurm.runtime.slurm_resolver import patch_tf_class
    assert patch_tf_class(module)
    with open(config_file, encoding="utf-8") as fh:
        os.environ["TF_CONFIG"] = fh.read()
    cls = module.SlurmClusterResolver
elif impl == "drop-in":
    import tf_for_slurm
    cls = tf_for_slurm.SlurmClusterResolver
else:
    cls = module.SlurmClusterResolver
if not debt:
    gc.collect()  # the full collection TensorFlow's import left due falls on no one's timing
collecting = [0.0, 0.0]  # GC seconds in the timed work, start of the current collection


def _gc(phase, info):
    if phase == "start":
        collecting[1] = time.perf_counter()
    else:
        collecting[0] += time.perf_counter() - collecting[1]


gc.callbacks.append(_gc)
rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
construct, spec_time, gc_time = [], [], []
for _ in range(repeat):
    os.environ.pop("CUDA_VISIBLE_DEVICES", None)  # cluster_spec() sets it (auto_set_gpu)
    collecting[0] = 0.0
    t0 = time.perf_counter()
    resolver = cls(gpus_per_node=8)
    t1 = time.perf_counter()
    spec = resolver.cluster_spec()
    t2 = time.perf_counter()
    construct.append(t1 - t0); spec_time.append(t2 - t1); gc_time.append(collecting[0])
gc.callbacks.remove(_gc)
rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
jobs = spec.as_dict()
ok = len(jobs.get("worker", ())) == ntasks and resolver.task_type == "worker" and resolver.task_id == rank
print(json.dumps({"construct": construct, "spec": spec_time, "gc": gc_time, "rss_kib": rss1 - rss0, "ok": ok,
                  "address": spec.task_address("worker", rank),
                  "gpus": resolver.num_accelerators()["GPU"], "tf": tf.__version__,
                  "patched": bool(getattr(cls, "_tf_slurm_plan", False))}))
"""


def step_env(nodes: int, rank: int) -> Dict[str, str]:
    """Task `rank`'s Slurm variables of a one-step job of `nodes` x PER_NODE, on a clean environment."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM_", "TF_SLURM_", "TF_CONFIG", "CUDA_VISIBLE_DEVICES"))}
    node, local = divmod(rank, PER_NODE)
    env.update(fake_step_env(job_id="424242", nodelist=f"node[0001-{nodes:04d}]", tasks_per_node=[PER_NODE] * nodes,
                             rank=rank, local_id=local, node_index=node, node_name=f"node{node + 1:04d}"))
    env.update({"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": ROOT})
    return env


def exec_env(env: Dict[str, str], folder: str) -> Tuple[Dict[str, str], str]:
    """The environment exec gives the task (supervised tag), and a file with its TF_CONFIG."""
    path = os.path.join(folder, f"tf_config.{env['SLURM_PROCID']}.json")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(plan_from_env(env, ps=0, check=False).tf_config_json())
    return {**env, "TF_SLURM_SUPERVISED": step_tag(env)}, path


def measure(impl: str, env: Dict[str, str], config_file: str, rank: int, ntasks: int, repeat: int,
            debt: bool = False) -> dict:
    argv = [sys.executable, "-c", CHILD, impl, str(repeat), str(rank), str(ntasks), config_file, str(int(debt))]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        sys.exit(f"{impl} at {ntasks} tasks, rank {rank}: exit {proc.returncode}:\n{proc.stderr.strip()[-3000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    if not out["ok"] or out["patched"] != (impl == "patched"):
        sys.exit(f"{impl} at {ntasks} tasks, rank {rank}: unexpected answer {out}")
    return out


def row(impl: str, ntasks: int, rank: int, out: dict, tf_out: dict) -> List[str]:
    construct, spec = statistics.median(out["construct"]) * 1e3, statistics.median(out["spec"]) * 1e3
    total = statistics.median(c + s for c, s in zip(out["construct"], out["spec"])) * 1e3
    first = (out["construct"][0] + out["spec"][0]) * 1e3
    tf_total = statistics.median(c + s for c, s in zip(tf_out["construct"], tf_out["spec"])) * 1e3
    tf_first = (tf_out["construct"][0] + tf_out["spec"][0]) * 1e3
    ratio = "-" if impl == "tf" else f"{total / tf_total:.2f}x / {first / tf_first:.2f}x"
    return [NAMES[impl], f"{ntasks:,}", str(rank), f"{construct:.2f}", f"{spec:.2f}", f"{total:.2f}",
            f"{first:.2f}", f"{out['gc'][0] * 1e3:.1f}", f"{out['rss_kib'] / 1024:.1f}", ratio, out["address"]]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5, help="timed repetitions in each process (default 5)")
    ap.add_argument("--quick", action="store_true", help="rank 0 only, 3 repetitions")
    ap.add_argument("--gc-debt", action="store_true",
                    help="no gc.collect() before timing: the first call that allocates many objects pays the full "
                         "collection TensorFlow's import left due (about 0.1-0.2 s here)")
    args = ap.parse_args()
    repeat = 3 if args.quick else max(1, args.repeat)
    header = ["implementation", "tasks", "rank", "construct ms", "cluster_spec ms", "total ms", "first ms",
              "first's GC ms", "peak RSS +MiB", "ours/TF (total / first)", "own address"]
    rows, version, start = [], "?", time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench_resolver.") as folder:
        for nodes in SIZES:
            ntasks = nodes * PER_NODE
            for rank in (0,) if args.quick else (0, ntasks - 1):
                env = step_env(nodes, rank)
                supervised, config_file = exec_env(env, folder)
                got = {impl: measure(impl, supervised if impl == "patched" else env, config_file, rank, ntasks, repeat,
                               args.gc_debt)
                       for impl in IMPLS}
                version = got["tf"]["tf"]
                rows += [row(impl, ntasks, rank, got[impl], got["tf"]) for impl in IMPLS]
                print(f"  measured {ntasks:,} tasks, rank {rank}", flush=True)
    print(f"TensorFlow {version}; Python {sys.version.split()[0]}; {PER_NODE} tasks per node; median of {repeat} "
          "in one process (first: the first construct + cluster_spec, what a task pays once; "
          + ("no gc.collect() before timing" if args.gc_debt else "gc.collect() before timing") + ")")
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
    for r in [header] + rows:
        print("  ".join(cell.rjust(w) if i and i != len(header) - 1 else cell.ljust(w)
                        for i, (cell, w) in enumerate(zip(r, widths))).rstrip())
    print(f"bench took {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
