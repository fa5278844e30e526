"""Roles, placement helpers, port policies and address policies, with plain data."""

import socket

import pytest

from tf_for_slurm.host.network import check_resolvable
from tf_for_slurm.host.environment import PLAN_NAMES
from tf_for_slurm.host.settings import ADDRESS

# the names the host layer gives assign_ports for its messages
PORT_NAMES = {"base_port_name": PLAN_NAMES["base_port"], "reserved_name": PLAN_NAMES["reserved"]}
from tf_for_slurm.plan.addresses import hosts_for, parse_address_file, parse_policy
from tf_for_slurm.host.environment import noib_address
from tf_for_slurm.errors import PlanError, UsageError
from tf_for_slurm.plan.ports import WINDOW_HIGH, WINDOW_LOW, assign_ports, block_size, window_base
from tf_for_slurm.host.network import ensure_bindable
from tf_for_slurm.plan.roles import first_ps, normalise_role, ps_per_node, roles_from_list, with_chief


@pytest.mark.parametrize("role,expected", [("ps", "ps"), ("worker", "worker"), ("chief", "chief"),
                                           ("master", "chief"), ("evaluator", "evaluator"), (" PS ", "ps")])
def test_every_role(role, expected):
    assert normalise_role(role) == expected


def test_list_of_tf_tasks_keeps_user_order():
    roles = roles_from_list(["worker", "ps", "worker", "master"], 4)
    assert roles == ("worker", "ps", "worker", "chief")
    assert roles_from_list("ps,worker", 2) == ("ps", "worker")


def test_placement_helpers():
    assert first_ps(5) == ("ps", "worker", "worker", "worker", "worker")
    assert first_ps(5, 2) == ("ps", "ps", "worker", "worker", "worker")
    assert first_ps(4, 1, chief=True) == ("ps", "chief", "worker", "worker")
    assert first_ps(3, 0) == ("worker",) * 3
    assert ps_per_node((2, 3, 1)) == ("ps", "worker", "ps", "worker", "worker", "ps")
    assert ps_per_node((2, 2), chief=True) == ("ps", "chief", "ps", "worker")
    assert with_chief(("ps", "worker", "worker")) == ("ps", "chief", "worker")
    assert with_chief(("chief", "worker")) == ("chief", "worker")


BAD_ROLES = [
    (lambda: roles_from_list(["ps", "wrker"], 2), "ListOfTFTasks[1]='wrker': expected one of 'ps', 'worker'"),
    (lambda: roles_from_list(["ps", 3], 2), "ListOfTFTasks[1]=3"),
    (lambda: roles_from_list(["ps", "worker"], 3), "ListOfTFTasks has 2 roles: expected one per task of the step (3 tasks)"),
    (lambda: roles_from_list(["ps", "ps"], 2), "expected at least one 'worker'"),
    (lambda: roles_from_list(["chief", "master", "worker"], 3), "expected at most one 'chief', got 2"),
    (lambda: roles_from_list(["evaluator", "evaluator", "worker"], 3), "expected at most one 'evaluator'"),
    (lambda: first_ps(2, 2), "ps=2: expected at most 1"),
    (lambda: first_ps(3, -1), "ps=-1: expected a number of parameter servers >= 0"),
    (lambda: ps_per_node((1, 1)), "placement='per-node' gives roles"),
    (lambda: with_chief(("ps",)), "expected a 'worker' to turn into the chief"),
]


@pytest.mark.parametrize("call,message", BAD_ROLES)
def test_bad_roles(call, message):
    with pytest.raises(PlanError) as info:
        call()
    assert message in str(info.value)


def test_window_is_outside_the_ephemeral_range_and_derived_from_job_and_step():
    for job in range(1, 3000, 7):
        base = window_base(str(job), "0", 8)
        assert WINDOW_LOW <= base and base + block_size(8) <= WINDOW_HIGH
    assert window_base("100", "0", 4) != window_base("101", "0", 4)
    assert window_base("100", "0", 4) != window_base("100", "1", 4)
    assert window_base("100", "0", 4) == window_base("100", "0", 4)


def test_consecutive_jobs_never_collide():
    width = 8
    bases = {window_base(str(j), "0", width) for j in range(5000, 5000 + (WINDOW_HIGH - WINDOW_LOW) // block_size(width))}
    assert len(bases) == (WINDOW_HIGH - WINDOW_LOW) // block_size(width)


def test_array_and_non_numeric_job_ids():
    assert window_base("123_4", "0", 2) != window_base("123_5", "0", 2)
    assert WINDOW_LOW <= window_base("local-abc", "0", 2) < WINDOW_HIGH


def test_port_policies():
    window = assign_ports([0, 1, 0], job_id="9", step_id="0")
    assert window.policy == "window" and window.ports[0] == window.ports[2] != window.ports[1]
    assert set(window.ports).isdisjoint(a for a in window.aux_ports)
    reserved = assign_ports([0, 1, 0], job_id="9", step_id="0", reserved=(13000, 13001, 13002, 13003))
    assert reserved.ports == (13000, 13001, 13000) and reserved.aux_ports == (13002, 13003, 13002)
    short = assign_ports([0, 1], job_id="9", step_id="0", reserved=(13000, 13001))
    assert short.ports == (13000, 13001) and short.aux_ports == (None, None)
    fixed = assign_ports([0, 1, 2], job_id="9", step_id="0", base_port=30000)
    assert fixed.ports == (30000, 30001, 30002) and fixed.aux_ports == (30003, 30004, 30005)


def test_bad_ports():
    with pytest.raises(PlanError, match="SLURM_STEP_RESV_PORTS holds 1 ports: expected at least 2"):
        assign_ports([0, 1], job_id="1", step_id="0", reserved=(13000,), **PORT_NAMES)
    with pytest.raises(PlanError, match="TF_SLURM_BASE_PORT=80: expected a port in 1024-"):
        assign_ports([0], job_id="1", step_id="0", base_port=80, **PORT_NAMES)
    with pytest.raises(PlanError, match="tasks per host: expected at most"):
        window_base("1", "0", 10000)


def test_taken_port_names_port_and_task():
    with socket.socket() as sock:
        sock.bind(("", 0))
        sock.listen()
        port = sock.getsockname()[1]
        with pytest.raises(PlanError) as info:
            ensure_bindable(port, "worker:1 (node2)")
    assert f"port of worker:1 (node2)={port}: expected a free TCP port on this host (already in use" in str(info.value)
    ensure_bindable(port, "worker:1")  # free again


def test_address_policies():
    assert hosts_for(["n1", "n2", "n1"], parse_policy(None)) == {"n1": "n1", "n2": "n2"}
    assert hosts_for(["n1"], parse_policy("template:{host}-ib")) == {"n1": "n1-ib"}
    assert hosts_for(["n1"], parse_policy("template:{host}i.fabric")) == {"n1": "n1i.fabric"}
    shared = parse_policy("template:127.0.0.1")
    assert shared.shared_host and hosts_for(["a", "b"], shared) == {"a": "127.0.0.1", "b": "127.0.0.1"}
    assert noib_address(True, {}) == "hostname" and noib_address(False, {}) == "template:{host}-ib"
    assert noib_address(False, {"TF_SLURM_IB_TEMPLATE": "{host}i"}) == "template:{host}i"
    assert noib_address(False, {"TF_SLURM_ADDRESS": "template:127.0.0.1"}) == "template:127.0.0.1"
    table = parse_address_file("# gathered\nn1 10.0.0.1\nn2 10.0.0.2\nn1 10.0.0.9\n")
    assert hosts_for(["n1", "n2"], parse_policy("file:/x"), table) == {"n1": "10.0.0.9", "n2": "10.0.0.2"}
    assert hosts_for(["n1"], parse_policy("iface:ib0"), {"n1": "10.1.1.1"}) == {"n1": "10.1.1.1"}


BAD_ADDRESSES = [
    (lambda: parse_policy("ib", ADDRESS), UsageError, "TF_SLURM_ADDRESS='ib': expected 'hostname', 'template:{host}-ib'"),
    (lambda: parse_policy("template:{node}-ib"), UsageError, "a template whose only field is {host}"),
    (lambda: parse_policy("iface:", ADDRESS), UsageError, "TF_SLURM_ADDRESS='iface:'"),
    (lambda: hosts_for(["n1", "n2"], parse_policy("file:/x"), {"n1": "1.2.3.4"}), PlanError, "no address for node(s) ['n2']"),
    (lambda: hosts_for(["n1"], parse_policy("iface:ib0")), PlanError, "expected per-node addresses"),
    (lambda: parse_address_file("n1\n"), PlanError, "line 1='n1': expected 'NODE ADDRESS'"),
    (lambda: check_resolvable("no-such-host.invalid", "worker:0"), PlanError, "'no-such-host.invalid' of worker:0 does not resolve"),
]


@pytest.mark.parametrize("call,kind,message", BAD_ADDRESSES)
def test_bad_addresses(call, kind, message):
    with pytest.raises(kind) as info:
        call()
    assert message in str(info.value)
