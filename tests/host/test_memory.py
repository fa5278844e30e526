"""Per-task memory arithmetic (tf_for_slurm.memory): allocation, partition and node cases, bad inputs."""

from __future__ import annotations

import argparse
import io
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from memory_cases import BAD, NODES, PART_DEBUG, PART_MIXED, env
from slurm_harness import PYTHON

from tf_for_slurm.cli.mem import add_arguments, main
from tf_for_slurm.errors import UsageError
from tf_for_slurm.host.allocation import memory_per_task
from tf_for_slurm.plan.memory import parse_count, parse_memory_mb, parse_scontrol_records

REPO = Path(__file__).resolve().parents[2]

# -- the allocation ----------------------------------------------------------------------------
def test_mem_per_cpu_times_cpus():
    a = memory_per_task(env(SLURM_MEM_PER_CPU=2000, SLURM_CPUS_PER_TASK=3))
    assert (a.per_cpu, a.per_task, a.cpus_per_task) == (2000, 6000, 3)
    assert a.source == "SLURM_MEM_PER_CPU"


def test_mem_per_cpu_with_unit_suffix():
    assert memory_per_task(env(SLURM_MEM_PER_CPU="2G")).per_cpu == 2048


def test_mem_per_node_divided_by_busiest_node():
    # srun -N3 -n6 gives 4,1(x2): one --mem-per-cpu must fit the node with 4 tasks.
    a = memory_per_task(env(SLURM_MEM_PER_NODE=12000, SLURM_TASKS_PER_NODE="4,1(x2)"))
    assert (a.per_cpu, a.per_task) == (3000, 3000)
    a = memory_per_task(env(SLURM_MEM_PER_NODE=12000, SLURM_TASKS_PER_NODE="4,1(x2)"), cpus_per_task=2)
    assert (a.per_cpu, a.per_task) == (1500, 3000)


def test_step_tasks_per_node_preferred_and_ntasks_per_node_first():
    e = env(SLURM_MEM_PER_NODE=12000, SLURM_TASKS_PER_NODE="6", SLURM_STEP_TASKS_PER_NODE="2(x3)")
    assert memory_per_task(e).per_task == 6000
    e["SLURM_NTASKS_PER_NODE"] = "3"
    assert memory_per_task(e).per_task == 4000
    assert memory_per_task(e, tasks_on_node=5).per_task == 2400


def test_mem_per_node_rounds_down():
    a = memory_per_task(env(SLURM_MEM_PER_NODE=1000), tasks_on_node=3, cpus_per_task=2)
    assert (a.per_cpu, a.per_task) == (166, 332)  # 1000 // 3 = 333 per task, // 2 = 166 per CPU


def test_mem_per_cpu_wins_over_mem_per_node_and_partition():
    a = memory_per_task(env(SLURM_MEM_PER_CPU=100, SLURM_MEM_PER_NODE=99999), partition_info=PART_DEBUG)
    assert a.per_cpu == 100


def test_mem_per_node_zero_means_whole_node_so_partition_decides():
    a = memory_per_task(env(SLURM_MEM_PER_NODE=0), partition_info=PART_DEBUG)
    assert a.per_cpu == 1024 and "DefMemPerCPU" in a.source


# -- the partition -----------------------------------------------------------------------------
def test_partition_def_mem_per_cpu():
    a = memory_per_task({}, partition_info=PART_DEBUG, cpus_per_task=2)
    assert (a.per_cpu, a.per_task) == (1024, 2048)


def test_partition_one_line_format():
    one_line = " ".join(PART_DEBUG.split())
    assert memory_per_task({}, partition_info=one_line).per_cpu == 1024


def test_mixed_partitions_pick_by_env_name_and_default():
    assert memory_per_task({}, partition_info=PART_MIXED).per_cpu == 5000  # Default=YES
    a = memory_per_task(env(SLURM_JOB_PARTITION="fatnode"), partition_info=PART_MIXED, tasks_on_node=16,
                        cpus_per_task=4)
    assert (a.per_task, a.per_cpu) == (16000, 4000)  # DefMemPerNode 256000 / 16 tasks
    # an explicit partition beats the environment
    a = memory_per_task(env(SLURM_JOB_PARTITION="fatnode"), partition_info=PART_MIXED, partition="thinnodes")
    assert a.per_cpu == 5000


def test_unlimited_partition_falls_back_to_nodes():
    a = memory_per_task(env(SLURM_JOB_PARTITION="gpu", SLURMD_NODENAME="gpu-a100-01"),
                        partition_info=PART_MIXED, node_info=NODES)
    assert a.per_cpu == (512000 - 8000) // 64  # MemSpecLimit is not for jobs
    assert "gpu-a100-01" in a.source


def test_no_partition_default_no_nodes_is_an_error():
    with pytest.raises(UsageError, match="memory information"):
        memory_per_task(env(SLURM_JOB_PARTITION="gpu"), partition_info=PART_MIXED)


# -- the nodes ---------------------------------------------------------------------------------
def test_nodes_poorest_node_decides_unless_mine_is_listed():
    assert memory_per_task({}, node_info=NODES).per_cpu == 1024  # node1: 4096 / 4
    assert memory_per_task(env(SLURMD_NODENAME="gpu-a100-01"), node_info=NODES).per_cpu == 7875
    assert memory_per_task(env(SLURMD_NODENAME="elsewhere"), node_info=NODES).per_cpu == 1024


def test_nodes_from_sinfo_lines_with_plus_suffix():
    text = "NODELIST CPUS MEMORY\nn1 4 4096\nn2 8+ 4096+\n"
    assert memory_per_task({}, node_info=text).per_cpu == 512
    assert memory_per_task({}, node_info="CPUS MEMORY\n4+ 8000+\n").per_cpu == 2000


def test_parsers():
    assert parse_count("4+", "x") == 4
    assert parse_count(" 12 ", "x") == 12
    assert parse_memory_mb("UNLIMITED", "x") is None
    assert parse_memory_mb("1.5G", "x") == 1536
    assert parse_memory_mb("2048K", "x") == 2
    assert parse_memory_mb("3000+", "x") == 3000
    recs = parse_scontrol_records(NODES)
    assert [r["NodeName"] for r in recs] == ["node1", "gpu-a100-01"]
    assert recs[0]["OS"] == "Linux 6.18.44-fc-v669 #1 SMP PREEMPT_DYNAMIC @0"
    assert recs[0]["CfgTRES"] == "cpu=4,mem=4G,billing=4"
    assert recs[0]["AllocTRES"] == ""
    assert recs[1]["Reason"] == "Not responding [slurm@2024-01-01T00:00:00]"


@settings(max_examples=60, deadline=None)
@given(mem=st.integers(1, 10**7), tpn=st.lists(st.integers(1, 64), min_size=1, max_size=6),
       cpus=st.integers(1, 16))
def test_mem_per_node_never_oversubscribes(mem, tpn, cpus):
    e = env(SLURM_MEM_PER_NODE=mem, SLURM_TASKS_PER_NODE=",".join(map(str, tpn)), SLURM_CPUS_PER_TASK=cpus)
    try:
        a = memory_per_task(e)
    except UsageError as exc:
        assert mem // max(tpn) < cpus, exc  # only when less than 1 MB per CPU is left
        return
    assert a.per_task == a.per_cpu * cpus
    assert a.per_task * max(tpn) <= mem  # the busiest node fits
    assert (a.per_cpu + 1) * cpus * max(tpn) > mem  # and nothing is wasted beyond rounding


# -- bad inputs: one line naming the variable ------------------------------------------------
@pytest.mark.parametrize("environ,kwargs,needle", BAD, ids=[b[2][:40] for b in BAD])
def test_bad_inputs_are_one_line_usage_errors(environ, kwargs, needle):
    with pytest.raises(UsageError) as info:
        memory_per_task(environ, **kwargs)
    msg = str(info.value)
    assert needle in msg
    assert "expected" in msg and "\n" not in msg


# -- `tf-slurm mem` ----------------------------------------------------------------------------
def _args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_arguments(p)
    return p.parse_args(list(argv))


def test_main_prints_per_cpu_and_per_task(tmp_path, monkeypatch, capsys):
    for k in ("SLURM_MEM_PER_CPU", "SLURM_MEM_PER_NODE", "SLURM_CPUS_PER_TASK", "SLURM_JOB_PARTITION",
              "SLURM_TASKS_PER_NODE", "SLURM_STEP_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE", "SLURMD_NODENAME"):
        monkeypatch.delenv(k, raising=False)
    part = tmp_path / "part.txt"
    part.write_text(PART_MIXED)
    assert main(_args("--partition-info", str(part), "--cpus-per-task", "2", "--per", "cpu")) == 0
    assert capsys.readouterr().out.strip() == "5000"
    assert main(_args("--partition-info", str(part), "--cpus-per-task", "2")) == 0  # default: per task
    assert capsys.readouterr().out.strip() == "10000"
    monkeypatch.setattr(sys, "stdin", io.StringIO(NODES))
    assert main(_args("--node-info", "-", "--per", "cpu")) == 0
    assert capsys.readouterr().out.strip() == "1024"
    monkeypatch.setenv("SLURM_MEM_PER_CPU", "777")
    assert main(_args("--per", "task", "--cpus-per-task", "3")) == 0
    assert capsys.readouterr().out.strip() == "2331"


@pytest.mark.parametrize("argv,needle", [
    (["--cpus-per-task", "0"], "--cpus-per-task=0"),
    (["--tasks-on-node", "-2"], "--tasks-on-node=-2"),
    (["--partition-info", "/nonexistent/part.txt"], "--partition-info='/nonexistent/part.txt'"),
    (["--partition-info", "-", "--node-info", "-"], "--node-info='-'"),
])
def test_main_bad_options(argv, needle, monkeypatch):
    monkeypatch.setenv("SLURM_MEM_PER_CPU", "100")
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    with pytest.raises(UsageError, match="expected") as info:
        main(_args(*argv))
    assert needle in str(info.value)


@pytest.mark.timeout(60)
def test_command_line_exit_codes():
    """`python -m tf_for_slurm mem` (the template's call): one number, or one line and exit 2."""
    base = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}
    ok = subprocess.run([sys.executable, "-m", "tf_for_slurm", "mem", "--per", "task", "--cpus-per-task", "2"],
                        env={**base, "SLURM_MEM_PER_CPU": "1500"}, capture_output=True, text=True, timeout=30)
    assert (ok.returncode, ok.stdout.strip()) == (0, "3000"), ok.stderr
    bad = subprocess.run([sys.executable, "-m", "tf_for_slurm", "mem"], env={**base, "SLURM_MEM_PER_CPU": "abc"},
                         capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.count("\n") == 1 and "SLURM_MEM_PER_CPU='abc': expected" in bad.stderr


# -- against the real local Slurm cluster ----------------------------------------------------
MEM_JOB = """#!/bin/bash
set -euo pipefail
MEM=$("$PYTHON" -m tf_for_slurm mem --per cpu --cpus-per-task "$CPT" \\
      --partition-info <(scontrol show partition) --node-info <(scontrol show node))
echo "mem_per_cpu=$MEM"
srun --mpi=none -n "$SLURM_NTASKS" -c "$CPT" --mem-per-cpu="${MEM}M" true
echo "srun ok"
"""


@pytest.mark.slurm
@pytest.mark.timeout(180)
@pytest.mark.parametrize("sbatch_args,cpt,expected", [
    (["-N2", "--ntasks-per-node=3"], 1, 1024),  # SLURM_MEM_PER_CPU from the partition's DefMemPerCPU
    (["-N3", "-n6", "--mem=1500M"], 1, 375),  # SLURM_MEM_PER_NODE=1500, busiest node holds 4 tasks
    (["-N2", "-n4", "-c2", "--mem=3000M"], 2, 750),  # 2 tasks x 2 CPUs per node share 3000 MB
])
def test_answer_is_accepted_by_srun(slurm_cluster, tmp_path, sbatch_args, cpt, expected):
    """The number `tf-slurm mem` prints is what srun --mem-per-cpu accepts inside the allocation."""
    script = tmp_path / "job.sh"
    script.write_text(MEM_JOB)
    job, info = slurm_cluster.sbatch_poll([*sbatch_args, "-o", str(tmp_path / "out-%j.txt"), str(script)],
                                          timeout=120, env={"PYTHON": PYTHON, "CPT": str(cpt),
                                                            "PYTHONPATH": str(REPO)})
    out = (tmp_path / f"out-{job}.txt").read_text()
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", (info, out)
    assert f"mem_per_cpu={expected}\n" in out and "srun ok" in out
