"""The house rules of the layout: one concept per module, modules and classes of bounded size,
``orchestrator`` imports ``catalog`` and never the reverse, and the durable model keeps no
process machinery."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("catalog", "orchestrator")
MAX_MODULE_LINES = 400
MAX_CLASS_LINES = 300


def _modules() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def _imports(tree: ast.Module) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def test_the_packages_sit_at_the_top_level() -> None:
    """catalog/ and orchestrator/ stand beside tests/ and pyproject.toml (no src/)."""
    assert (ROOT / "pyproject.toml").exists()
    assert not (ROOT / "src").exists()
    for package in PACKAGES:
        assert (ROOT / package / "__init__.py").exists()


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_module_and_class_sizes(path: Path) -> None:
    """No module over 400 lines and no class over 300: a second concept gets its own room."""
    text = path.read_text()
    assert len(text.splitlines()) <= MAX_MODULE_LINES, f"{path} has grown past the limit"
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ClassDef):
            size = (node.end_lineno or node.lineno) - node.lineno + 1
            assert size <= MAX_CLASS_LINES, f"class {node.name} of {path} is {size} lines"


def test_catalog_never_imports_the_orchestrator() -> None:
    """One direction of dependency: the durable model knows nothing of processes."""
    for path in (ROOT / "catalog").rglob("*.py"):
        imports = _imports(ast.parse(path.read_text()))
        assert not any(i.split(".")[0] == "orchestrator" for i in imports), path


def test_catalog_keeps_no_module_level_mutable_state() -> None:
    """No ``global`` statements in the durable model (failpoints are injected by the
    orchestrator, not counted in module globals)."""
    for path in (ROOT / "catalog").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            assert not isinstance(node, ast.Global), f"{path}:{node.lineno} uses global"


def test_docs_link_only_inside_the_repository() -> None:
    """The README and docs/ never point outside the repository (a clone has no ../)."""
    for path in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:
        assert "](../" not in path.read_text(), path
