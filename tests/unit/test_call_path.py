"""One call path (issue 36, point 2): nothing reaches into another object's private methods
to make a call (that only the sender sends: ``tests/unit/test_layers.py``)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _chain(node: ast.expr) -> list[str]:
    """``a.b.c`` as ``["a", "b", "c"]`` (calls and subscripts in between dropped)."""
    names: list[str] = []
    while True:
        if isinstance(node, ast.Attribute):
            names.append(node.attr)
            node = node.value
        elif isinstance(node, ast.Call):
            node = node.func
        elif isinstance(node, ast.Name):
            names.append(node.id)
            return names[::-1]
        else:
            return names[::-1]


def test_no_activity_calls_another_objects_private_methods() -> None:
    wrong = []
    for path in sorted((ROOT / "activities").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                owner = _chain(node.func.value)
                private = node.func.attr.startswith("_") and not node.func.attr.startswith("__")
                if private and len(owner) == 2 and owner[0] == "self":
                    wrong.append(
                        f"{path.relative_to(ROOT)}:{node.lineno} {'.'.join(owner)}.{node.func.attr}"
                    )
    assert not wrong, "\n".join(wrong)
