"""The code map, written from each module's docstring.

``<!-- code map -->`` holds a tree of the packages (``catalog``, ``orchestrator``, the client's
``catalog_client``): each package and module with the first sentence of its docstring. The map is
the code's own account, so it cannot name a module that is gone or miss one that was added;
``tests/unit/test_code_map.py`` fails on a module without a docstring.
"""

from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: The packages mapped, from the repository's root.
PACKAGES = (Path("catalog"), Path("orchestrator"), Path("client/catalog_client"))
#: Where descriptions start, and the width they wrap to.
NAME_WIDTH, WIDTH = 26, 80


def code_map() -> list[str]:
    lines: list[str] = []
    for package in PACKAGES:
        lines += _package(ROOT / package, f"{package}/", 0)
    return lines


def modules() -> list[Path]:
    """Every module of the mapped packages."""
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def summary(path: Path) -> str | None:
    """The first sentence of a module's docstring (None: it has none)."""
    doc = ast.get_docstring(ast.parse(path.read_text()))
    if not doc:
        return None
    first = " ".join(doc.split("\n\n", 1)[0].split())
    sentence = re.split(r"(?<=[.!?])\s", first, maxsplit=1)[0]
    return sentence.replace("``", "`")


def _package(path: Path, label: str, depth: int) -> list[str]:
    lines = _entry(label, summary(path / "__init__.py") or "", depth)
    for child in sorted(path.iterdir()):
        if child.is_dir() and (child / "__init__.py").exists():
            lines += _package(child, f"{child.name}/", depth + 1)
        elif child.suffix == ".py" and child.name != "__init__.py":
            lines += _entry(child.stem, summary(child) or "", depth + 1)
    return lines


def _entry(name: str, text: str, depth: int) -> list[str]:
    head = "  " * depth + name
    indent = " " * NAME_WIDTH
    wrapped = textwrap.wrap(text, WIDTH - NAME_WIDTH) or [""]
    if len(head) >= NAME_WIDTH - 1:
        return [head, *(indent + line for line in wrapped)]
    return [head.ljust(NAME_WIDTH) + wrapped[0], *(indent + line for line in wrapped[1:])]
