"""shoed's integration client: a table's events exactly once and in order, and commands.

See docs/integrating.md. The pieces:

- :class:`TableFeed` -- ``async for event in TableFeed(url, "T01", cursor_store=...)``;
- :class:`TableConnection` -- commands only: ``await table.command("void_hand", ...)``;
- :class:`SQLiteCursorStore`, :class:`MemoryCursorStore`, the :class:`CursorStore`
  protocol (the sink keeps its cursor in PostgreSQL, in the same transaction as its rows);
- the error tree in :mod:`shoed.client.errors`.
"""

from .cursor import Cursor, CursorStore, MemoryCursorStore, SQLiteCursorStore
from .errors import (
    CommandError,
    CommandRefused,
    CommandTimeout,
    EventsLost,
    FeedError,
    Forbidden,
    InvalidCommand,
    RequestConflict,
    ShoedClientError,
    StorageFailed,
)
from .feed import TableConnection, TableFeed, instance_of

Table = TableConnection

__all__ = [
    "CommandError", "CommandRefused", "CommandTimeout", "Cursor", "CursorStore",
    "EventsLost", "FeedError", "Forbidden", "InvalidCommand", "MemoryCursorStore",
    "RequestConflict", "SQLiteCursorStore", "ShoedClientError", "StorageFailed", "Table",
    "TableConnection", "TableFeed", "instance_of",
]
