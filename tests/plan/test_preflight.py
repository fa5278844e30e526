"""plan.preflight with plain data: who checks whom, the loopback rule, the chief's verdict, the wire
tokens and the one line."""

from __future__ import annotations

import pytest

from tf_for_slurm.plan import preflight as pf
from tf_for_slurm.plan.cluster import Task
from tf_for_slurm.plan.preflight import Failure
from tf_for_slurm.plan.strategy import step_roles

NAMES = {"address": "ADDR", "ib_template": "IBT", "base_port": "BASE", "timeout": "TMO"}


def layout(per_node, roles=None, host=None):
    """Tasks node by node (node1, node2, ...), ports 2000 + rank; roles default: ps 0, then workers."""
    tasks, rank = [], 0
    roles = roles or ["ps"] + ["worker"] * (sum(per_node) - 1)
    counts: dict = {}
    for ni, count in enumerate(per_node):
        for li in range(count):
            role = roles[rank]
            index = counts.get(role, 0)
            counts[role] = index + 1
            node = f"node{ni + 1}"
            tasks.append(Task(rank, node, ni, li, role, index, host or node, 2000 + rank))
            rank += 1
    return tasks


# -- who checks whom ------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [2, 3, 16, pf.FULL_MESH])
def test_small_steps_check_every_pair(n):
    pairs = pf.Pairs(layout([n]), chief=1)
    for rank in range(n):
        assert pairs.targets(rank) == tuple(r for r in range(n) if r != rank)


@pytest.mark.parametrize("per_node,ps", [([33], 1), ([8] * 8, 1), ([4] * 64, 8), ([16] * 256, 32),
                                         ([3, 5, 1, 7, 20], 2), ([1] * 40, 0), ([2] * 40, 40)])
def test_large_steps_check_a_bounded_sample(per_node, ps):
    n = sum(per_node)
    roles = ["ps"] * ps + ["worker"] * (n - ps)
    tasks = layout(per_node, roles)
    chief = step_roles(tasks, "auto", "strategy").chief_rank
    pairs = pf.Pairs(tasks, chief)
    incoming: dict = {r: set() for r in range(n)}
    ps_ranks = [t.rank for t in tasks if t.role == "ps"]
    for rank in range(n):
        targets = pairs.targets(rank)
        assert rank not in targets and len(set(targets)) == len(targets)
        assert len(targets) <= 1 + pf.PS_SAMPLE + 4  # the bound the docstring says
        assert rank == chief or chief in targets  # everyone reports to the chief
        assert (rank + 1) % n in targets or (rank + 1) % n == rank
        if ps_ranks and len(ps_ranks) <= pf.PS_SAMPLE:
            assert set(ps_ranks) - {rank} <= set(targets)
        for target in targets:
            incoming[target].add(rank)
    assert incoming[chief] == set(range(n)) - {chief}
    for rank in range(n):  # every address is tried
        assert incoming[rank]
    if len(per_node) > 1:  # and every node's name from another node
        for node in {t.node for t in tasks}:
            assert any(tasks[s].node != node for t in tasks if t.node == node for s in incoming[t.rank]), node
    if len(ps_ranks) > pf.PS_SAMPLE:
        assert all(incoming[p] for p in ps_ranks)


# -- the loopback rule ----------------------------------------------------------------------------
@pytest.mark.parametrize("address,loop", [("127.0.0.1", True), ("127.0.1.1", True), ("::1", True),
                                          ("::ffff:127.0.1.1", True), ("10.1.2.3", False), ("fe80::1%eth0", False),
                                          ("node1", False), ("", False)])
def test_loopback_addresses(address, loop):
    assert pf.is_loopback(address) is loop


@pytest.mark.parametrize("own,multi,emulated,kind", [
    (("127.0.1.1",), True, False, pf.LOOPBACK_OWN),  # Debian's line, other nodes must reach it
    (("127.0.1.1",), False, False, None),  # one node: loopback is right
    (("127.0.0.1",), True, True, None),  # emulated nodes (tf-slurm local, the local Slurm harness)
    (("10.0.0.1", "127.0.1.1"), True, False, None),  # the first address is the one connections use
    ((), True, False, None),
])
def test_own_name_on_loopback(own, multi, emulated, kind):
    task = layout([1, 1])[0]
    failure = pf.own_loopback(task, own, multi, emulated, 10.0)
    assert (failure.kind if failure else None) == kind


def test_another_nodes_name_on_loopback_here():
    tasks = layout([1, 1])
    assert pf.here_loopback(tasks[0], tasks[1], ("127.0.1.1",), False, 10.0).kind == pf.LOOPBACK_HERE
    assert pf.here_loopback(tasks[0], tasks[1], ("127.0.1.1",), True, 10.0) is None  # emulated
    assert pf.here_loopback(tasks[0], tasks[1], ("10.0.0.2",), False, 10.0) is None
    same = layout([2])
    assert pf.here_loopback(same[0], same[1], ("127.0.0.1",), False, 10.0) is None  # its own node


def test_names_alone_say_what_they_can():
    tasks = layout([1, 1, 1])
    found = pf.name_failures(tasks[0], tasks, ("10.0.0.1",), {1: ("127.0.1.1",), 2: ()}, {2}, False, 5.0)
    assert [(f.kind, f.target, f.detail) for f in found] == [(pf.LOOPBACK_HERE, 1, ""), (pf.UNRESOLVED, 2, "silent")]
    assert pf.emulated((("port_scope", "step"),)) and not pf.emulated((("port_scope", "node"),))


# -- timing and the chief's verdict ---------------------------------------------------------------
@pytest.mark.parametrize("known,all_in,now,first_bad,listening,want", [
    (False, True, 1.0, None, True, pf.GO),
    (False, False, 1.0, None, True, None),  # reports still coming
    (False, False, 12.5, None, True, pf.STOP),  # the last call: a report is missing
    (True, False, 1.0, 0.9, True, None),  # settling: a better-named failure may come
    (True, False, 1.0, 1.0 - pf.SETTLE, True, pf.STOP),
    (True, True, 1.0, 1.0, True, pf.STOP),  # every report in: at once
    (True, False, 0.0, 0.0, False, pf.STOP),  # nobody can reach the chief's port
])
def test_the_chiefs_verdict(known, all_in, now, first_bad, listening, want):
    assert pf.verdict(known, all_in, now, first_bad, 12.5, listening) == want


def test_timing_rules():
    assert pf.grace(10) == 2.5 and pf.grace(1) == 1.0 and pf.grace(600) == 5.0
    assert pf.next_delay(0.2, 16) == 0.25 and pf.next_delay(0.4, 4096) == 0.5 and pf.next_delay(0.01, 2) == 0.02
    assert pf.silent(4, 1, {0, 3}, 10.0) == Failure(pf.SILENT, 2, 1, 10.0)
    assert pf.silent(5, 0, {}, 10.0).more == 3


def test_the_worst_failure_is_the_cause_not_its_echo():
    echo = Failure(pf.STRANGER, 0, 2, 10.0)
    cause = Failure(pf.IN_USE, 2, 2, 10.0)
    late = Failure(pf.SILENT, 1, 0, 10.0)
    assert pf.worst([late, echo, cause]) == cause and pf.worst([]) is None
    assert pf.worst([Failure(pf.REFUSED, 3, 1, 1.0), Failure(pf.REFUSED, 2, 1, 1.0)]).source == 2
    assert pf.with_view(echo, {2: ("10.0.0.2",)}).there == ("10.0.0.2",)
    assert pf.with_view(echo._replace(there=("1.2.3.4",)), {2: ("10.0.0.2",)}).there == ("1.2.3.4",)


# -- on the wire ----------------------------------------------------------------------------------
ROUND_TRIP = [
    Failure(pf.REFUSED, 1, 2, 10.0, ("10.0.0.2",), ("10.0.0.2", "fe80::1%ib0")),
    Failure(pf.OTHER_TASK, 0, 3, 2.5, (), (), "", 1),
    Failure(pf.UNREACHABLE, 3, 0, 1.0, ("192.168.0.1",), (), "EHOSTUNREACH"),
    Failure(pf.STRANGER, 3, 0, 1.0, detail="bad-proof"),
    Failure(pf.SILENT, 2, 0, 10.0, more=1),
]


@pytest.mark.parametrize("failure", ROUND_TRIP, ids=lambda f: f.kind)
def test_failures_and_reports_cross_the_wire(failure):
    assert pf.parse_failure(pf.failure_tokens(failure), 4) == failure
    report = pf.Report(("10.0.0.9",), failure)
    assert pf.parse_report(pf.report_tokens(report), 4) == report
    assert pf.parse_report(pf.report_tokens(pf.Report((), None)), 4) == pf.Report((), None)


BAD_TOKENS = [
    ["refused", "1", "2", "10", "-", "-", "-", "-1"],  # one short
    ["nonsense", "1", "2", "10", "-", "-", "-", "-1", "0"],
    ["refused", "1", "4", "10", "-", "-", "-", "-1", "0"],  # rank out of the step
    ["refused", "-1", "2", "10", "-", "-", "-", "-1", "0"],
    ["refused", "1", "2", "1e9", "-", "-", "-", "-1", "0"],
    ["refused", "1", "2", "10", "a,b,c,d,e", "-", "-", "-1", "0"],  # too many addresses
    ["refused", "1", "2", "10", "1.2.3.4;rm", "-", "-", "-1", "0"],
    ["refused", "1", "2", "10", "-", "-", "you lose", "-1", "0"],
    ["refused", "1", "2", "10", "-", "-", "\u0663", "-1", "0"],
    ["refused", "\u0661", "2", "10", "-", "-", "-", "-1", "0"],  # a non-ASCII digit
]


@pytest.mark.parametrize("tokens", BAD_TOKENS)
def test_what_is_not_a_failure_is_refused(tokens):
    assert pf.parse_failure(tokens, 4) is None
    assert pf.parse_report(["report", "fail", "-", *tokens], 4) is None


@pytest.mark.parametrize("parts", [[], ["report"], ["report", "ok"], ["report", "ok", "-", "extra"],
                                   ["report", "maybe", "-"], ["hello", "ok", "-"]])
def test_what_is_not_a_report(parts):
    assert pf.parse_report(parts, 4) is None


def test_proofs_bind_the_side_the_ranks_and_the_nonces():
    key = b"k" * 32
    good = pf.mac(key, "connector", "7.0", 1, 2, "a" * 32, "b" * 32)
    assert pf.mac_ok(key, good, "connector", "7.0", 1, 2, "a" * 32, "b" * 32)
    for args in [("listener", "7.0", 1, 2), ("connector", "7.1", 1, 2), ("connector", "7.0", 2, 1),
                 ("connector", "7.0", 1, 3)]:
        assert not pf.mac_ok(key, good, *args, "a" * 32, "b" * 32)
    assert not pf.mac_ok(b"x" * 32, good, "connector", "7.0", 1, 2, "a" * 32, "b" * 32)
    assert not pf.mac_ok(key, "\ufffd" * 64, "connector", "7.0", 1, 2, "a" * 32, "b" * 32)


def test_a_stop_line_is_printable_bounded_ascii():
    assert pf.clean_line(" preflight: x; fix: y ") == "preflight: x; fix: y"
    for bad in ("", "x" * (pf.MAX_TEXT + 1), "caf\u00e9", "a\x1b[2Jb"):
        assert pf.clean_line(bad) is None


# -- the one line ---------------------------------------------------------------------------------
TASKS = layout([2, 1])  # ps 0 and worker 0 on node1, worker 1 on node2
LINES = [
    (Failure(pf.REFUSED, 1, 2, 10.0, ("10.0.0.2",), ("10.0.0.2",)),
     "preflight: worker 0 (rank 1, node1) cannot reach worker 1 (rank 2, node2) at node2:2002: connection refused "
     "for 10 s (node2 is 10.0.0.2 on node1, 10.0.0.2 on node2); fix: ADDR=auto, or an InfiniBand template (IBT); "
     "tasks that start late: a longer TMO"),
    (Failure(pf.NO_ANSWER, 1, 2, 3.0, ("10.0.0.2",)),
     "preflight: worker 0 (rank 1, node1) cannot reach worker 1 (rank 2, node2) at node2:2002: no answer in 3 s "
     "(node2 is 10.0.0.2 on node1, not known on node2); fix: ADDR=auto, or an InfiniBand template (IBT), or a port "
     "range the firewall lets through (BASE)"),
    (Failure(pf.IN_USE, 2, 2, 10.0, detail="EADDRINUSE"),
     "preflight: worker 1 (rank 2, node2) cannot listen on its planned address node2:2002: port 2002 on node2 is "
     "held by a process that is not this step's supervisor (another job?); fix: a port range free on every node "
     "(BASE) or srun --resv-ports"),
    (Failure(pf.LOOPBACK_OWN, 2, 2, 10.0, there=("127.0.1.1",)),
     "preflight: worker 1 (rank 2, node2) cannot be reached at node2:2002 from other nodes: node2 is 127.0.1.1 on "
     "node2, a loopback address (an /etc/hosts line like '127.0.1.1 node2'); fix: ADDR=auto, or an InfiniBand "
     "template (IBT)"),
]


@pytest.mark.parametrize("failure,line", LINES, ids=lambda x: getattr(x, "kind", ""))
def test_the_one_line(failure, line):
    assert pf.failure_line(failure, TASKS, NAMES) == line


@pytest.mark.parametrize("kind", pf.KINDS)
def test_every_kind_has_a_bounded_line_with_a_fix(kind):
    failure = Failure(kind, 1, 2, 10.0, ("fe80::1234:5678:9abc:def0%ib0",) * 4, ("10.0.0.2",) * 4, "", 0, 5)
    line = pf.failure_line(failure, layout([2, 1], host="a-rather-long-infiniband-host-name-" + "x" * 30), NAMES)
    assert line.startswith("preflight: ") and "; fix: " in line and len(line) <= pf.MAX_TEXT


def test_an_address_literal_needs_no_views():
    tasks = layout([1, 1], host="10.9.8.7")
    line = pf.failure_line(Failure(pf.REFUSED, 0, 1, 1.0, ("10.9.8.7",)), tasks, NAMES)
    assert "at 10.9.8.7:2001: connection refused for 1 s; fix:" in line


def test_the_status_file_names_the_checks_failure_as_the_steps_first():
    roles = step_roles(TASKS, "auto", "strategy")
    status = pf.failed_status(TASKS, roles, 2, "preflight: x; fix: y", job="7", step="0", me=roles.chief_rank,
                              mono=100.0, wall=1000.0)
    first = status["first_failure"]
    assert (first["rank"], first["status"], first["detail"]) == (2, pf.STATUS, "preflight: x; fix: y")
    assert status["state"] == "ended" and status["status"] == pf.STATUS
