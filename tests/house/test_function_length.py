"""No function or method over MAX_FUNCTION_LINES lines (def line to last line), so each one says
one thing and has a name for it.  Plain data: the package's files parsed with ast.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, Iterator, Tuple

PACKAGE = Path(__file__).resolve().parents[2] / "tf_for_slurm"
MAX_FUNCTION_LINES = 60

# Functions still over the limit while someone splits them, as "path/under/tf_for_slurm.py:Qual.name".
# Empty: Hub.run and Spoke.run (supervise/hub.py, supervise/spoke.py) were split in 106e60b, and
# no supervise/batch_step.py function is over.  Add a name here only with the work that removes it;
# test_allowed_names_are_still_long makes a stale entry fail, so the set only shrinks.
ALLOWED: frozenset = frozenset()


def _functions(tree: ast.AST, prefix: str = "") -> Iterator[Tuple[str, int]]:
    """(qualified name, lines) of every function and method, nested ones included (outer.inner)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            name = prefix + node.name
            if not isinstance(node, ast.ClassDef):
                assert node.end_lineno is not None
                yield name, node.end_lineno - node.lineno + 1
            yield from _functions(node, name + ".")
        else:
            yield from _functions(node, prefix)


def _lengths() -> Dict[str, int]:
    return {f"{path.relative_to(PACKAGE).as_posix()}:{name}": lines
            for path in sorted(PACKAGE.rglob("*.py"))
            for name, lines in _functions(ast.parse(path.read_text(), str(path)))}


def test_functions_stay_short():
    long = {name: lines for name, lines in _lengths().items() if lines > MAX_FUNCTION_LINES and name not in ALLOWED}
    assert not long, f"over {MAX_FUNCTION_LINES} lines: split into named parts:\n" + "\n".join(
        f"  tf_for_slurm/{name}: {lines} lines" for name, lines in sorted(long.items()))


def test_allowed_names_are_still_long():
    lengths = _lengths()
    stale = sorted(name for name in ALLOWED if lengths.get(name, 0) <= MAX_FUNCTION_LINES)
    assert not stale, f"split or gone: remove from ALLOWED: {stale}"


def test_the_walk_sees_methods_and_nested_functions():
    tree = ast.parse("class A:\n    def m(self):\n        def inner():\n            pass\n\n\ndef f():\n    pass\n")
    assert dict(_functions(tree)) == {"A.m": 3, "A.m.inner": 2, "f": 2}
