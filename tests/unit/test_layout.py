"""The house rules of the layout: one concept per module, modules and classes of bounded size,
``orchestrator`` imports ``catalog`` and never the reverse, and the durable model keeps no
process machinery."""

from __future__ import annotations

import ast
import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("catalog", "orchestrator")
# Every tree whose modules import the project's: their imports obey the privacy rule too.
TREES = ("catalog", "orchestrator", "tests", "benchmarks", "scenarios")
PROJECT = ("catalog", "orchestrator", "support")
# Modules are cut by concept (docs/design.md), not by length; this is only an alarm for a
# module or class that surely holds two concepts.
MAX_MODULE_LINES = 800
MAX_CLASS_LINES = 600


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
    """No module over 800 lines and no class over 600: past that, a module surely holds a
    second concept, which gets its own room."""
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


def _project_modules() -> dict[str, Path]:
    """Every importable project module by dotted name (tests' ``support`` included)."""
    found: dict[str, Path] = {}
    for tree in TREES:
        for path in (ROOT / tree).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[:2] == ["tests", "support"] or parts[0] == "benchmarks":
                parts = parts[1:]
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _private_reaches(path: Path, modules: dict[str, Path]) -> list[str]:
    """``from m import _x`` and ``m._x`` (``m`` a project module) in ``path``."""
    tree = ast.parse(path.read_text())
    aliases: set[str] = set()
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] not in PROJECT:
                continue
            for alias in node.names:
                if _private(alias.name):
                    found.append(f"{path}:{node.lineno} imports {node.module}.{alias.name}")
                elif f"{node.module}.{alias.name}" in modules:
                    aliases.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in PROJECT and alias.asname:
                    aliases.add(alias.asname)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and _private(node.attr)
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
        ):
            found.append(f"{path}:{node.lineno} reaches {node.value.id}.{node.attr}")
    return found


def test_no_module_reaches_another_modules_private_names() -> None:
    """Private means private to its module: a name another module needs is public (and named
    for what it is). No exceptions are listed."""
    modules = _project_modules()
    found = [hit for path in modules.values() for hit in _private_reaches(path, modules)]
    assert not found, "\n".join(found)


def _project_bases(modules: dict[str, Path]) -> dict[str, tuple[set[str], bool]]:
    """Each project class by name: the names of its bases, and whether it is an error (its
    hierarchy is one of types, not of state)."""
    classes: dict[str, tuple[set[str], bool]] = {}
    for path in modules.values():
        if path.parts[len(ROOT.parts)] not in PACKAGES:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases = {ast.unparse(b).split("[")[0].split(".")[-1] for b in node.bases}
                classes[node.name] = (bases, node.name.endswith(("Error", "Exited", "Failed")))
    return classes


# The large objects and the modules of their collaborators.
LARGE_OBJECTS = {
    "Sidecar": ["orchestrator/sidecar"],
    "Shard": ["catalog/shard"],
    "LeaderElection": ["orchestrator/election"],
    "ScenarioRun": ["orchestrator/scenario/runner.py", "orchestrator/scenario/actions.py",
                    "orchestrator/scenario/faults.py"],
    "Walker": ["orchestrator/scenario/simulate"],
    "InvariantChecker": ["orchestrator/scenario/invariants"],
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(LARGE_OBJECTS))
def test_large_objects_hold_collaborators_instead_of_inheriting(name: str) -> None:
    """The sidecar, the shard, the election, the scenario run, the walker and the invariant
    checker hold collaborators: neither they nor any class of their modules inherits a project
    class (errors aside: their hierarchy is one of types, not of state)."""
    modules = _project_modules()
    classes = _project_bases(modules)
    assert not {b for b in classes[name][0] if b in classes}, f"{name} inherits"
    for where in LARGE_OBJECTS[name]:
        base = ROOT / where
        for path in [base] if base.suffix == ".py" else sorted(base.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.ClassDef) or classes.get(node.name, (set(), True))[1]:
                    continue
                inherited = {b for b in classes[node.name][0] if b in classes}
                inherited = {b for b in inherited if not classes[b][1]}
                assert not inherited, f"{path}: {node.name} inherits {inherited}"


def test_no_class_mixes_project_classes() -> None:
    """No class anywhere combines two project classes (a mixin chain by another name)."""
    classes = _project_bases(_project_modules())
    for name, (bases, error) in classes.items():
        mixed = {b for b in bases if b in classes and not classes[b][1]}
        assert error or len(mixed) < 2, f"{name} mixes {mixed}"


def test_the_testing_package_finds_the_repository() -> None:
    """The harness runs children on this source tree and the demo reads the example releases:
    both find them from where the testing package sits."""
    from orchestrator.testing import demo, harness

    assert demo.DEFAULT_RELEASES.is_dir(), demo.DEFAULT_RELEASES
    pythonpath = harness.child_environment()["PYTHONPATH"].split(os.pathsep)
    assert pythonpath[0] == str(ROOT), pythonpath


#: Where a tracked binary file may live: test fixtures and the manual's images.
BINARY_HOMES = ("tests/fixtures/", "docs/")
IMAGES = (".png", ".jpg", ".jpeg", ".svg", ".gif", ".webp")


def test_no_binary_is_tracked_outside_fixtures_and_images() -> None:
    """Wheels, archives and builds are installed by the project's own files, never committed:
    a tracked file with a NUL byte may only be a test fixture or one of the docs' images."""
    tracked = (
        subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
        .stdout.decode()
        .split("\0")
    )
    checked, binaries = 0, []
    for name in filter(None, tracked):
        path = ROOT / name
        if not path.is_file():
            continue
        checked += 1
        if b"\0" not in path.read_bytes()[:8192]:
            continue
        allowed = name.startswith(BINARY_HOMES[0]) or (
            name.startswith(BINARY_HOMES[1]) and name.lower().endswith(IMAGES)
        )
        if not allowed:
            binaries.append(name)
    assert checked > 100, checked
    assert binaries == [], f"binary files tracked outside {BINARY_HOMES}: {binaries}"


def test_under_ci_a_skip_for_a_missing_part_is_a_failure() -> None:
    from support.required import skip_is_a_failure

    chromium = "no Chromium here: apt-get install chromium (.ci/run installs it)"
    netns = "partitions need network namespaces: nft is not installed"
    assert skip_is_a_failure(chromium, {"CI": "true"})
    assert skip_is_a_failure(netns, {"CI": "true"})
    assert skip_is_a_failure("promtool is not installed", {"CI": "true"})
    assert not skip_is_a_failure(chromium, {})
    assert not skip_is_a_failure("CATALOG_UPGRADE_TEST_ZK is not set", {"CI": "true"})


def test_the_readme_is_a_short_guide() -> None:
    """What it is, the two commands, one screen, links: the manual is the site under docs/."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.encode()) <= 15 * 1024, len(readme.encode())
    assert "make demo" in readme and "make test" in readme
    for page in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (ROOT / page).is_file(), page
