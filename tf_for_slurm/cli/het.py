"""The CLI's heterogeneous-job options: `--roles-by-component` and the offline `--component`."""

from __future__ import annotations

import argparse
from typing import Optional

from tf_for_slurm.errors import UsageError
from tf_for_slurm.host import settings
from tf_for_slurm.plan.cluster import ClusterPlan
from tf_for_slurm.plan.hetjob import offline_het_step
from tf_for_slurm.plan.step import SlurmStep, offline_step


def add_role_option(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--roles-by-component", metavar="ROLES",
                       help="heterogeneous job: one role per component of the step, e.g. ps,worker "
                            f"(default: {settings.COMPONENT_ROLES})")


def add_offline_option(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--component", action="append", metavar="NODELIST:TASKS_PER_NODE",
                       help="one heterogeneous-job component (repeat, component 0 first), e.g. 'cpu[1-2]:1' "
                            "--component 'gpu[01-04]:4'; instead of --nodelist")


def component_roles(args: argparse.Namespace) -> Optional[list]:
    """--roles-by-component split into roles, or None."""
    value = getattr(args, "roles_by_component", None)
    if value is None:
        return None
    roles = [r for r in value.split(",") if r.strip()]
    if not roles:
        raise UsageError(f"--roles-by-component={value!r}: expected roles like 'ps,worker'")
    return roles


def offline(args: argparse.Namespace) -> Optional[SlurmStep]:
    """The step described by --nodelist or --component (mutually exclusive), or None in a job."""
    components = getattr(args, "component", None)
    nodelist = getattr(args, "nodelist", None)
    if components and (nodelist or getattr(args, "tasks_per_node", None)):
        raise UsageError("--component given with --nodelist/--tasks-per-node: expected one way to describe the step")
    if components:
        return offline_het_step(components, args.job_id, args.step_id)
    if nodelist:
        return offline_step(nodelist, args.tasks_per_node or "1", args.job_id, args.step_id)
    return None


def component_column(plan: ClusterPlan, rows: list) -> list:
    """Add each task's component to `rows` when the plan has components; the table's extra column."""
    if not plan.components:
        return []
    for row in rows:
        row["component"] = plan.components[row["rank"]]
    return ["component"]
