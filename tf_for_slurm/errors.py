"""One exception family, so the CLI can turn any of them into one line and exit code 2."""

from __future__ import annotations


class TfSlurmError(Exception):
    """Base of every error tf_for_slurm raises on purpose.

    The message names the variable or argument, the value seen, and what was expected.
    """

    exit_code = 2


class SlurmEnvError(TfSlurmError):
    """The Slurm (or mpi4py, or launcher) environment is missing or malformed."""


class PlanError(TfSlurmError):
    """The requested roles, ports or addresses cannot make a valid cluster plan."""


class UsageError(TfSlurmError):
    """A command-line argument or a function argument is wrong."""


def bad_value(name: str, value: object, expected: str) -> str:
    """Format the standard one-line message: what, the value seen, what was expected."""
    return f"{name}={value!r}: expected {expected}"
