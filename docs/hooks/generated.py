"""The manual's generated text, written into its pages: ``make docs-update`` runs this file.

Every marker of :mod:`markers` gets its text from the code or the benchmarks' results here:
:mod:`values` for figures in prose, :mod:`pages` for the home page's list, :mod:`codemap`,
:mod:`clireference`, :mod:`openapi` and :mod:`benchmarks` for the blocks. ``--check`` rewrites
nothing and exits 1 naming each page whose text is stale (``tests/unit/test_manual.py`` makes
the same check). Unlike the build, this needs the product installed: it reads the code.
"""

from __future__ import annotations

import difflib
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

HOOKS = Path(__file__).resolve().parent
DOCS = HOOKS.parent
ROOT = DOCS.parent


def hook(name: str) -> ModuleType:
    """A module of ``docs/hooks``, loaded from its file (as MkDocs loads a hook)."""
    qualified = f"docs_hooks.{name}"
    if qualified in sys.modules:
        return sys.modules[qualified]
    spec = importlib.util.spec_from_file_location(qualified, HOOKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[qualified] = module  # as MkDocs registers a hook (dataclasses look it up)
    spec.loader.exec_module(module)
    return module


markers = hook("markers")


class _Loader(yaml.SafeLoader):
    """mkdocs.yml's tags (a Python name for the Mermaid fence) read as plain strings."""


_Loader.add_multi_constructor(
    "tag:yaml.org,2002:python/", lambda loader, suffix, node: loader.construct_scalar(node)
)


def nav() -> list[Any]:
    """The nav of ``mkdocs.yml``: the manual's one page list."""
    return list(yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=_Loader)["nav"])


def _blocks() -> dict[str, Callable[[], str]]:
    """What writes each block marker's text."""
    pages, codemap, bench = hook("pages"), hook("codemap"), hook("benchmarks")
    cli, api = hook("clireference"), hook("openapi")
    return {
        "pages": lambda: pages.page_list(nav()),
        "code map": lambda: "```\n" + "\n".join(codemap.code_map()) + "\n```",
        "benchmark figures": lambda: bench.figures(bench.RESULTS),
        "benchmark verdicts": bench.verdicts,
        "benchmark runs": lambda: bench.runs(bench.RESULTS),
        "cutover timeline": lambda: bench.cutover_timeline(bench.latest_cutover()),
        "cutover figures": lambda: bench.cutover_figures(bench.latest_cutover()),
        "sustained curve": lambda: bench.sustained_curve(bench.latest_sustained()),
        "environment variables": cli.variables,
        "cli reference": cli.reference,
        "error table": api.error_table,
        "openapi reference": api.api_reference,
    }


class Generator:
    """The text of each marker, each block made once per run."""

    def __init__(self) -> None:
        self._values = hook("values")
        self._blocks = _blocks()
        self._made: dict[str, str] = {}

    def __call__(self, marker: Any) -> str:
        if marker.block:
            if marker.kind not in self._made:
                self._made[marker.kind] = self._blocks[marker.kind]()
            return self._made[marker.kind]
        name, _, spec = marker.args.partition(" ")
        return str(self._values.value(marker.kind, name, spec or None))

    @property
    def blocks(self) -> set[str]:
        return set(self._blocks)


def pages() -> list[Path]:
    """Every page with markers can hold: the manual's and the README."""
    return [*sorted(DOCS.rglob("*.md")), ROOT / "README.md"]


def stale(generate: Generator | None = None) -> dict[Path, str]:
    """The pages whose generated text is not what the generators write now, each with the
    lines that would change (a unified diff)."""
    generate = generate or Generator()
    found = {}
    for page in pages():
        text = page.read_text()
        new = markers.rewritten(text, generate)
        if new != text:
            diff = difflib.unified_diff(text.splitlines(), new.splitlines(), lineterm="", n=0)
            found[page] = "\n".join(diff)
    return found


def main(argv: list[str]) -> int:
    generate = Generator()
    if "--check" in argv:
        found = stale(generate)
        for path in found:
            print(f"{path.relative_to(ROOT)}: generated text is stale: run make docs-update")
        return 1 if found else 0
    for path in pages():
        text = path.read_text()
        new = markers.rewritten(text, generate)
        if new != text:
            path.write_text(new)
            print(f"rewrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
