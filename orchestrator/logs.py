"""Structured logging, configured once per process.

Events are short snake_case names with key-value fields; context (env, process id, version,
deploy generation, epoch) is bound by the caller. Output is JSON when stderr is not a terminal
(sidecars, CI, scenario runs) and coloured key-value lines on a terminal. The standard library's
loggers (kazoo's, asyncio's) go through the same renderer, so a JSON log is JSON on every line.
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

import structlog


def configure_logging(
    level: str = "INFO", *, json: bool | None = None, stream: TextIO | None = None
) -> None:
    """Configure structlog and the stdlib root logger (kazoo logs through it)."""
    stream = stream or sys.stderr
    if json is None:
        json = not stream.isatty()
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        numeric = logging.INFO
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: structlog.types.Processor
    if json:
        renderer = structlog.processors.JSONRenderer()
        shared.append(structlog.processors.format_exc_info)
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=stream.isatty())
    structlog.configure(
        processors=[*shared, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        # One write per line (PrintLogger writes the newline separately, so a stdlib record from
        # another thread could land between a message and its newline).
        logger_factory=structlog.WriteLoggerFactory(file=stream),
        cache_logger_on_first_use=False,
    )
    # The standard library's records (kazoo, asyncio, py4j) render as ours do: one JSON object
    # a line in JSON mode, an exception's traceback in its "exception" field.
    handler = logging.StreamHandler(stream)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[*shared, structlog.stdlib.add_logger_name],
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
        )
    )
    # kazoo is chatty at INFO about every reconnect; its warnings still matter.
    logging.basicConfig(level=max(numeric, logging.WARNING), handlers=[handler], force=True)
    # kazoo warns on every failed reconnect attempt; our own events (zookeeper_suspended,
    # ConnectionLostError naming the hosts) say the same once, so keep its retries for DEBUG.
    logging.getLogger("kazoo.client").setLevel(
        logging.DEBUG if numeric <= logging.DEBUG else logging.ERROR
    )
    # werkzeug logs one line per HTTP request at INFO: only when debugging.
    logging.getLogger("werkzeug").setLevel(
        logging.DEBUG if numeric <= logging.DEBUG else logging.WARNING
    )
