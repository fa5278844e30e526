"""plan.srun_command: the node options batch-step adds to a step's srun, never to its program."""

import pytest

from tf_for_slurm.plan.srun_command import is_srun, options_end, with_nodes


@pytest.mark.parametrize("command,end", [
    (["srun", "python", "t.py"], 1),
    (["srun", "-l", "-n", "3", "-c2", "--mpi=none", "--ntasks-per-node", "2", "python", "-m", "x"], 8),
    (["srun", "--no-kill", "--resv-ports=4", "--", "-weird"], 4),
    (["srun", "-n", "3"], 3),
])
def test_options_end(command, end):
    assert options_end(command) == end


@pytest.mark.parametrize("command,kwargs,want", [
    (["srun", "-n", "3", "python", "t.py", "--mem=1"], {"nodes": 2},
     ["srun", "-n", "3", "--nodes=2", "python", "t.py", "--mem=1"]),
    (["/usr/bin/srun", "--mem-per-cpu=100M", "--mem", "5G", "-n", "3", "--", "python", "--mem-per-cpu=9"],
     {"nodes": 3, "nodelist": ("a", "b", "c"), "exclude": ("d",), "overlap": True},
     ["/usr/bin/srun", "-n", "3", "--overlap", "--mem=0", "--nodes=3", "--nodelist=a,b,c", "--exclude=d", "--",
      "python", "--mem-per-cpu=9"]),
])
def test_with_nodes(command, kwargs, want):
    assert with_nodes(command, **kwargs) == want


def test_only_srun():
    assert is_srun(["/opt/slurm/bin/srun", "x"]) and not is_srun(["mpirun", "x"]) and not is_srun([])
    with pytest.raises(ValueError, match="runs mpirun, not srun"):
        with_nodes(["mpirun", "x"], 2)
