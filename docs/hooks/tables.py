"""MkDocs hook: the build fails on a table broken by a sentence.

A Markdown table ends at a blank line: a line of prose right after a row renders as one more
(bogus) row, which a strict build does not otherwise see. Standard library only, as every hook
the build loads.
"""

from __future__ import annotations

import itertools
from typing import Any


def broken_tables(page: str) -> list[str]:
    """Each line of prose right after a table row, outside fenced code, with its number."""
    broken, fenced = [], False
    lines = page.splitlines()
    for number, (line, after) in enumerate(itertools.pairwise(lines), start=1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        if fenced or not line.lstrip().startswith("|"):
            continue
        if after.strip() and not after.lstrip().startswith("|"):
            broken.append(f"{number + 1}: {after.strip()[:60]}")
    return broken


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    broken = broken_tables(markdown)
    if broken:
        raise ValueError(
            f"{page.file.src_path}: prose right after a table row (a blank line ends a "
            f"table): {'; '.join(broken)}"
        )
    return markdown
