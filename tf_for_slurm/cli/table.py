"""A plain-text table for people (no dependency, aligned columns)."""

from __future__ import annotations

from typing import Optional, Sequence


def render_table(rows: Sequence[dict], columns: Sequence[str], mark: Optional[str] = None) -> str:
    """Columns left-aligned and as wide as their widest cell; rows where row[mark] is true get a '*'."""
    cells = [[str(c) for c in columns]] + [[str(r[c]) for c in columns] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    flags = [" "] + ["*" if mark and r.get(mark) else " " for r in rows]
    return "\n".join(
        (flag + " " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths))).rstrip()
        for flag, row in zip(flags, cells)
    )
