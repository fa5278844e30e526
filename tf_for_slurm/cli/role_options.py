"""The role options (--tasks, --ps, --placement, --chief, --roles-by-component, --strategy, --address).

Why one module: explain, tf-config, env, exec and submit take the same options; declared once here,
they have one type and one help each (`--ps` is an integer >= 0 everywhere).
"""

from __future__ import annotations

import argparse
from typing import Optional

from tf_for_slurm.cli import het
from tf_for_slurm.errors import UsageError
from tf_for_slurm.host import settings
from tf_for_slurm.plan.batch_settings import strict_int
from tf_for_slurm.plan.strategy import STRATEGY_CHOICES

DEFAULTS = f"(default: {settings.TASKS}, else {settings.PS}, else 1 ps)"  # where the roles come from otherwise
TITLE = f"roles {DEFAULTS}"


def ps_count(text: str) -> int:
    """`--ps`'s type: an integer >= 0.  The message names the option and the value; the CLI's parser
    prints it as it is, in one line."""
    try:
        return strict_int(text, "--ps")
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_arguments(parser: argparse.ArgumentParser, *, title: Optional[str] = None, placement: bool = True,
                  strategy: bool = False) -> None:
    """The role options in one group; `placement` and `strategy` for the commands that use them."""
    g = parser.add_argument_group(title or TITLE)
    g.add_argument("--tasks", metavar="ROLES",
                   help="comma-separated roles, one per task, node by node, e.g. ps,worker,worker")
    g.add_argument("--ps", type=ps_count, metavar="N",
                   help=f"number of parameter servers: the first N tasks (default: {settings.PS}, else 1; "
                        "0 for MultiWorkerMirroredStrategy, which has no ps)")
    if placement:
        g.add_argument("--placement", choices=["first", "per-node"], help="'per-node': one ps per node")
    g.add_argument("--chief", action="store_true", help="make the first worker an explicit chief")
    het.add_role_option(g)
    if strategy:
        g.add_argument("--strategy", choices=STRATEGY_CHOICES, default=None,
                       help=f"how the step ends (default: {settings.STRATEGY}, else auto: ps+chief -> pss, "
                            "ps -> tf1, no ps -> mwms)")
    g.add_argument("--address", help="address policy: hostname | auto | template:{host}-ib | iface:ib0 | file:PATH")
