"""Paths into the status document (``processes[id=x].state``) for ``expect_status``."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

import attrs

from catalog.errors import BadInputError

_SEGMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)?((?:\[[^\[\]]*\])*)")


@attrs.frozen
class PathPart:
    """``key``, ``[index]``, ``[field=value]`` (first match) or ``[*field=value]`` (all)."""

    kind: str  # "key" | "index" | "match" | "filter"
    key: str = ""
    index: int = 0
    value: str = ""


def parse_path(path: str) -> tuple[PathPart, ...]:
    """Parse ``processes[id=old].state``, ``events[-1].kind``, ``catalog.version``.

    A segment is a key optionally followed by selectors: ``[n]`` (list index, negative from
    the end), ``[field=value]`` (the first list element whose field equals value; the value
    may contain dots) or ``[*field=value]`` (the list of all such elements, e.g. to check a
    ``length``). BadInputError for anything else.
    """
    parts: list[PathPart] = []
    segments: list[str] = []
    depth = 0
    current = ""
    for char in path:
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        if char == "." and depth == 0:
            segments.append(current)
            current = ""
        else:
            current += char
    segments.append(current)
    for segment in segments:
        match = _SEGMENT.fullmatch(segment)
        if not segment or match is None or (match.group(1) is None and not match.group(2)):
            raise BadInputError(f"invalid status path {path!r} at {segment!r}", path=path)
        if match.group(1):
            parts.append(PathPart("key", key=match.group(1)))
        for selector in re.findall(r"\[([^\[\]]*)\]", match.group(2)):
            if re.fullmatch(r"-?\d+", selector):
                parts.append(PathPart("index", index=int(selector)))
            elif "=" in selector and selector.lstrip("*").split("=", 1)[0]:
                field, value = selector.split("=", 1)
                kind = "filter" if field.startswith("*") else "match"
                parts.append(PathPart(kind, key=field.lstrip("*"), value=value))
            else:
                raise BadInputError(
                    f"invalid selector [{selector}] in status path {path!r}: use [n] or "
                    "[field=value]",
                    path=path,
                )
    return tuple(parts)


_MISSING: Final = object()


def resolve_path(document: Any, path: str) -> Any:
    """The value at ``path`` in ``document``; a sentinel :func:`is_missing` recognises when
    it is absent."""
    value = document
    for part in parse_path(path):
        if part.kind == "key":
            if not isinstance(value, Mapping) or part.key not in value:
                return _MISSING
            value = value[part.key]
        elif part.kind == "index":
            if not isinstance(value, list) or not -len(value) <= part.index < len(value):
                return _MISSING
            value = value[part.index]
        elif part.kind == "filter":
            if not isinstance(value, list):
                return _MISSING
            value = [
                item
                for item in value
                if isinstance(item, Mapping) and str(item.get(part.key)) == part.value
            ]
        else:
            if not isinstance(value, list):
                return _MISSING
            value = next(
                (
                    item
                    for item in value
                    if isinstance(item, Mapping) and str(item.get(part.key)) == part.value
                ),
                _MISSING,
            )
            if value is _MISSING:
                return _MISSING
    return value


def is_missing(value: Any) -> bool:
    return value is _MISSING
