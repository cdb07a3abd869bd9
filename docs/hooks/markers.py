"""MkDocs hook: generated text sits in the pages' sources, between markers that say its source.

A page does not type a default, a measured figure or a generated block. It names where the
text comes from in an opening marker, and the text itself sits between that marker and its
closing one, written there by ``make docs-update`` (``docs/hooks/generated.py``):

* inline, in prose or a table cell: ``<!-- default MODULE:NAME [SPEC] -->5 s<!-- /default -->``
  (kinds ``default``, ``count``, ``appends``, ``result``, ``alert``: :mod:`values` says what
  each reads);
* a block, alone on its lines: ``<!-- code map -->``, a blank line, the block, a blank line,
  ``<!-- /code map -->`` (the names in :data:`BLOCKS`).

So a raw page reads complete, on a code host or in an editor (the markers are HTML comments,
hidden there), and building the site needs none of the product's code. The build drops the
markers and keeps their text; a marker without its text (written by hand, never generated)
fails it. ``tests/unit/test_manual.py`` fails when a page's text is not what the generators
write now. This module uses only the standard library: the docs-only install has no more.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

#: Markers written inside a line: a kind, then what it names (and an optional format spec).
INLINE = ("default", "count", "appends", "result", "alert")
#: Markers of a generated block, each alone on its line.
BLOCKS = (
    "pages",
    "code map",
    "benchmark figures",
    "benchmark verdicts",
    "benchmark runs",
    "cutover timeline",
    "cutover figures",
    "sustained curve",
    "environment variables",
    "cli reference",
    "error table",
    "openapi reference",
)

_OPENING = re.compile(
    r"<!-- (?:(?P<kind>" + "|".join(INLINE) + r") (?P<args>[^>]*?)|(?P<block>"
    + "|".join(re.escape(b) for b in BLOCKS) + r")) -->"
)  # fmt: skip


@dataclass(frozen=True)
class Marker:
    """One opening marker of a page, with the text after it (None: it has no closing)."""

    kind: str  # a kind of :data:`INLINE`, or a name of :data:`BLOCKS`
    args: str  # what an inline marker names (and its spec); empty for a block
    start: int  # where the opening marker starts
    opened: int  # where it ends: the text starts here
    text: str | None
    end: int  # past the closing marker (past the opening one when there is none)

    @property
    def block(self) -> bool:
        return self.kind in BLOCKS

    @property
    def opening(self) -> str:
        return f"<!-- {self.kind} {self.args} -->" if self.args else f"<!-- {self.kind} -->"

    @property
    def closing(self) -> str:
        return closing(self.kind)


def closing(kind: str) -> str:
    return f"<!-- /{kind} -->"


def markers(page: str) -> Iterator[Marker]:
    """The opening markers of ``page``, in order, each with its text when it is closed."""
    for match in _OPENING.finditer(page):
        kind = match.group("block") or match.group("kind")
        end_marker = closing(kind)
        found = page.find(end_marker, match.end())
        following = page.find("<!-- ", match.end())
        closed = found != -1 and found == following  # nothing else opens before it
        yield Marker(
            kind=kind,
            args=match.group("args") or "",
            start=match.start(),
            opened=match.end(),
            text=page[match.end() : found] if closed else None,
            end=found + len(end_marker) if closed else match.end(),
        )


def written(text: str, block: bool) -> str:
    """Generated ``text`` as it sits between its markers (a block on lines of its own, with
    blank lines around it, as Markdown needs)."""
    return f"\n\n{text.strip()}\n\n" if block else text


def rewritten(page: str, generate: Callable[[Marker], str]) -> str:
    """``page`` with the text of every marker made again by ``generate``."""
    parts, at = [], 0
    for marker in markers(page):
        body = written(generate(marker), marker.block)
        parts += [page[at : marker.start], marker.opening, body, marker.closing]
        at = marker.end
    return "".join(parts) + page[at:]


def unwritten(page: str) -> list[str]:
    """The markers of ``page`` that have no text yet."""
    return [m.opening for m in markers(page) if m.text is None]


def rendered(page: str) -> str:
    """``page`` as the site shows it: the markers dropped, their text kept."""
    parts, at = [], 0
    for marker in markers(page):
        parts += [page[at : marker.start], marker.text or ""]
        at = marker.end
    return "".join(parts) + page[at:]


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    missing = unwritten(markdown)
    if missing:
        raise ValueError(
            f"{page.file.src_path}: {', '.join(missing)} has no text: run make docs-update"
        )
    return rendered(markdown)
