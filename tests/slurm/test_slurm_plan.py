"""The cluster plan inside real Slurm steps (local 3-node cluster): uneven, cyclic, arbitrary layouts.

Each task runs tests/slurm_tasks/plan_probe.py: it listens on its own plan address, reaches every
other task's address, and prints its plan as JSON. The test then checks the plan against what
Slurm itself told each task (SLURMD_NODENAME, SLURM_LOCALID).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
PROBE = str(REPO / "tests" / "slurm_tasks" / "plan_probe.py")


def _py():
    from slurm_harness import PYTHON

    return PYTHON


def run_probe(cluster, srun_args, ntasks, env=None):
    res = cluster.srun([*srun_args, "--mpi=none", "--kill-on-bad-exit=1", _py(), PROBE], timeout=120,
                       env={"PYTHONPATH": str(REPO), **(env or {})}, cwd=str(REPO))
    assert res.returncode == 0, f"srun rc={res.returncode}\n{res.stdout}\n{res.stderr[-3000:]}"
    rows = []
    for line in res.stdout.splitlines():
        label, _, rest = line.partition(": ")  # srun -l prefixes "RANK: "
        if line.startswith("{") or (label.strip().isdigit() and rest.startswith("{")):
            row = json.loads(line if line.startswith("{") else rest)
            if rest.startswith("{"):
                assert int(label) == row["procid"], line  # srun's label is SLURM_PROCID
            rows.append(row)
    assert len(rows) == ntasks, res.stdout
    return rows


def check_plan(rows, ntasks, expected_per_node):
    # Slurm's own view: how many tasks landed on each node
    assert Counter(r["slurmd_nodename"] for r in rows) == Counter(expected_per_node)
    # every task's own address names its own node, and the plan's slot matches Slurm's local id
    for r in rows:
        assert r["node"] == r["slurmd_nodename"], r
        assert r["host"] == r["slurmd_nodename"], r
        assert r["local_id"] == r["localid"], r
        assert r["address"] == f"{r['host']}:{r['port']}"
        assert (r["job_type"], r["task_index"]) == (r["role"], r["index"])
        assert r["port_scope"] == "step"  # from the harness's TaskProlog
        assert r["tmpdir"].endswith("/" + r["slurmd_nodename"])  # a TMPDIR per emulated node
        assert r["heard"] == sorted(set(range(ntasks)) - {r["rank"]})  # every peer reached me
    # every rank found exactly once; every SLURM_PROCID exactly once
    assert sorted(r["rank"] for r in rows) == list(range(ntasks))
    assert sorted(r["procid"] for r in rows) == list(range(ntasks))
    # all addresses (and, on this one real host, all ports) distinct
    assert len({r["address"] for r in rows}) == ntasks
    assert len({r["port"] for r in rows}) == ntasks
    # every task computed the same cluster, and it lists exactly the tasks' own addresses
    clusters = {json.dumps(r["cluster"], sort_keys=True) for r in rows}
    assert len(clusters) == 1
    cluster = rows[0]["cluster"]
    by_role = {role: sorted((r for r in rows if r["role"] == role), key=lambda r: r["index"])
               for role in cluster}
    for role, addrs in cluster.items():
        assert addrs == [r["address"] for r in by_role[role]], role
    assert len(cluster["ps"]) == 1 and len(cluster["worker"]) == ntasks - 1
    return cluster


@pytest.mark.timeout(180)
def test_block_uneven_4_1_1(slurm_cluster):
    rows = run_probe(slurm_cluster, ["-N3", "-n6", "-l"], 6)
    check_plan(rows, 6, {"node1": 4, "node2": 1, "node3": 1})
    # block layout: slots follow SLURM_PROCID; the first task (node1) is the ps
    assert all(r["rank"] == r["procid"] for r in rows)
    ps = [r for r in rows if r["role"] == "ps"]
    assert [(r["node"], r["local_id"]) for r in ps] == [("node1", 0)]


@pytest.mark.timeout(180)
def test_cyclic_distribution(slurm_cluster):
    # the allocation still fills node1 first (4,1,1); cyclic only deals the ranks round-robin
    rows = run_probe(slurm_cluster, ["-N3", "-n6", "--distribution=cyclic"], 6)
    check_plan(rows, 6, {"node1": 4, "node2": 1, "node3": 1})
    # cyclic: SLURM_PROCID 1 is on node2, yet slots go node by node (found from node + local id)
    assert {r["procid"]: r["slurmd_nodename"] for r in rows}[1] == "node2"
    assert any(r["rank"] != r["procid"] for r in rows)


@pytest.mark.timeout(180)
def test_cyclic_even(slurm_cluster):
    rows = run_probe(slurm_cluster, ["-N3", "--ntasks-per-node=2", "--distribution=cyclic"], 6)
    check_plan(rows, 6, {"node1": 2, "node2": 2, "node3": 2})
    assert [r["slurmd_nodename"] for r in sorted(rows, key=lambda r: r["procid"])] == ["node1", "node2", "node3"] * 2


@pytest.mark.timeout(180)
def test_arbitrary_distribution_uneven(slurm_cluster, tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("node2\nnode1\nnode1\nnode3\nnode1\n")
    rows = run_probe(slurm_cluster, ["-n5", "--distribution=arbitrary"], 5,
                     env={"SLURM_HOSTFILE": str(hostfile)})
    check_plan(rows, 5, {"node1": 3, "node2": 1, "node3": 1})
    assert {r["procid"]: r["slurmd_nodename"] for r in rows}[0] == "node2"


@pytest.mark.timeout(180)
def test_ib_address_template(slurm_cluster):
    """TF_SLURM_ADDRESS=template:{host}-ib (the templates' IB=IB switch): hosts are nodeK-ib."""
    res = slurm_cluster.srun(
        ["-N3", "-n3", "--mpi=none", _py(), "-c",
         "import json, os, tf_for_slurm; p = tf_for_slurm.plan_from_env(); "
         "print(json.dumps([os.environ['SLURMD_NODENAME'], p.me.host]))"],
        timeout=120, env={"PYTHONPATH": str(REPO), "TF_SLURM_ADDRESS": "template:{host}-ib"}, cwd=str(REPO))
    assert res.returncode == 0, res.stderr[-3000:]
    pairs = [json.loads(line) for line in res.stdout.splitlines()]
    assert sorted(pairs) == [["node1", "node1-ib"], ["node2", "node2-ib"], ["node3", "node3-ib"]]


@pytest.mark.timeout(120)
def test_harness_up_is_idempotent_and_env_points_at_cluster(slurm_cluster):
    """A second `up` leaves the running daemons alone; `env` names the cluster's slurm.conf."""
    import subprocess

    pidfiles = sorted((slurm_cluster.dir / "run").glob("*.pid"))
    assert {p.name for p in pidfiles} >= {"munged.pid", "slurmctld.pid", "slurmd-node1.pid", "slurmd-node3.pid"}
    before = {p.name: p.read_text().strip() for p in pidfiles}
    script = REPO / "scripts" / "local_slurm.sh"
    up = subprocess.run(["bash", str(script), "up"], capture_output=True, text=True, timeout=90)
    assert up.returncode == 0, up.stderr
    assert {p.name: p.read_text().strip() for p in pidfiles} == before
    status = subprocess.run(["bash", str(script), "status"], capture_output=True, text=True, timeout=60)
    assert status.returncode == 0 and status.stdout.count(" idle") == 3, status.stdout
    env = subprocess.run(["bash", str(script), "env"], capture_output=True, text=True, timeout=30).stdout
    assert f"export SLURM_CONF={slurm_cluster.dir}/etc/slurm.conf" in env
    bad = subprocess.run(["bash", str(script), "up", "--nodes", "zero"], capture_output=True, text=True, timeout=30)
    assert bad.returncode != 0 and "--nodes='zero': expected a positive integer" in bad.stderr
