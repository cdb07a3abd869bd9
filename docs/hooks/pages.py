"""MkDocs hook: the home page's list of pages, written from the nav.

The nav in ``mkdocs.yml`` is the one page list. Each page says what it holds in its front
matter (``description:``); the home page's ``<!-- pages -->`` becomes the nav's pages, in order,
each with its description. A page without one fails the build.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

MARKER = "<!-- pages -->"
DOCS = Path(__file__).resolve().parents[1]


def on_page_markdown(markdown: str, config: Any, **_: Any) -> str:
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, page_list(config["nav"]))


def page_list(nav: list[Any]) -> str:
    lines = []
    for entry in nav:
        ((title, path),) = entry.items()
        if path == "index.md":
            continue
        lines.append(f"- [{title}]({path}): {description(DOCS / path)}")
    return "\n".join(lines)


def description(path: Path) -> str:
    """The ``description:`` of a page's front matter."""
    lines = path.read_text().splitlines()
    if lines and lines[0] == "---":
        for line in lines[1 : lines.index("---", 1)]:
            key, _, value = line.partition(":")
            if key.strip() == "description":
                return value.strip().strip('"')
    raise ValueError(f"{path.name} has no description in its front matter")
