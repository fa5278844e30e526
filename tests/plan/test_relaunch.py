"""plan.relaunch: which nodes a step lost, and whether batch-step starts it again inside the allocation."""

import pytest

from tf_for_slurm.plan.batch_settings import srun_ended_ranks
from tf_for_slurm.plan.relaunch import NoRelaunch, Relaunch, decide, lost_nodes, step_nodes, step_tasks
from tf_for_slurm.plan.requeue import LOST_STATUS

ROWS = [[0, "ps", 0, "node1", "running", None, 0, None], [1, "worker", 0, "node2", "running", None, 0, None],
        [2, "worker", 1, "node3", "running", None, 0, None], [3, "worker", 2, "node3", "running", None, 0, None]]


def _status(state="ended", states=None, first=None, chief=1):
    rows = [list(r) for r in ROWS]
    for rank, word in (states or {}).items():
        rows[rank][4] = word
    return {"state": state, "chief": chief, "first_failure": first, "tasks": rows}


@pytest.mark.parametrize("lines,ranks", [
    ([], set()),
    (["srun: error: node1: task 0: Exited with exit code 69\n"], {0}),
    (["srun: error: node[2-3]: tasks 1-2,4: Exited with exit code 69"], {1, 2, 4}),
    (["srun: error: node2: task 1: Killed", "srun: error: Timed out waiting for job step"], {1}),
    (["srun: error: node2: tasks 0-99999999999: Killed"], set()),  # bounded
    (["srun: launch/slurm: _step_signal: Terminating StepId=7.0"], set()),
])
def test_srun_ended_ranks(lines, ranks):
    assert srun_ended_ranks(lines) == ranks


@pytest.mark.parametrize("status,errors,lost", [
    (None, [], ()),
    (_status(), [], ()),  # ended, nothing lost
    (_status(states={0: "lost"}, first={"rank": 0, "node": "node1", "status": LOST_STATUS}), [], ("node1",)),
    # lost through silence: the hub told it to end (state 'ended'), its failure names it
    (_status(states={0: "ended"}, first={"rank": 0, "node": "node1", "status": LOST_STATUS}), [], ("node1",)),
    # a ps whose own program exited 69 (it lost a worker) was not lost itself
    (_status(states={0: "exited"}, first={"rank": 0, "node": "node1", "status": LOST_STATUS}), [], ()),
    (_status(states={2: "lost", 3: "lost"}), [], ("node3",)),  # gone-without workers, one node
    # the hub never wrote the end: its node went with it ...
    (_status("running"), ["srun: error: node1: task 0: Exited with exit code 69"], ("node2",)),
    # ... unless srun saw its task end (the hub failed, its node did not)
    (_status("running"), ["srun: error: node2: task 1: Exited with exit code 1"], ()),
    # a hub that decided (ending its own command when srun was ended) was alive
    (_status("ending", states={0: "lost"}, first={"rank": 0, "node": "node1", "status": LOST_STATUS}),
     ["srun: error: node3: tasks 2-3: Exited with exit code 69"], ("node1",)),
])
def test_lost_nodes(status, errors, lost):
    assert lost_nodes(status, errors) == lost


def test_step_nodes_in_rank_order():
    assert step_nodes(_status()) == ("node1", "node2", "node3") and step_nodes(None) == ()


ALLOC = ("node1", "node2", "node3", "node4")
STEP = ("node1", "node2", "node3")


@pytest.mark.parametrize("status,stopped,lost,ran_on,before,used,budget,want", [
    (LOST_STATUS, False, ("node1",), STEP, (), 0, 2,
     Relaunch(("node2", "node3", "node4"), ("node1",), ("node4",), 1)),
    # a second loss during the relaunch: the first lost node is never used again
    (LOST_STATUS, False, ("node4",), ("node2", "node3", "node4"), ("node1",), 1, 2, "2 healthy node(s) left of the allocation's 4, the step needs 3"),
    (LOST_STATUS, False, ("node3",), ("node2", "node3"), ("node1",), 1, 2,
     Relaunch(("node2", "node4"), ("node3",), ("node4",), 2)),
    (LOST_STATUS, False, ("node1",), STEP, (), 2, 2, "budget is spent (2 of 2"),
    (LOST_STATUS, True, ("node1",), STEP, (), 0, 2, "a stop was asked for"),
    (LOST_STATUS, False, ("node1",), (), (), 0, 2, "nodes are unknown"),
    (LOST_STATUS, False, (), STEP, (), 0, 2, ""),  # nothing named lost: the requeue decision alone
    (1, False, ("node1",), STEP, (), 0, 2, ""),  # the program's own failure
    (0, False, (), STEP, (), 0, 2, ""),
    (None, False, ("node1",), STEP, (), 0, 2, ""),  # decided while it still ran
])
def test_decide(status, stopped, lost, ran_on, before, used, budget, want):
    got = decide(status, stopped, lost, ran_on, ALLOC, before, used, budget, limit_name="TF_SLURM_MAX_RELAUNCHES")
    if isinstance(want, Relaunch):
        assert got == want
    else:
        assert isinstance(got, NoRelaunch) and want in got.reason and (got.reason == "") == (want == ""), got


# issue 43: fewer workers when no spare is left, if --min-workers allows
MWMS3 = (("worker", "node1"), ("worker", "node2"), ("worker", "node3"))
PSS = (("chief", "node1"), ("ps", "node2"), ("worker", "node3"), ("worker", "node4"))
TWO_PER_NODE = (("ps", "node1"), ("worker", "node1"), ("worker", "node2"), ("worker", "node2"),
                ("worker", "node3"), ("worker", "node3"))


@pytest.mark.parametrize("lost,ran_on,alloc,tasks,min_workers,want", [
    # 3 workers, no spare, node2 lost: 2 workers on node1,node3
    (("node2",), STEP, STEP, MWMS3, 2, Relaunch(("node1", "node3"), ("node2",), (), 1, ntasks=2, workers=2)),
    # the chief's node lost: the step starts on the others; roles are placed again in the user's order
    (("node1",), STEP, STEP, MWMS3, 1, Relaunch(("node2", "node3"), ("node1",), (), 1, ntasks=2, workers=2)),
    # below the minimum: the requeue decision
    (("node2",), STEP, STEP, MWMS3, 3, "with fewer workers 2 of 3 would be left, below --min-workers 3"),
    # not asked for (the default): as before, with why
    (("node2",), STEP, STEP, MWMS3, None, "the step needs 3 (fewer workers: not allowed, --min-workers)"),
    (("node2",), STEP, STEP, (), 1, "the step's tasks are unknown"),
    # the ps's node lost: the ps is kept (placed again), a worker goes
    (("node2",), ("node1", "node2", "node3", "node4"), ("node1", "node2", "node3", "node4"), PSS, 1,
     Relaunch(("node1", "node3", "node4"), ("node2",), (), 1, ntasks=3, workers=1)),
    # two tasks a node: a lost node costs two
    (("node3",), STEP, STEP, TWO_PER_NODE, 3, Relaunch(("node1", "node2"), ("node3",), (), 1, ntasks=4, workers=3)),
    (("node3",), STEP, STEP, TWO_PER_NODE, 4, "3 of 5 would be left"),
    # two nodes lost, one spare: the spare takes the first lost node's tasks, the second's are left out
    (("node2", "node3"), STEP, ("node1", "node2", "node3", "node4"), MWMS3, 2,
     Relaunch(("node1", "node4"), ("node2", "node3"), ("node4",), 1, ntasks=2, workers=2)),
    # no worker may be left at all
    (("node1", "node2", "node3"), STEP, STEP, MWMS3, 0, "0 of 3 would be left"),
])
def test_decide_with_fewer_workers(lost, ran_on, alloc, tasks, min_workers, want):
    got = decide(LOST_STATUS, False, lost, ran_on, alloc, (), 0, 2, tasks=tasks, min_workers=min_workers)
    if isinstance(want, Relaunch):
        assert got == want
    else:
        assert isinstance(got, NoRelaunch) and want in got.reason, got


def test_enough_nodes_never_means_fewer_workers():
    got = decide(LOST_STATUS, False, ("node1",), STEP, ALLOC, (), 0, 2, tasks=MWMS3, min_workers=1)
    assert got == Relaunch(("node2", "node3", "node4"), ("node1",), ("node4",), 1)


def test_step_tasks_in_rank_order():
    status = {"columns": ["rank", "role", "node"], "tasks": [[0, "worker", "node1"], [1, "ps", "node2"]]}
    assert step_tasks(status) == (("worker", "node1"), ("ps", "node2")) and step_tasks(None) == ()
