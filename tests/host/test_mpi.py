"""The mpi4py reader: the same plan from MPI rank/size/host names (mpirun, srun --mpi=pmix)."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from tf_for_slurm.host.mpi import layout_from_hosts

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_layout_from_hosts_keeps_first_seen_order_and_local_ids():
    nodes, counts, where = layout_from_hosts(["b", "a", "b", "c", "a", "b"])
    assert nodes == ("b", "a", "c") and counts == (3, 2, 1)
    assert where == ((0, 0), (1, 0), (0, 1), (2, 0), (1, 1), (0, 2))


SCRIPT = """
import json, os
from mpi4py import MPI
from tf_for_slurm.mpi import plan_from_mpi
plan = plan_from_mpi(ps=1, rendezvous=os.environ.get('RDV') == '1', address='template:127.0.0.1')
row = {'rank': MPI.COMM_WORLD.Get_rank(), 'me': plan.me.rank, 'role': plan.me.role,
       'addresses': [t.address for t in plan.tasks]}
with open(os.path.join(os.environ['OUT'], str(row['rank'])), 'w') as fh:
    json.dump(row, fh)
"""


@pytest.mark.mpi
@pytest.mark.timeout(120)
@pytest.mark.parametrize("rendezvous", ["0", "1"])
def test_mpirun_three_ranks_agree_on_one_plan(rendezvous, tmp_path):
    pytest.importorskip("mpi4py")
    if not shutil.which("mpirun"):
        pytest.skip("mpirun (Open MPI) is not installed")
    env = {**os.environ, "PYTHONPATH": ROOT, "RDV": rendezvous, "OUT": str(tmp_path), "OMPI_MCA_rmaps_base_oversubscribe": "1"}
    env = {k: v for k, v in env.items() if not k.startswith("SLURM_")}
    proc = subprocess.run(["mpirun", "--allow-run-as-root", "--oversubscribe", "-n", "3", sys.executable, "-c", SCRIPT],
                          env=env, capture_output=True, text=True, timeout=100)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads((tmp_path / str(rank)).read_text()) for rank in range(3)]
    assert [r["me"] for r in rows] == [0, 1, 2]
    assert [r["role"] for r in rows] == ["ps", "worker", "worker"]
    assert all(r["addresses"] == rows[0]["addresses"] for r in rows)
    assert len(set(rows[0]["addresses"])) == 3
