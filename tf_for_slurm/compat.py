"""The original tf4slurm call forms: GetServerDictionary's address switch, and the names the
compatibility code used before the layers became folders (re-exported, so old imports work)."""

from __future__ import annotations

from typing import Any, Optional

from tf_for_slurm.errors import UsageError, bad_value
from tf_for_slurm.host.environment import remember_plan, remembered_plan
from tf_for_slurm.plan.task_info import TaskInfo, fill_from_task, info_from_plan, info_from_tf_config, one_of

__all__ = ["TaskInfo", "fill_from_task", "ib_switch", "info_from_plan", "info_from_tf_config", "one_of",
           "remember_plan", "remembered_plan"]


def ib_switch(NoIB: Any = None, InfinyBand: Any = None) -> Optional[bool]:  # noqa: N803 (original names)
    """GetServerDictionary's address switch as `no_ib`: True (host names), False (InfiniBand
    names) or None (neither given: auto).  `InfinyBand=True` is the original's NoIB=False."""
    values = []
    for name, value, flip in (("NoIB", NoIB, False), ("InfinyBand", InfinyBand, True)):
        if value is None:
            continue
        if not (isinstance(value, bool) or (isinstance(value, int) and value in (0, 1))):
            raise UsageError(bad_value(name, value, "True or False"))
        values.append((name, (not bool(value)) if flip else bool(value)))
    if len(values) == 2 and values[0][1] != values[1][1]:
        raise UsageError(f"NoIB={NoIB!r} and InfinyBand={InfinyBand!r}: expected one of them "
                         "(InfinyBand=True means NoIB=False)")
    return values[0][1] if values else None
