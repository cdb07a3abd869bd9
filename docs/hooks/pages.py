"""The home page's list of pages, written from the nav.

The nav in ``mkdocs.yml`` is the one page list, in sections by reader (what it is, integrate,
operate, contribute). Each page says what it holds in its front matter (``description:``); the
home page's ``<!-- pages -->`` holds the nav's sections and pages, in order, each with its
description. A page without one fails ``make docs-update``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parents[1]


def page_list(nav: list[Any]) -> str:
    """The nav's pages, each section (a path for one kind of reader) under its heading."""
    lines: list[str] = []
    for entry in nav:
        ((title, value),) = entry.items()
        if isinstance(value, list):
            lines += ["", f"## {title}", ""]
            for page in value:
                ((name, path),) = page.items()
                lines.append(f"- [{name}]({path}): {description(DOCS / path)}")
        elif value != "index.md":
            lines.append(f"- [{title}]({value}): {description(DOCS / value)}")
    return "\n".join(lines).strip()


def description(path: Path) -> str:
    """The ``description:`` of a page's front matter."""
    lines = path.read_text().splitlines()
    if lines and lines[0] == "---":
        for line in lines[1 : lines.index("---", 1)]:
            key, _, value = line.partition(":")
            if key.strip() == "description":
                return value.strip().strip('"')
    raise ValueError(f"{path.name} has no description in its front matter")
