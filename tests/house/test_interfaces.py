"""docs/INTERFACES.md against the tree: every `tf_for_slurm.` path it names exists (a module, an old
path of tf_for_slurm/_moved.py, or a name a module defines, or a class's attribute), every module
file it names exists, its public names are the package's, its commands are the CLI's, and its wire
protocol has the messages of supervise/wire.py's docstring.

Modules are read as text (ast), not imported, so this runs in the fast subset without TensorFlow
(runtime/keras_resume.py imports it); only the package's public names are imported, as a user would.
"""

from __future__ import annotations

import ast
import re
from functools import lru_cache
from pathlib import Path
from typing import Optional

import tf_for_slurm
from tf_for_slurm import _moved
from tf_for_slurm.cli import COMMANDS

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "tf_for_slurm"
DOC = ROOT / "docs" / "INTERFACES.md"


def _section(title: str) -> str:
    m = re.search(rf"^## {re.escape(title)}[^\n]*\n(.*?)(?=^## |\Z)", DOC.read_text(), re.S | re.M)
    assert m, f"docs/INTERFACES.md lost its '## {title}' section"
    return m.group(1)


def _module_file(dotted: str) -> Optional[Path]:
    dotted = _moved.MOVED.get(dotted, dotted)
    rel = Path(*dotted.split(".")[1:])
    for path in (PACKAGE / rel.with_suffix(".py"), PACKAGE / rel / "__init__.py"):
        if path.is_file():
            return path
    return None


@lru_cache(maxsize=None)
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text())


def _defined(body: list) -> dict:
    """name -> node, for what a module or class body defines, assigns or imports."""
    out: dict = {}
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out[node.name] = node
        elif isinstance(node, ast.Assign):
            out.update({t.id: node for t in node.targets if isinstance(t, ast.Name)})
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out[node.target.id] = node
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out.update({(a.asname or a.name).split(".")[0]: node for a in node.names})
        elif isinstance(node, ast.If):  # `if TYPE_CHECKING:` and the like
            out.update(_defined(node.body))
    return out


def _missing(dotted: str) -> Optional[str]:
    """Why `dotted` names nothing in the tree (None: it does)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        path = _module_file(".".join(parts[:cut]))
        if path is not None:
            break
    else:
        return "no such module"
    rest, body = parts[cut:], _tree(path).body
    for i, name in enumerate(rest[:2]):  # a module's name, then a class's attribute
        node = _defined(body).get(name)
        if node is None:
            return f"{'.'.join(parts[:cut + i])} defines no {name!r}"
        body = node.body if isinstance(node, ast.ClassDef) else []
    return None


def test_every_tf_for_slurm_path_it_names_exists():
    named = set(re.findall(r"\btf_for_slurm(?:\.\w+)+", DOC.read_text()))
    assert len(named) > 20, named  # the page still names them this way
    wrong = sorted(f"{n}: {why}" for n in named if (why := _missing(n)))
    assert not wrong, "docs/INTERFACES.md names what is not in the tree:\n" + "\n".join(wrong)


def test_every_module_file_it_names_exists():
    files = set(re.findall(r"`([\w/]+\.py)`", DOC.read_text()))
    assert files
    gone = sorted(f for f in files if not (PACKAGE / f).is_file() and not (ROOT / f).is_file())
    assert not gone, "docs/INTERFACES.md names module files that do not exist:\n" + "\n".join(gone)


def test_public_names_are_the_packages_and_import():
    listed = set(re.findall(r"`(\w+)`", _section("Public names")))
    public = set(tf_for_slurm.__all__) | set(tf_for_slurm._LAZY)
    assert listed == public, (f"in the page, not public: {sorted(listed - public)}; "
                              f"public, not in the page: {sorted(public - listed)}")
    for name in sorted(listed):
        assert getattr(tf_for_slurm, name) is not None, name


def test_commands_are_the_clis():
    listed = set(re.findall(r"`tf-slurm ([\w-]+)`", _section("The CLI")))
    assert listed == {c.name for c in COMMANDS}


def test_wire_messages_are_wire_pys():
    doc = {m.split()[0] for m in re.findall(r"`([a-z]+(?: [^`]*)?)`", _section("The supervisors"))
           if re.match(r"[a-z]+( <|$)", m)}
    code = {m.split()[0] for m in re.findall(r"``([a-z][^`]*)``", ast.get_docstring(
        _tree(PACKAGE / "supervise" / "wire.py")) or "")}
    assert len(code) >= 10, code
    assert doc == code, (f"in the page only: {sorted(doc - code)}; in wire.py only: {sorted(code - doc)}")
