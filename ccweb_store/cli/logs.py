"""The commands' logs on stderr: as text lines or, with ``--log-format json``
(``CCWEB_LOG_FORMAT``), one JSON object per line.

Quiet by default: the libraries' routine INFO lines (alembic naming its dialect and each
migration it runs, uvicorn announcing each step of its start and stop) are raised to WARNING
unless the level is ``debug``; what the service says about itself stays at the chosen level.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

#: Libraries whose INFO lines are routine chatter, shown only at ``debug``.
CHATTY_LOGGERS = ("alembic", "uvicorn.error", "uvicorn.asgi")

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

#: The arguments of uvicorn's access line (``client - "METHOD PATH HTTP/v" status``), by the
#: names a JSON line gives them.
ACCESS_FIELDS = ("client", "method", "path", "httpVersion", "status")

#: A record's ``extra={"fields": {...}}``: keys a JSON line carries besides the message.
FIELDS_ATTRIBUTE = "fields"


class JsonFormatter(logging.Formatter):
    """A record as one JSON object: ``time`` (UTC, ISO 8601), ``level``, ``logger``,
    ``message``, the ``fields`` it was logged with, an access line's parts, and
    ``exception`` (the traceback as text) when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        args = record.args
        if record.name == "uvicorn.access" and isinstance(args, tuple) and len(args) == 5:
            line.update(zip(ACCESS_FIELDS, args, strict=True))
        fields = getattr(record, FIELDS_ATTRIBUTE, None)
        if isinstance(fields, dict):
            line.update(fields)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, ensure_ascii=False, default=str)


def setup_logging(level: str = "info", log_format: str = "text") -> None:
    """Send every record to stderr at ``level``, formatted as ``text`` or ``json``; replaces
    whatever handlers the root logger had."""
    handler = logging.StreamHandler(sys.stderr)
    text = logging.Formatter(TEXT_FORMAT)
    handler.setFormatter(JsonFormatter() if log_format == "json" else text)
    root = logging.getLogger()
    for old in root.handlers[:]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    quiet = level.lower() != "debug"
    for name in CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING if quiet else logging.NOTSET)
