"""The original API names keep working (scripts written for tf4slurm)."""

import os
import subprocess
import sys

from envs import step_env

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCRIPT = """
from tf_for_slurm.ServerDictionary import GetServerDictionary
ListOfTFTasks = ['ps', 'worker', 'worker', 'worker', 'ps', 'worker', 'worker', 'worker']
sd, job_type, task_index = GetServerDictionary(ListOfTFTasks, NoIB={no_ib})
print(','.join(sorted(sd)), len(sd['ps']), len(sd['worker']), job_type, task_index, sd['ps'][1])
"""


def run(no_ib, slot, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "TF_SLURM_"))}
    env.update(step_env("localhost,127.0.0.1", "4(x2)", slot=slot, **extra), PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, "-c", SCRIPT.format(no_ib=no_ib)], env=env, capture_output=True,
                          text=True, timeout=60)


def test_get_server_dictionary_with_host_names():
    r = run(True, 4)
    assert r.returncode == 0, r.stderr
    keys, n_ps, n_workers, job_type, index, ps1 = r.stdout.split(maxsplit=5)
    assert (n_ps, n_workers, job_type, index) == ("2", "6", "ps", "1")
    assert ps1.strip().startswith("127.0.0.1:")


def test_get_server_dictionary_infiniband_names_from_template():
    r = run(False, 1, TF_SLURM_IB_TEMPLATE="{host}")  # a template that resolves here
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[3:5] == ["worker", "0"]
    r = run(False, 1)  # default '{host}-ib' does not resolve on this machine: a clear error
    assert r.returncode != 0 and "'localhost-ib' of worker:0" in r.stderr and "does not resolve" in r.stderr
