"""Roles: label the step's task slots from a user-ordered ListOfTFTasks or a placement helper."""

from __future__ import annotations

from typing import Optional, Sequence

from .errors import PlanError, bad_value

ROLES = ("ps", "worker", "chief", "evaluator")
ALIASES = {"master": "chief"}  # TF1 called the chief 'master'


def normalise_role(role: object, name: str = "role") -> str:
    """Lower-case, map TF1 names, and reject anything that is not a TensorFlow job name."""
    if not isinstance(role, str):
        raise PlanError(bad_value(name, role, "one of 'ps', 'worker', 'chief' ('master'), 'evaluator'"))
    r = role.strip().lower()
    r = ALIASES.get(r, r)
    if r not in ROLES:
        raise PlanError(bad_value(name, role, "one of 'ps', 'worker', 'chief' ('master'), 'evaluator'"))
    return r
