"""Checks of a step's field values, one per field name."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Final

from orchestrator.scenario.format.values import WAIT_STATES


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


Checker = Callable[[Any], str | None]  # an error message, or None when the value is fine


def number_field(minimum: float) -> Checker:
    def check(value: Any) -> str | None:
        if not _is_number(value) or value < minimum:
            return f"must be a number >= {minimum:g}, not {value!r}"
        return None

    return check


def _integer(minimum: int, maximum: int | None = None) -> Checker:
    def check(value: Any) -> str | None:
        if not _is_int(value) or value < minimum or (maximum is not None and value > maximum):
            bound = f" and <= {maximum}" if maximum is not None else ""
            return f"must be an integer >= {minimum}{bound}, not {value!r}"
        return None

    return check


def _string(value: Any) -> str | None:
    return None if isinstance(value, str) and value else f"must be a non-empty string: {value!r}"


def boolean_field(value: Any) -> str | None:
    return None if isinstance(value, bool) else f"must be true or false, not {value!r}"


def _rate(value: Any) -> str | None:
    if value == "off" or (_is_number(value) and value > 0):
        return None
    return f'must be a positive number of rows per second or "off", not {value!r}'


def _rows(value: Any) -> str | None:
    if not isinstance(value, list) or not all(isinstance(r, dict) for r in value):
        return 'must be an array of tables (rows), e.g. [{ id = 1, name = "a" }]'
    return None


def _http(value: Any) -> str | None:
    codes = value if isinstance(value, list) else [value]
    if not codes or not all(_is_int(c) and 100 <= c <= 599 for c in codes):
        return f"must be an HTTP status (100-599) or an array of them, not {value!r}"
    return None


def _any(_value: Any) -> str | None:
    return None


def _collection(value: Any) -> str | None:
    if not isinstance(value, str) or value.count(".") != 1 or "" in value.split("."):
        return f"must name a collection as SCHEMA.NAME, not {value!r}"
    return None


def _process_names(value: Any) -> str | None:
    names = value if isinstance(value, list) else [value]
    if not names or not all(isinstance(n, str) and _PROCESS_NAME.fullmatch(n) for n in names):
        return (
            f"must be a process name (letters, digits, '-', '_'; up to 40) or, for start, an "
            f"array of them, not {value!r}"
        )
    return None


def _state(value: Any) -> str | None:
    if value not in WAIT_STATES:
        return f"must be one of {', '.join(WAIT_STATES)}, not {value!r}"
    return None


def _server(value: Any) -> str | None:
    if value in SERVER_ROLES or (_is_int(value) and value >= 1):
        return None
    return f"must be a server number (1, 2, ...), {_roles()}, not {value!r}"


#: What a ZooKeeper server step may name instead of a number: the ensemble's leader, its
#: lowest-numbered follower, or the server that holds the sidecar leader's session.
SERVER_ROLES = ("leader", "follower", "leader-session")


def _roles() -> str:
    return ", ".join(f'"{role}"' for role in SERVER_ROLES)


#: What a partition step cuts a process from.
CUTS: Final = ("zookeeper", "clients")


def _cut(value: Any) -> str | None:
    if value not in CUTS:
        return f"must be one of {', '.join(CUTS)}, not {value!r}"
    return None


def _collections(value: Any) -> str | None:
    names = value if isinstance(value, list) else [value]
    for name in names:
        problem = _collection(name)
        if problem is not None:
            return problem
    return None


def _window(value: Any) -> str | None:
    if isinstance(value, str) and re.fullmatch(r"never|\d+(\.\d+)?[smhd]?", value.strip()):
        return None
    return f'must be a duration such as "0", "90s", "24h" or "never", not {value!r}'


_PROCESS_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,39}")


FIELDS: Final[Mapping[str, Checker]] = {
    "process": _process_names,
    "release": _string,
    "generation": _integer(0),
    "auto_promote": boolean_field,
    "before_deploy": boolean_field,
    "session_timeout": number_field(1.0),
    "crash_before_write": _integer(1),
    "lose_answer_after_write": _integer(1),
    "state": _state,
    "timeout": number_field(0.1),
    "collection": _collection,
    "rows": _rows,
    "expect_rows": _rows,
    "expect_count": _integer(0),
    "expect_http": _http,
    "refused": boolean_field,
    "code": _integer(-64, 255),  # negative: killed by that signal (-9: SIGKILL)
    "path": _string,
    "equals": _any,
    "not_equals": _any,
    "length": _integer(0),
    "contains": _any,
    "exists": boolean_field,
    "seconds": number_field(0.0),
    "clients": _integer(1, 64),
    "max_read_seconds": number_field(0.01),
    "wait": number_field(0.0),
    "log_contains": _string,
    "as_of": _integer(0),
    "down": number_field(0.0),
    "server": _server,
    "server_number": _integer(1),
    "cut": _cut,
    "note": _string,
    "finalize_after": _window,
    "rollback_from": _string,
    "discard_writes_to": _collections,
    "version": _string,
    "rows_per_second": _rate,
    "copy_rate": number_field(0.001),
}
