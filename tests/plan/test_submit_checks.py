"""plan.submit_checks: what `submit` can tell before submitting, from plain text and numbers."""

from __future__ import annotations

import pytest
from submit_cases import NODES, PARTITIONS

from tf_for_slurm.plan.submit_checks import (
    Ask,
    ask_of,
    closest_name,
    is_python,
    never_starts,
    node_gpus,
    node_records,
    option_value,
    partition_records,
    python_target,
)


@pytest.mark.parametrize("args, expected", [
    (["train.py", "--epochs", "3"], ("file", "train.py")),
    (["-u", "train.py"], ("file", "train.py")),
    (["-u", "-O", "-B", "dir/t.py", "-c", "x"], ("file", "dir/t.py")),
    (["-uO", "t.py"], ("file", "t.py")),
    (["-W", "ignore", "t.py"], ("file", "t.py")),
    (["-Wignore", "t.py"], ("file", "t.py")),
    (["-X", "dev", "-X", "utf8", "t.py"], ("file", "t.py")),
    (["-uX", "dev", "t.py"], ("file", "t.py")),
    (["--check-hash-based-pycs", "never", "t.py"], ("file", "t.py")),
    (["-m", "pkg.train", "t.py"], ("module", "pkg.train")),
    (["-mpkg"], ("module", "pkg")),
    (["-u", "-c", "import x", "t.py"], ("code", "import x")),
    (["-uc", "pass"], ("code", "pass")),
    (["-"], ("none", None)),
    (["-u"], ("none", None)),
    ([], ("none", None)),
    (["--", "-odd.py"], ("file", "-odd.py")),
])
def test_python_target_reads_options_as_cpython_does(args, expected):
    assert python_target(args) == expected


def test_is_python_and_closest_name():
    assert all(is_python(w) for w in ("python", "python3", "python3.11", "/x/.venv/bin/python", "ipython"))
    assert not any(is_python(w) for w in ("bash", "./run.sh", "/usr/bin/env", "pyhton"))
    names = ["train_mwms.py", "train_pss.py", "README.md"]
    assert closest_name("trian_mwms.py", names) == "train_mwms.py"
    assert closest_name("zzz", names) is None


def test_option_value_and_ask_of_read_sbatch_words():
    words = ("--nodes=5", "--partition=debug", "--cpus-per-task=2", "--sbatch-arg-ignored", "-pgpu")
    assert option_value(words, "--partition", "-p") == "gpu"  # the last one given wins, as in sbatch
    assert option_value(words, "--qos") is None
    part, ask = ask_of(("--ntasks=5", "--nodes=5", "--cpus-per-task=2", "--partition=debug"), (1,) * 5)
    assert (part, ask) == ("debug", Ask(nodes=5, ntasks=5, cpus_per_task=2))
    part, ask = ask_of(("--ntasks=8", "--gpus-per-node=a100:2", "-O"), (8,), "component 1: ")
    assert part is None and ask == Ask(nodes=None, ntasks=8, gpus_per_node="a100:2", overcommit=True,
                                       label="component 1: ")
    assert ask_of(("--ntasks=6", "--ntasks-per-node=2"), (2, 2, 2))[1].nodes == 3


def test_partition_and_node_records():
    assert [r["PartitionName"] for r in partition_records(PARTITIONS, None)] == ["debug"]  # the default
    assert [r["PartitionName"] for r in partition_records(PARTITIONS, "gpu,nosuch")] == ["gpu"]
    assert partition_records(PARTITIONS, "nosuch") == []
    assert [r["NodeName"] for r in node_records(NODES, "debug")] == ["node1", "node2", "node3"]
    assert [r["NodeName"] for r in node_records(NODES, "gpu")] == ["gpu01", "gpu02"]
    assert (node_gpus("gpu:a100:4(S:0-1)", None), node_gpus("gpu:a100:2(S:0),gpu:v100:2", "v100"),
            node_gpus("gpu:8", None), node_gpus("(null)", None)) == (4, 2, 8, 0)


def _check(ask: Ask, partition: str = "debug"):
    record = partition_records(PARTITIONS, partition)[0]
    return never_starts(record, node_records(NODES, partition), ask)


@pytest.mark.parametrize("ask, partition, needle", [
    (Ask(nodes=5, ntasks=5), "debug",
     "-N/--nodes=5: expected at most 3: partition 'debug' has 3 node(s), so the job would pend forever"),
    (Ask(nodes=3, ntasks=3), "gpu", "-N/--nodes=3: expected at most 2: partition 'gpu' allows 2 node(s) per job"),
    (Ask(nodes=None, ntasks=13), "debug", "-n/--ntasks=13 x -c/--cpus-per-task=1: expected at most 12 CPUs: "
                                          "partition 'debug' has 12 CPUs on 3 node(s)"),
    (Ask(nodes=3, ntasks=3, cpus_per_task=5), "debug", "expected at most 12 CPUs"),
    (Ask(nodes=2, ntasks=10), "debug", "5 task(s) on one node x -c/--cpus-per-task=1: expected at most 4 CPUs "
                                       "per node: partition 'debug''s largest node has 4 CPUs"),
    (Ask(nodes=1, ntasks=1, cpus_per_task=40), "gpu", "expected at most 32 CPUs per node: partition 'gpu''s "
                                                      "largest node has 64 CPUs (MaxCPUsPerNode=32)"),
    (Ask(nodes=1, ntasks=1, gpus_per_node="a100:5"), "gpu", "--gpus-per-node=a100:5: expected at most 4"),
    (Ask(nodes=1, ntasks=1, gpus_per_node="3"), "debug", "--gpus-per-node=3: expected at most 0"),
    (Ask(nodes=5, ntasks=5, label="component 1: "), "debug", "component 1: -N/--nodes=5"),
])
def test_a_job_that_can_never_start_is_one_line_naming_the_partition(ask, partition, needle):
    line = _check(ask, partition)
    assert line is not None and needle in line and "\n" not in line, line
    assert line.endswith("ask for less, or another partition (-p)")


@pytest.mark.parametrize("ask, partition", [
    (Ask(nodes=3, ntasks=3), "debug"),
    (Ask(nodes=3, ntasks=12), "debug"),  # 4 per node: fills the cluster
    (Ask(nodes=None, ntasks=12), "debug"),
    (Ask(nodes=None, ntasks=20, overcommit=True), "debug"),  # -O: more tasks than CPUs allowed
    (Ask(nodes=2, ntasks=2, cpus_per_task=32, gpus_per_node="a100:4"), "gpu"),
    (Ask(nodes=1, ntasks=1, gpus_per_node="v100:2"), "gpu"),
])
def test_a_job_that_fits_is_not_refused(ask, partition):
    assert _check(ask, partition) is None


def test_unknown_sizes_refuse_nothing():
    assert never_starts({"PartitionName": "p"}, [], Ask(nodes=100, ntasks=10000, cpus_per_task=64,
                                                        gpus_per_node="8")) is None
    assert never_starts({"PartitionName": "p", "TotalNodes": "UNLIMITED"}, [{"NodeName": "n", "CPUTot": "x"}],
                        Ask(nodes=9, ntasks=9)) is None
