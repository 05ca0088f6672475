"""Logging with structlog: JSON lines on stdout (journald takes them), colour on a terminal.

Under systemd, stdout is a journald stream (JOURNAL_STREAM names it): each JSON line
then starts with its syslog priority, ``<4>`` for a warning, which journald takes off
and keeps as the entry's PRIORITY (SyslogLevelPrefix=, on by default), so that
``journalctl -u shoed -p warning`` shows the warnings and errors; ``-o cat`` shows the
JSON alone. The libraries' own log records (paho, aiomqtt, asyncio) come through the
same renderer, as ``{"event": "library_log", "logger": ..., "message": ...}``, so that
every line a JSON reader meets is JSON.
"""

from __future__ import annotations

import contextlib
import logging
import os
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


# syslog priorities (sd-daemon(3): "<4>" starts a warning's line)
PRIORITIES = {"debug": 7, "info": 6, "warning": 4, "warn": 4, "error": 3, "exception": 3,
              "critical": 2}


def to_journald(stream: Any) -> bool:
    """`stream` is the journald stream systemd connected (JOURNAL_STREAM is its
    device:inode, systemd.exec(5)), not a file or a pipe it was redirected to."""
    expected = os.environ.get("JOURNAL_STREAM", "")
    if not expected:
        return False
    try:
        info = os.fstat(stream.fileno())
    except (AttributeError, OSError, ValueError):
        return False
    return expected == f"{info.st_dev}:{info.st_ino}"


def _priority_prefix(logger: Any, method: str, line: Any) -> Any:
    return f"<{PRIORITIES.get(method, 6)}>{line}"


class _ToStructlog(logging.Handler):
    """A library's log record as one of our lines (module docstring)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception:  # a library's bad format string: its raw text
            message = str(record.msg)
        extra = {"exc_info": record.exc_info} if record.exc_info else {}
        get("library").log(record.levelno, "library_log", logger=record.name,
                           message=message, **extra)


def configure(fmt: str = "auto", level: str = "info", file: Any = None) -> None:
    """JSON or console lines to stdout, or to `file` (an open text file) when given."""
    stream = _SafeStream(file)
    console = fmt == "console" or (fmt == "auto" and file is None and sys.stdout.isatty())
    renderer: Any = (structlog.dev.ConsoleRenderer(colors=True) if console
                     else structlog.processors.JSONRenderer())
    journald = not console and file is None and to_journald(sys.stdout)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            _redact,
            structlog.processors.format_exc_info,
            renderer,
            *([_priority_prefix] if journald else []),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            getattr(logging, level.upper(), logging.INFO)),
        logger_factory=structlog.PrintLoggerFactory(cast(TextIO, stream)),
        cache_logger_on_first_use=False,
    )
    # Libraries (aiomqtt/paho) log through the standard library: keep them quiet but seen,
    # as lines of ours.
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, _ToStructlog)]:
        root.removeHandler(handler)
    if not root.handlers:
        root.addHandler(_ToStructlog())
    root.setLevel(logging.WARNING)


def get(name: str = "shoed") -> Any:
    return structlog.get_logger(name)
