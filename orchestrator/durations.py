"""Spans of time as operators write them: ``90s``, ``30m``, ``24h``, ``7d`` or plain seconds.

One parser for every place a duration is given: the command line (``orchestrator.cli.options``)
and the fleet file (``orchestrator.fleet.ensembles``); and one way to show one back (``3h 12m``).
"""

from __future__ import annotations

from typing import Final

from catalog.errors import BadInputError

UNITS: Final = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(value: object, what: str = "duration") -> float:
    """Seconds of ``value`` (a number, or text with an optional unit s, m, h, d); BadInputError
    (exit 2) naming ``what`` when it is not a positive duration."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        text = str(value).strip().lower()
        number, unit = (text[:-1], text[-1]) if text[-1:] in UNITS else (text, "s")
        try:
            seconds = float(number) * UNITS[unit]
        except ValueError:
            seconds = -1.0
    if not seconds > 0:
        raise BadInputError(
            f"{what}: {value!r} is not a duration: write a positive number of seconds, or one "
            "with s, m, h or d (90s, 30m, 24h, 7d)",
            value=str(value),
        )
    return seconds


def short_duration(seconds: float | None) -> str:
    """``45s``, ``12m``, ``3h 12m``, ``2d 4h``; ``-`` for None."""
    if seconds is None:
        return "-"
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes}m"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h {minutes}m" if minutes else f"{hours}h"
    days, hours = divmod(hours, 24)
    return f"{days}d {hours}h" if hours else f"{days}d"
