"""Structured logs on stderr: key=value for people, JSON lines (``json=True``) for log pipelines.

One way out for every line: structlog's events and every library's standard ``logging`` records —
APScheduler's, urllib3's, py4j's, pulsar-client's (through the Python logger it is given), Spark's JVM
(spark_jobs/jvm.py logs each line it writes), and Python's warnings — are rendered by the same
processors and written by one handler on the root logger, a whole line at a time, so with ``logJson``
every line on stderr is one JSON object, whichever thread wrote it. A library's record carries its
``logger`` name; a traceback is in ``exception`` (in JSON mode; text mode prints it below the line).

Libraries speak at their INFO level about routine things (APScheduler: every job run; py4j: every closed
connection), so their records below WARNING are shown only at ``debug``; py4j's, which logs each command
it sends, and asyncio's, which says which selector each new event loop uses, never are.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping, MutableMapping
from typing import Any

import structlog

from pulsar_lb_operator.adminapi import origins

OURS = "pulsar_lb_operator"  # structlog.get_logger(__name__): every module's logger is under it
HANDLER_NAME = "pulsar-lb-operator"
ALWAYS_QUIET = {"py4j": logging.WARNING, "asyncio": logging.WARNING}


class _Stderr(logging.Handler):
    """Writes each record as one line to ``sys.stderr`` as it is at that moment, not as it was at ``configure``
    (the tests and the rehearsal swap it). ``Handler.handle`` holds the handler's lock around ``emit``: one
    whole line at a time, whichever thread logs."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record)
            sys.stderr.write(line + "\n")
            sys.stderr.flush()
        except Exception:
            self.handleError(record)


def _no_logins(_logger: Any, _name: str, event: MutableMapping[str, Any]) -> Mapping[str, Any]:
    """Every line's strings with the user name and password of any URL in them masked: a basic-auth login in
    adminUrl is a credential, and a line may quote a URL built from it (the audit's service URL, a library's)."""
    return {k: origins.without_userinfo(v) if isinstance(v, str) else v for k, v in event.items()}


def configure(level: str = "info", json: bool = False) -> None:
    threshold = logging.getLevelNamesMapping()[level.upper()]
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,  # cycle_id and strategy of the cycle under way
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    # JSON: a traceback becomes the string "exception" (one line); text: the console renderer prints it below
    tracebacks: list[Any] = [structlog.processors.format_exc_info] if json else []
    renderer = structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer(colors=False)
    structlog.configure(
        processors=[*shared, *tracebacks, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        wrapper_class=structlog.make_filtering_bound_logger(threshold),
        logger_factory=structlog.stdlib.LoggerFactory(),
        cache_logger_on_first_use=False,
    )
    handler = _Stderr()
    handler.set_name(HANDLER_NAME)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[
                *shared,
                structlog.stdlib.add_logger_name,
                structlog.stdlib.ExtraAdder(allow=["exception"]),  # a JVM record's stack trace (spark_jobs/jvm.py)
                *tracebacks,
            ],
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, _no_logins, renderer],
        )
    )
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == HANDLER_NAME]:  # configure() again: replace, not add
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(threshold if threshold <= logging.DEBUG else max(threshold, logging.WARNING))
    logging.getLogger(OURS).setLevel(threshold)
    for name, quiet in ALWAYS_QUIET.items():
        logging.getLogger(name).setLevel(max(threshold, quiet))
    # warnings.warn(...) of any library: a record of py.warnings, not a raw line. Off, then on: captureWarnings(True)
    # does nothing if it was on once, even after something else (a test runner) set warnings.showwarning since.
    logging.captureWarnings(False)
    logging.captureWarnings(True)
