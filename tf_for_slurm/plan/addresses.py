"""Addresses: which host name or IP other tasks use to reach a node.

Policies (value of TF_SLURM_ADDRESS or the `address` argument):
- `hostname` (NoIB, default): the Slurm node name.
- `template:{host}-ib`: InfiniBand (or any other) name made from the node name; a template with
  no `{host}` gives one fixed host for every node (the local launcher uses `template:127.0.0.1`).
- `iface:ib0` / `file:PATH`: per-node addresses gathered beforehand in node order (mpi4py
  allgather, or `tf-slurm node-address --iface ib0 --append PATH` run once per node), passed in as
  a mapping node -> address.
- `auto` / `auto:{host}-ib`: InfiniBand names when the template's name resolves for EVERY node of
  the step, else host names (`decide_auto`; the templates' and the example's default, IB=auto).
"""

from __future__ import annotations

import ipaddress
import string
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Optional

from tf_for_slurm.errors import PlanError, UsageError, bad_value
from tf_for_slurm.plan.step import is_host_name

DEFAULT_IB_TEMPLATE = "{host}-ib"
_EXPECTED = "'hostname', 'template:{host}-ib', 'iface:NAME', 'file:PATH', 'auto' or 'auto:{host}-ib'"


@dataclass(frozen=True)
class AddressPolicy:
    kind: str  # 'hostname' | 'template' | 'iface' | 'file' | 'auto' (decided by decide_auto)
    arg: str = ""

    @property
    def shared_host(self) -> bool:
        """True when every node maps to the same host, so ports must be unique across the step."""
        return self.kind == "template" and "{host}" not in self.arg


def parse_policy(spec: Optional[str], name: str = "address policy") -> AddressPolicy:
    if spec is None or spec.strip() == "" or spec.strip() == "hostname":
        return AddressPolicy("hostname")
    if spec.strip() == "auto":
        return AddressPolicy("auto")
    kind, sep, arg = spec.strip().partition(":")
    if not sep or kind not in ("template", "iface", "file", "auto") or not arg:
        raise UsageError(bad_value(name, spec, _EXPECTED))
    if kind in ("template", "auto"):
        try:
            fields = [(f, spec_, conv) for _, f, spec_, conv in string.Formatter().parse(arg) if f is not None]
        except ValueError as exc:  # '{host' (unbalanced braces)
            raise UsageError(bad_value(name, spec, f"a template like '{{host}}-ib' ({exc})")) from None
        if any(f != "host" or spec_ or conv for f, spec_, conv in fields):
            raise UsageError(bad_value(name, spec, "a template whose only field is {host}, like '{host}-ib'"))
        sample = arg.format(host="node1")
        if not (is_host_name(sample) or _is_ipv6(sample)):
            raise UsageError(bad_value(name, spec, "a template that makes host names, like '{host}-ib' "
                                       f"(it makes {sample!r} from node1)"))
    return AddressPolicy(kind, arg)


def _is_ipv6(text: str) -> bool:
    try:
        return isinstance(ipaddress.ip_address(text), ipaddress.IPv6Address)
    except ValueError:
        return False


def hosts_for(nodes: Iterable[str], policy: AddressPolicy,
              node_addresses: Optional[Mapping[str, str]] = None) -> dict:
    """node name -> host for each distinct node."""
    unique = list(dict.fromkeys(nodes))
    if policy.kind == "auto":
        raise PlanError("address policy auto: expected it decided first (decide_auto) into host names or a template")
    if policy.kind == "hostname":
        return {n: n for n in unique}
    if policy.kind == "template":
        return {n: policy.arg.format(host=n) for n in unique}
    if node_addresses is None:
        raise PlanError(f"address policy {policy.kind}:{policy.arg}: expected per-node addresses gathered first "
                        "(tf_for_slurm.mpi.plan_from_mpi, or `tf-slurm node-address --append FILE` once per "
                        "node and the address policy file:FILE)")
    missing = [n for n in unique if n not in node_addresses]
    if missing:
        raise PlanError(
            f"address policy {policy.kind}:{policy.arg}: no address for node(s) {missing[:5]}: expected one "
            "line 'NODE ADDRESS' per node (run `tf-slurm node-address` once on every node first)"
        )
    return {n: node_addresses[n] for n in unique}


def parse_address_file(text: str, name: str = "address file") -> dict:
    """Lines 'NODE ADDRESS' -> mapping; later lines win (a rerun of the pre-step overwrites)."""
    out: dict = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 2:
            raise PlanError(f"{name} line {lineno}={line!r}: expected 'NODE ADDRESS'")
        out[parts[0]] = parts[1]
    return out


@dataclass(frozen=True)
class AutoChoice:
    """What `decide_auto` chose, and the one-line reason the job log shows."""

    policy: AddressPolicy
    reason: str

    @property
    def spec(self) -> str:
        return self.policy.kind + (":" + self.policy.arg if self.policy.arg else "")


def decide_auto(nodes: Iterable[str], template: str, resolves: Callable[[str], bool]) -> AutoChoice:
    """InfiniBand names (`template`) if the name of EVERY node resolves, else host names.

    All or nothing, so that a cluster is never half on InfiniBand; a pure function of the node
    list and `resolves`, so every task of a step (same node list, same name service) decides the
    same.  Names are tried in node order and the first that fails decides.
    """
    unique = list(dict.fromkeys(nodes))
    if not unique:
        raise PlanError("address policy auto: expected at least one node")
    names = [template.format(host=n) for n in unique]
    for node, name in zip(unique, names):
        if not resolves(name):
            return AutoChoice(AddressPolicy("hostname"),
                              f"address policy hostname (auto: InfiniBand name {name!r} of node {node} does "
                              f"not resolve, so host names for all {len(unique)} node(s); IB=IB forces "
                              f"template:{template})")
    shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
    return AutoChoice(AddressPolicy("template", template),
                      f"address policy template:{template} (auto: the InfiniBand names of all {len(unique)} "
                      f"node(s) resolve: {shown}; IB=NoIB forces host names)")


