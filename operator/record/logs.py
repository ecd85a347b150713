"""Structured logs on stderr: key=value for people, JSON lines (``json=True``) for log pipelines."""

from __future__ import annotations

import logging
import sys

import structlog


def configure(level: str = "info", json: bool = False) -> None:
    processors: list = [
        structlog.contextvars.merge_contextvars,  # cycle_id and strategy of the cycle under way
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer = structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer(colors=False)
    structlog.configure(
        processors=[*processors, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelNamesMapping()[level.upper()]),
        logger_factory=lambda *_: structlog.PrintLogger(sys.stderr),  # the stderr of the moment, not of configure()
        cache_logger_on_first_use=False,
    )
