"""Where a feed keeps its place: (instance, seq) of the last event the caller handled."""

from __future__ import annotations

import pathlib
import sqlite3
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Cursor:
    instance: str
    seq: int


class CursorStore(Protocol):
    async def load(self, table: str) -> Cursor | None: ...

    async def save(self, table: str, cursor: Cursor) -> None: ...


class MemoryCursorStore:
    def __init__(self) -> None:
        self.cursors: dict[str, Cursor] = {}

    async def load(self, table: str) -> Cursor | None:
        return self.cursors.get(table)

    async def save(self, table: str, cursor: Cursor) -> None:
        self.cursors[table] = cursor


class SQLiteCursorStore:
    """One row per table in a SQLite file; each save is one committed transaction."""

    def __init__(self, path: str | pathlib.Path) -> None:
        self.path = pathlib.Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("CREATE TABLE IF NOT EXISTS cursor (table_id TEXT PRIMARY KEY, "
                         "instance TEXT NOT NULL, seq INTEGER NOT NULL)")

    async def load(self, table: str) -> Cursor | None:
        row = self._db.execute("SELECT instance, seq FROM cursor WHERE table_id = ?",
                               (table,)).fetchone()
        return None if row is None else Cursor(row[0], int(row[1]))

    async def save(self, table: str, cursor: Cursor) -> None:
        self._db.execute("INSERT INTO cursor (table_id, instance, seq) VALUES (?, ?, ?) "
                         "ON CONFLICT (table_id) DO UPDATE SET instance = excluded.instance, "
                         "seq = excluded.seq", (table, cursor.instance, cursor.seq))

    def close(self) -> None:
        self._db.close()
