"""`tf-slurm node-address --iface IF`: 'NODE ADDRESS' of a network interface of this node.

Why: for TF_SLURM_ADDRESS=file:FILE, one task per node appends its line to a shared file.
"""

from __future__ import annotations

import argparse
import sys

from tf_for_slurm.host import settings
from tf_for_slurm.host.allocation import this_node
from tf_for_slurm.host.network import interface_address
from tf_for_slurm.host.user_files import append_line


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `tf-slurm node-address`."""
    parser.add_argument("--iface", required=True, help="network interface, e.g. ib0")
    parser.add_argument("--append", metavar="FILE", help=f"append the line to FILE (for {settings.ADDRESS}=file:FILE)")


def main(args: argparse.Namespace) -> int:
    """Print 'NODE ADDRESS', or append it to the shared file."""
    line = f"{this_node()} {interface_address(args.iface)}\n"
    if args.append:
        append_line(args.append, line)
    else:
        sys.stdout.write(line)
    return 0
