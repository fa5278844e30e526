"""docs/ARCHITECTURE.md against the tree: it names every module, and its layer table is setup.cfg's
import-linter layers contract.

Plain data only (files read as text), so this runs in the fast subset.

Which modules must be named: every `.py` file under tf_for_slurm/ (the `_shim/` included), as
`name.py` in the bullet of its folder in "## The modules" (the bullet that starts with `plan/` for
plan/step.py; the one that starts with `tf_for_slurm/` for the package's own files).  An
`__init__.py` that defines no function or class (a folder's re-exports) is left out: the folder's
bullet is its entry.
"""

from __future__ import annotations

import ast
import configparser
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "tf_for_slurm"
DOC = ROOT / "docs" / "ARCHITECTURE.md"


def _section(title: str) -> str:
    text = DOC.read_text()
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert m, f"docs/ARCHITECTURE.md lost its '## {title}' section"
    return m.group(1)


def _needs_naming(path: Path) -> bool:
    if path.name != "__init__.py":
        return True
    tree = ast.parse(path.read_text())
    return any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) for n in ast.walk(tree))


def _modules() -> set:
    """'plan/step.py', 'tf_for_slurm/errors.py', ...: the modules the doc must name."""
    out = set()
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE)
        if "__pycache__" in rel.parts or not _needs_naming(path):
            continue
        folder = "/".join(rel.parts[:-1]) or "tf_for_slurm"
        out.add(f"{folder}/{rel.name}")
    return out


def _documented() -> set:
    """The same form, from the bullets of '## The modules'."""
    out = set()
    for bullet in re.split(r"\n(?=- `)", _section("The modules")):
        m = re.match(r"- `([^`]+)/`:", bullet.strip())
        if m:
            out |= {f"{m.group(1)}/{name}" for name in re.findall(r"`(\w+\.py)`", bullet)}
    return out


def test_every_module_is_named_in_architecture_md():
    missing = sorted(_modules() - _documented())
    assert not missing, ("docs/ARCHITECTURE.md's '## The modules' does not name (in its folder's bullet, "
                         "as `name.py`):\n" + "\n".join(missing))


def test_architecture_md_names_no_module_that_is_gone():
    gone = sorted(m for m in _documented() if not (PACKAGE / m.replace("tf_for_slurm/", "", 1)).is_file())
    assert not gone, "docs/ARCHITECTURE.md names modules that do not exist:\n" + "\n".join(gone)


def _contract() -> tuple:
    """(layers top first, each a set of short names, the independent modules) from setup.cfg."""
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    short = lambda name: name.strip().removeprefix("tf_for_slurm.")  # noqa: E731
    layers = [{short(m) for m in line.split("|")}
              for line in cfg["importlinter:contract:layers"]["layers"].split("\n") if line.strip()]
    independent = {short(m) for m in cfg["importlinter:contract:independent"]["modules"].split("\n") if m.strip()}
    return layers, independent


def _table() -> list:
    """(names in the first cell, may import, never) of each row of the layer table, top first."""
    text = DOC.read_text()
    m = re.search(r"^\| layer[^\n]*\n\|[-| ]+\n((?:\|[^\n]*\n)+)", text, re.M)
    assert m, "docs/ARCHITECTURE.md lost its layer table (a header starting '| layer')"
    rows = []  # a contract layer of several modules may span rows (runtime/, supervise/), in order
    for line in m.group(1).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        names = {n.rstrip("/").removesuffix(".py") for n in re.findall(r"`([^`]+)`", cells[0])}
        rows.append((names, cells[1], cells[2]))
    return rows


def test_layer_table_is_the_layers_contract():
    layers, _ = _contract()
    where = {name: i for i, layer in enumerate(layers) for name in layer}
    rows = _table()
    order = []
    for names, _, _ in rows:
        unknown = names - set(where)
        assert not unknown, f"the layer table names {sorted(unknown)}, not layers of setup.cfg's contract"
        levels = {where[n] for n in names}
        assert len(levels) == 1, f"one row, several layers of setup.cfg's contract: {sorted(names)}"
        order.append(levels.pop())
    assert order == sorted(order), "the layer table's rows are not in the contract's order (top first)"
    named = set().union(*(names for names, _, _ in rows))
    assert named == set(where), f"layers of the contract missing from the table: {sorted(set(where) - named)}"


def test_layer_table_may_import_only_what_is_below():
    layers, _ = _contract()
    where = {name: i for i, layer in enumerate(layers) for name in layer}
    for names, may, _ in _table():
        level = where[next(iter(names))]
        up = sorted(n for n in set(re.findall(r"\w+", may)) & set(where) if where[n] <= level)
        assert not up, f"{sorted(names)} 'may import' {up}: not below it in setup.cfg's layers contract"
