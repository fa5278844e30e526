"""Plan speed: in-process plan of 4096 nodes x 4 tasks, whole-process `tf-slurm tf-config`, and the
same plan through TensorFlow's SlurmClusterResolver (a faked Slurm environment).

Prints figures; targets: in-process <= 50 ms; ours >= 20x faster than the resolver end to end.
Run: .venv/bin/python bench/bench_plan.py [--repeat N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

NODES, PER_NODE, PS = 4096, 4, 4
NODELIST = f"node[0001-{NODES:04d}]"
SLOT = 5000  # the task we ask about: node 1251, local id 0


def fake_env() -> dict:
    node, local = divmod(SLOT, PER_NODE)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "TF_SLURM_", "TF_CONFIG"))}
    env.update({
        "SLURM_JOB_ID": "424242", "SLURM_STEP_ID": "0", "SLURM_JOB_NODELIST": NODELIST,
        "SLURM_STEP_NODELIST": NODELIST, "SLURM_TASKS_PER_NODE": f"{PER_NODE}(x{NODES})",
        "SLURM_STEP_TASKS_PER_NODE": f"{PER_NODE}(x{NODES})", "SLURM_NTASKS": str(NODES * PER_NODE),
        "SLURM_STEP_NUM_TASKS": str(NODES * PER_NODE), "SLURM_PROCID": str(SLOT), "SLURM_LOCALID": str(local),
        "SLURM_NODEID": str(node), "SLURMD_NODENAME": f"node{node + 1:04d}", "TF_SLURM_PS": str(PS),
        "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": ROOT,
    })
    return env


def in_process(repeat: int) -> list:
    from tf_for_slurm import plan_from_env

    env = fake_env()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        plan = plan_from_env(env, check=False)
        plan.tf_config_json()
        times.append(time.perf_counter() - t)
    assert plan.me.rank == SLOT
    return times


RESOLVER = f"""
import time; t0 = time.perf_counter()
from tensorflow.python.distribute.cluster_resolver.slurm_cluster_resolver import SlurmClusterResolver
r = SlurmClusterResolver(jobs={{'ps': {PS}, 'worker': {NODES * PER_NODE - PS}}}, port_base=8888,
                         gpus_per_node={PER_NODE}, gpus_per_task=1, tasks_per_node=None, auto_set_gpu=False)
spec = r.cluster_spec().as_dict(); t1 = time.perf_counter()
print(len(spec['worker']), r.task_type, r.task_id, t1 - t0)
"""


def whole_process(cmd: list, env: dict, repeat: int) -> tuple:
    times, out = [], ""
    for _ in range(repeat):
        t = time.perf_counter()
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
        times.append(time.perf_counter() - t)
        if proc.returncode != 0:
            return times, "FAILED: " + (proc.stderr.strip().splitlines() or ["?"])[-1]
        out = proc.stdout.strip()
    return times, out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    env = fake_env()
    ours = in_process(max(args.repeat, 5))
    print(f"plan {NODES} nodes x {PER_NODE} tasks = {NODES * PER_NODE} tasks, {PS} ps")
    print(f"in-process plan + TF_CONFIG: median {statistics.median(ours) * 1000:.1f} ms, "
          f"min {min(ours) * 1000:.1f} ms (target <= 50 ms)")
    cli, out = whole_process([sys.executable, "-m", "tf_for_slurm", "tf-config"], env, args.repeat)
    print(f"whole-process `tf-slurm tf-config`: median {statistics.median(cli) * 1000:.0f} ms "
          f"({len(out)} bytes of TF_CONFIG)")
    tfr, out = whole_process([sys.executable, "-c", RESOLVER], env, max(1, args.repeat // 2))
    print(f"whole-process TensorFlow SlurmClusterResolver: median {statistics.median(tfr) * 1000:.0f} ms ({out})")
    if not out.startswith("FAILED"):
        print(f"speed-up end to end: {statistics.median(tfr) / statistics.median(cli):.1f}x (target >= 20x)")
        print(f"resolver in-process (after import): {float(out.split()[-1]) * 1000:.0f} ms "
              f"vs ours {statistics.median(ours) * 1000:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
