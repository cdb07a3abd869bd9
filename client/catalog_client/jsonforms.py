"""The JSON form of a value, where its Arrow type does not change it: the one home of those
rules, for the client that writes rows and the sidecar that writes reads.

Non-finite floats are their strings (``"NaN"``, ``"Infinity"``, ``"-Infinity"``), times ISO
8601, durations in seconds, decimals strings (exact), bytes base64. A value of any other type
is its ``str``. Structs and maps, whose form depends on their type, are the sidecar's
(``orchestrator.wire.jsonvalues.writable``).
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import math
from typing import Any, Final

__all__ = ["NON_FINITE", "jsonable", "scalar_form"]

#: The strings that stand for the floats JSON has no number for, both ways.
NON_FINITE: Final = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def scalar_form(value: Any) -> Any:
    """``value`` (one value, not a container) as JSON."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    return str(value)


def jsonable(value: Any) -> Any:
    """A Python value, its Arrow type unknown, as JSON: objects and lists element by element,
    a list of (key, value) pairs (an Arrow map) as an object, anything else :func:`scalar_form`."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        if value and all(isinstance(v, tuple) and len(v) == 2 for v in value):
            return {str(k): jsonable(v) for k, v in value}  # an Arrow map
        return [jsonable(v) for v in value]
    return scalar_form(value)
