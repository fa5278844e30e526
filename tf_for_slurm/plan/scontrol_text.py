"""`scontrol show job|node` text as {Key: value}: pure, for `tf-slurm status` (host.scontrol) and a
task's check of the batch host (supervise.batch_host) alike."""

from __future__ import annotations

import re
from typing import Dict

__all__ = ["parse_job"]

_KEY = re.compile(r"(?:(?<=\s)|^)([A-Za-z][A-Za-z0-9_:/]*)=")


def parse_job(text: str) -> Dict[str, str]:
    """`scontrol show job` text -> {Key: value} for the first job; values are tokens, never evaluated
    (a value may hold spaces: it runs to the next Key=)."""
    out: Dict[str, str] = {}
    keys = list(_KEY.finditer(text))
    for i, m in enumerate(keys):
        if m.group(1) == "JobId" and out:
            break
        end = keys[i + 1].start() if i + 1 < len(keys) else len(text)
        out[m.group(1)] = text[m.end():end].strip()
    return out
