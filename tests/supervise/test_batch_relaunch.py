"""supervise.batch_relaunch: the loop over steps that lost a node (issue 43), with stand-in steps: what it
counts as planned, what it asks the next step for, what it records and says."""

from typing import Dict, List, Optional, Tuple

import pytest

from tf_for_slurm.plan.relaunch import LOST_STATUS, left_out
from tf_for_slurm.supervise.batch_record import BatchRecord
from tf_for_slurm.supervise.batch_relaunch import Budget, relaunch_while_lost


class FakeStep:
    """A step that ran `roles` on `nodes` (one task each) and ended; `lost`: the nodes whose tasks were lost."""

    def __init__(self, roles: List[str], nodes: List[str], lost: Tuple[str, ...] = (), left_out: int = 0):
        self.ended_at: Optional[float] = 100.0
        self.status: Dict[str, object] = {
            "columns": ["rank", "role", "node", "state"],
            "tasks": [[r, role, node, "lost" if node in lost else "ended"]
                      for r, (role, node) in enumerate(zip(roles, nodes))]}
        if left_out:
            self.status["workers_left_out"] = left_out
        self.retired = False

    def hub_status(self):
        return self.status

    def lost_words(self):
        return False, []

    def retire(self):
        self.retired = True


def _loop(monkeypatch, tmp_path, first: FakeStep, allocation: List[str], min_workers: Optional[int]):
    monkeypatch.setenv("TF_SLURM_JOB_DIR", str(tmp_path))
    said: List[str] = []
    record = BatchRecord("5", 0, 10, None, None, None, say=said.append)
    asked: List[Tuple[Dict[str, str], List[str]]] = []

    def again(extra, srun):
        asked.append((extra, srun))
        return FakeStep(["worker", "ps"], ["node1", "node3"]), 0

    step, status = relaunch_while_lost(first, LOST_STATUS, ["srun", "tf-slurm", "exec"], allocation, record,
                                       Budget(2, min_workers), again, said.append)
    return step, status, record, asked, said


def test_an_allocation_smaller_than_the_list_counts_the_list(monkeypatch, tmp_path):
    """worker,ps,worker,worker listed; the allocation (--nodes=3-4) had room for 3 tasks (1 worker left
    out); node2 lost: going on with 1 of the 3 planned workers, the list's last 2 left out."""
    first = FakeStep(["worker", "ps", "worker"], ["node1", "node2", "node3"], lost=("node2",), left_out=1)
    step, status, record, asked, said = _loop(monkeypatch, tmp_path, first, ["node1", "node2", "node3"], 1)
    assert first.retired and status == 0
    assert [extra for extra, _ in asked] == [{"TF_SLURM_FEWER_WORKERS": "2"}]
    assert {"--nodes=2", "--nodelist=node1,node3", "--exclude=node2", "--ntasks=2"} <= set(asked[0][1]), asked
    assert (record.data["workers_planned"], record.data["workers"], record.data["workers_at_start"]) == (3, 1, 2)
    assert record.fewer_workers() == "with 1 of 3 workers"
    assert any("going on with 1 of 3 workers on node1,node3" in line for line in said), said


def test_a_full_allocation_counts_its_own_workers(monkeypatch, tmp_path):
    first = FakeStep(["worker", "ps", "worker"], ["node1", "node2", "node3"], lost=("node3",))
    _, _, record, asked, said = _loop(monkeypatch, tmp_path, first, ["node1", "node2", "node3"], 1)
    assert [extra for extra, _ in asked] == [{"TF_SLURM_FEWER_WORKERS": "1"}]
    assert (record.data["workers_planned"], record.data["workers"]) == (2, 1)


def test_no_minimum_no_relaunch_short_of_nodes(monkeypatch, tmp_path):
    first = FakeStep(["worker", "ps", "worker"], ["node1", "node2", "node3"], lost=("node2",), left_out=1)
    step, status, record, asked, said = _loop(monkeypatch, tmp_path, first, ["node1", "node2", "node3"], None)
    assert step is first and status == LOST_STATUS and not asked
    assert said == ["lost node2; not relaunched in the allocation: 2 healthy node(s) left of the allocation's 3, "
                    "the step needs 3 (fewer workers: not allowed, TF_SLURM_MIN_WORKERS)"]
    assert (record.data["workers_planned"], record.data["workers"]) == (3, 2)


@pytest.mark.parametrize("value", [2, "2", 2.0, True, -1, None])
def test_left_out_is_read_strictly(value):
    assert left_out({"workers_left_out": value}) == (2 if type(value) is int and value > 0 else 0)
