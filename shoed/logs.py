"""Logging with structlog: JSON lines on stdout (journald takes them), colour on a terminal."""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import MutableMapping
from typing import Any, TextIO, cast

import structlog

SECRET_KEYS = frozenset({"password", "passwd", "secret", "token", "key_password"})


def _redact(logger: Any, method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    for key in list(event):
        if key.lower() in SECRET_KEYS:
            event[key] = "***"
    return event


class _SafeStream:
    """Writes to `target` (default: whatever sys.stdout is at the time of writing).

    A log line that cannot be written (journald restarting: EPIPE; a closed stream) is
    dropped: logging must never take down the task that serves the shoe.
    """

    def __init__(self, target: Any = None) -> None:
        self._target = target

    def write(self, text: str) -> int:
        try:
            return int((self._target or sys.stdout).write(text))
        except (OSError, ValueError):
            return 0

    def flush(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            (self._target or sys.stdout).flush()


def configure(fmt: str = "auto", level: str = "info", file: Any = None) -> None:
    """JSON or console lines to stdout, or to `file` (an open text file) when given."""
    stream = _SafeStream(file)
    console = fmt == "console" or (fmt == "auto" and file is None and sys.stdout.isatty())
    renderer: Any = (structlog.dev.ConsoleRenderer(colors=True) if console
                     else structlog.processors.JSONRenderer())
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            _redact,
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            getattr(logging, level.upper(), logging.INFO)),
        logger_factory=structlog.PrintLoggerFactory(cast(TextIO, stream)),
        cache_logger_on_first_use=False,
    )
    # Libraries (aiomqtt/paho) log through the standard library: keep them quiet but seen.
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)


def get(name: str = "shoed") -> Any:
    return structlog.get_logger(name)
