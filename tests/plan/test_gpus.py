"""GPU share logic: every split the issue names, checked against an independent property."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from tf_for_slurm.errors import UsageError
from tf_for_slurm.plan.gpus import bound_per_task, local_gpu_ordinal, parse_gpu_list, pick_gpu_source, share_gpus, visible_devices_for
from tf_for_slurm.plan import Task


def _shares(pool, n):
    return [share_gpus(pool, n, k) for k in range(n)]


@pytest.mark.parametrize("pool,n,expected", [
    (("0", "1", "2", "3"), 2, [("0", "1"), ("2", "3")]),
    (("0", "1", "2", "3"), 4, [("0",), ("1",), ("2",), ("3",)]),
    (("0", "1", "2", "3", "4"), 2, [("0", "1", "2"), ("3", "4")]),        # uneven: first gets extra
    (("0", "1", "2", "3", "4"), 3, [("0", "1"), ("2", "3"), ("4",)]),
    (("0", "1"), 3, [("0",), ("1",), ("0",)]),                             # more workers than GPUs
    (("5",), 2, [("5",), ("5",)]),
    ((), 3, [(), (), ()]),                                                  # CPU-only node
    (("2", "5", "7"), 1, [("2", "5", "7")]),                               # ids kept, never 0-based
    (("GPU-aaa", "GPU-bbb"), 2, [("GPU-aaa",), ("GPU-bbb",)]),              # UUIDs work too
])
def test_share_gpus_table(pool, n, expected):
    assert _shares(pool, n) == expected


@given(st.lists(st.integers(0, 63), unique=True, max_size=16).map(lambda xs: tuple(map(str, xs))),
       st.integers(1, 20))
def test_share_gpus_properties(pool, n):
    shares = _shares(pool, n)
    if not pool:
        assert all(s == () for s in shares)
    elif n <= len(pool):
        # a partition of the pool, in order, sizes differing by at most one
        assert sum(shares, ()) == pool
        sizes = [len(s) for s in shares]
        assert max(sizes) - min(sizes) <= 1 and min(sizes) >= 1
    else:
        assert all(len(s) == 1 and s[0] in pool for s in shares)
        assert {s[0] for s in shares} == set(pool)  # every GPU is used


@pytest.mark.parametrize("args,name", [
    ((("0",), 0, 0), "n_local_workers"),
    ((("0",), 2, 2), "local_worker_ordinal"),
    ((("0",), 2, -1), "local_worker_ordinal"),
    ((("0", "0"), 1, 0), "available"),
    ((("0",), True, 0), "n_local_workers"),
])
def test_share_gpus_rejects_bad_input(args, name):
    with pytest.raises(UsageError, match=name):
        share_gpus(*args)


def test_parse_gpu_list():
    assert parse_gpu_list(None) == ()
    assert parse_gpu_list("") == ()
    assert parse_gpu_list("NoDevFiles") == ()
    assert parse_gpu_list(" 0, 3 ") == ("0", "3")
    with pytest.raises(UsageError, match="the visible GPU list='0,,1'"):
        parse_gpu_list("0,,1")
    with pytest.raises(UsageError, match="CUDA_VISIBLE_DEVICES='0,,1'"):  # the name its caller passes
        parse_gpu_list("0,,1", "CUDA_VISIBLE_DEVICES")


def test_a_bad_gpu_list_names_the_variable_its_caller_read():
    from tf_for_slurm.host.slurm import GPU_NAMES
    from tf_for_slurm.plan.gpus import devices_for_task
    t = [type("T", (), {"rank": 0, "role": "worker", "node_index": 0, "gpus": ()})()]
    with pytest.raises(UsageError, match="SLURM_STEP_GPUS='1,,2'"):
        devices_for_task(t, 0, None, "1,,2", GPU_NAMES)
    with pytest.raises(UsageError, match="CUDA_VISIBLE_DEVICES='x,'"):
        devices_for_task(t, 0, "x,", None, GPU_NAMES)


def test_pick_gpu_source_order():
    assert pick_gpu_source("1,2", ("7",), "4,5") == ("1", "2")
    assert pick_gpu_source(None, ("7",), "4,5") == ("7",)
    assert pick_gpu_source("NoDevFiles", (), "4,5") == ("4", "5")
    assert pick_gpu_source(None, (), None) == ()


def test_bound_per_task():
    assert bound_per_task("0", "2,3")
    assert not bound_per_task("0,1", "0,1")
    assert not bound_per_task(None, "0,1")
    assert not bound_per_task("0,1", None)


def _t(rank, node_index, role):
    return Task(rank=rank, node=f"n{node_index}", node_index=node_index, local_id=rank, role=role,
                index=0, host="h", port=1)


def test_local_ordinal_skips_ps_and_other_nodes():
    tasks = [_t(0, 0, "ps"), _t(1, 0, "worker"), _t(2, 0, "chief"), _t(3, 1, "worker"), _t(4, 1, "worker")]
    assert local_gpu_ordinal(tasks, 0) == (0, -1)
    assert local_gpu_ordinal(tasks, 1) == (2, 0)
    assert local_gpu_ordinal(tasks, 2) == (2, 1)
    assert local_gpu_ordinal(tasks, 4) == (2, 1)
    assert visible_devices_for(tasks, 0, ("0", "1")) == ""
    assert visible_devices_for(tasks, 1, ("0", "1", "2")) == "0,1"
    assert visible_devices_for(tasks, 2, ("0", "1", "2")) == "2"
    assert visible_devices_for(tasks, 3, ()) == ""
    with pytest.raises(UsageError, match="rank=9"):
        local_gpu_ordinal(tasks, 9)
