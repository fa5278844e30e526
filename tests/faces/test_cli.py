"""The `tf-slurm` command, run as users run it (a separate process)."""

import json
import os
import subprocess
import sys

import pytest
from cli_runs import clean_env
from envs import batch_env, step_env

from tf_for_slurm.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(args, env=None, timeout=60):
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "TF_SLURM_", "TF_CONFIG"))}
    base["PYTHONPATH"] = ROOT
    base.update(env or {})
    return subprocess.run([sys.executable, "-m", "tf_for_slurm", *args], env=base, capture_output=True,
                          text=True, timeout=timeout)


def test_import_does_not_import_tensorflow():
    out = subprocess.run([sys.executable, "-c",
                          "import sys, tf_for_slurm, tf_for_slurm.cli, tf_for_slurm.ServerDictionary;"
                          "print('tensorflow' in sys.modules)"], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": ROOT})
    assert out.stdout.strip() == "False"


def test_explain_offline_table_and_json():
    r = run(["explain", "--nodelist", "gpu[01-02],cpu5", "--tasks-per-node", "2(x2),1", "--ps", "2", "--job-id", "77"])
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["rank", "node", "local_id", "role", "index", "address", "gpus"]
    assert len([line for line in lines if not line.startswith("#")]) == 6
    r = run(["explain", "--json", "--nodelist", "gpu[01-02],cpu5", "--tasks-per-node", "2(x2),1",
             "--tasks", "ps,worker,ps,worker,master"])
    out = json.loads(r.stdout)
    rows = out["tasks"]
    assert out["chief"] == 4 and [x["rank"] for x in rows if x["chief"]] == [4]
    assert out["notes"]["address_policy"] == "hostname" and out["notes"]["port_policy"] == "window"
    assert [(x["rank"], x["node"], x["local_id"], x["role"], x["index"]) for x in rows] == [
        (0, "gpu01", 0, "ps", 0), (1, "gpu01", 1, "worker", 0), (2, "gpu02", 0, "ps", 1),
        (3, "gpu02", 1, "worker", 1), (4, "cpu5", 0, "chief", 0)]
    assert all(x["address"].startswith(x["node"] + ":") for x in rows)


def test_explain_from_the_environment_marks_this_task():
    r = run(["explain"], env=step_env("node[1-3]", "4,1(x2)", slot=4))
    assert r.returncode == 0, r.stderr
    marked = [line for line in r.stdout.splitlines() if line.startswith("*")]
    assert len(marked) == 1 and marked[0].split()[1:3] == ["4", "node2"]


def test_tf_config_and_env_exports():
    env = step_env("node[1-2]", "2(x2)", slot=3, job_id="55")
    r = run(["tf-config"], env=env)
    cfg = json.loads(r.stdout)
    assert cfg["task"] == {"type": "worker", "index": 2} and len(cfg["cluster"]["worker"]) == 3
    r = run(["env", "--ps", "2"], env=env)
    assert "export TF_SLURM_JOB_TYPE=worker" in r.stdout and "export TF_CONFIG='{" in r.stdout
    r = run(["tf-config", "--nodelist", "n[1-2]", "--rank", "1"])
    assert json.loads(r.stdout)["task"] == {"type": "worker", "index": 0}


def test_tf_config_and_env_in_a_batch_script_give_the_rank_asked_for(cli_runs):
    env = clean_env(**batch_env("node[1-3]", "1(x3)"))
    r = cli_runs.run(["tf-config", "--rank", "2"], env)
    assert r.returncode == 0 and json.loads(r.stdout)["task"] == {"type": "worker", "index": 1}, r.stderr
    r = cli_runs.run(["env", "--rank", "1"], env)
    assert r.returncode == 0 and "export TF_SLURM_RANK=1" in r.stdout, r.stderr
    r = cli_runs.run(["tf-config"], env)  # without --rank: refused (tests/faces/test_bad_inputs.py has the line)
    assert r.returncode == 2 and r.stdout == "", r.stdout


@pytest.mark.parametrize("drop", [(), ("SLURM_NTASKS", "SLURM_NPROCS")], ids=["ntasks=1", "ntasks unset"])
def test_tf_config_and_env_in_a_one_task_batch_script_are_that_task(cli_runs, drop):
    env = {k: v for k, v in batch_env("node1", "1").items() if k not in drop}
    r = cli_runs.run(["tf-config", "--ps", "0"], clean_env(**env))
    assert r.returncode == 0 and json.loads(r.stdout)["task"] == {"type": "worker", "index": 0}, r.stderr
    r = cli_runs.run(["env", "--ps", "0"], clean_env(**env))
    assert r.returncode == 0 and "export TF_SLURM_RANK=0" in r.stdout, r.stderr


def test_exec_runs_the_command_with_tf_config():
    env = step_env("localhost", "2", slot=1, TF_SLURM_BASE_PORT="31200")
    code = "import os, json; c=json.loads(os.environ['TF_CONFIG']); print(c['task']['type'], c['task']['index'])"
    r = run(["exec", "--no-sidecar", "--", sys.executable, "-c", code], env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "worker 0"


def test_exec_at_16384_tasks_gives_python_the_full_tf_config(tmp_path):
    table = tmp_path / "addresses"  # each node its own loopback address, as an iface pre-step would give
    table.write_text("".join(f"node{n:04d} 127.0.{n // 256}.{n % 256}\n" for n in range(1, 4097)))
    env = step_env("node[0001-4096]", "4(x4096)", slot=5000, TF_SLURM_ADDRESS=f"file:{table}")
    code = ("import os, json; c=json.loads(os.environ['TF_CONFIG']);"
            "print(len(c['cluster']['worker']), c['task']['index'], len(os.environ['TF_CONFIG']))")
    r = run(["exec", "--no-sidecar", "--", sys.executable, "-c", code], env=env)
    assert r.returncode == 0, r.stderr
    workers, index, size = r.stdout.split()
    assert (int(workers), int(index)) == (16383, 4999) and int(size) > 128 * 1024
    assert "too large for one environment string" in r.stderr
    # a non-Python command still gets a trimmed TF_CONFIG in its environment
    r = run(["exec", "--no-sidecar", "--", "sh", "-c", 'printf %s "$TF_CONFIG"'], env=env)
    trimmed = json.loads(r.stdout)
    assert trimmed["cluster"]["worker"] == {"4999": trimmed["cluster"]["worker"]["4999"]}


# The usage errors of `tf-slurm` (exit 2, one line on stderr) are rows of tests/faces/test_bad_inputs.py's CLI table.


def test_exec_of_a_missing_program():
    r = run(["exec", "--no-sidecar", "--", "/no/such/program"],
            env=step_env("localhost", "2", TF_SLURM_BASE_PORT="31300"))
    assert r.returncode == 127 and "cannot run '/no/such/program'" in r.stderr


def test_main_in_process_returns_2():
    assert main(["tf-config", "--nodelist", "n1", "--tasks-per-node", "2"]) == 2
