"""Scenario values written back as TOML, the way a scenario file spells them (``simulate``
prints the steps of a failing walk as a scenario one can run)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = ["toml_entries", "toml_value"]


def toml_entries(name: str, value: Any) -> list[str]:
    """``name = value`` as written in a scenario file (one process and one status unwrapped)."""
    if name == "processes":
        name, value = "process", value[0] if len(value) == 1 else list(value)
    elif name == "expect_http" and len(value) == 1:
        value = value[0]
    return [f"{name} = {toml_value(value)}"]


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        return f'"{escaped}"'
    if isinstance(value, Mapping):
        inner = ", ".join(f"{_toml_key(k)} = {toml_value(v)}" for k, v in value.items())
        return "{ " + inner + " }" if inner else "{}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {value!r}")


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else toml_value(key)
