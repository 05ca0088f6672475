"""The checks of a journal's rows that SQLite's own checks, structural only, do not see.

Two kinds of damage leave every page well formed: rows deleted (a hole in the events,
which are kept as one gapless run of seqs: a prune deletes from the oldest), and a byte
changed inside a row's text (bit rot the disk did not report, an edit by hand). Every
row of the checksummed tables carries the CRC-32 of its text, written with it (journal
schema 6; docs/decisions.md 206). `shoed check-journal` and the check after READY run
these on a read-only connection; what they find is damage (`journal.damaged`).
"""

from __future__ import annotations

import sqlite3
import zlib

# The rows whose text carries a checksum: (table, its key, the text's column).
CHECKSUMMED = (("events", "seq", "body"), ("inputs", "id", "body"),
               ("snapshots", "input_id", "state"), ("responses", "request_id", "body"))
MISMATCHES_NAMED = 5  # of each table's mismatches, this many are named in the problem


def text_crc(text: str) -> int:
    """A row's checksum (schema 6): CRC-32 of its text as stored, UTF-8."""
    return zlib.crc32(text.encode())


def checksum_mismatches(conn: sqlite3.Connection) -> str | None:
    """The rows whose text no longer matches the checksum written with it, or None.

    SQLite's own checks are structural: a changed byte inside a row's text (bit rot the
    disk did not report, an edit by hand) passes them, and the daemon would serve it as
    it reads. The text is read as the bytes stored (an invalid UTF-8 byte is a mismatch
    too, not an error); rows written before schema 6 (crc NULL) are not checked."""
    conn.create_function("shoed_crc", 1, zlib.crc32, deterministic=True)
    found: list[str] = []
    for table, key, column in CHECKSUMMED:
        rows = [row[0] for row in conn.execute(
            f"SELECT {key} FROM {table} WHERE crc IS NOT NULL AND "
            f"crc != shoed_crc(CAST({column} AS BLOB)) ORDER BY {key}")]
        if rows:
            named = ", ".join(str(r) for r in rows[:MISMATCHES_NAMED])
            more = f" and {len(rows) - MISMATCHES_NAMED} more" if len(rows) > \
                MISMATCHES_NAMED else ""
            found.append(f"{table} {key} {named}{more}")
    if not found:
        return None
    return ("rows changed after they were written (their checksum does not match: bit "
            "rot or an edit): " + "; ".join(found))


# The problems of rows (not of SQLite's structure): recorded as they read.
ROW_PROBLEMS = ("events missing", "rows changed")


def events_gap(conn: sqlite3.Connection) -> str | None:
    """What is missing of the events, or None. The events kept are one gapless run of
    seqs (a prune deletes from the oldest): a hole is damage (rows deleted or lost), which
    SQLite's own checks, structural only, do not see."""
    count, low, high = conn.execute("SELECT COUNT(*), MIN(seq), MAX(seq) FROM events"
                                    ).fetchone()
    if not count or count == high - low + 1:
        return None
    first = conn.execute("SELECT e.seq + 1 FROM events e WHERE e.seq < ? AND NOT EXISTS "
                         "(SELECT 1 FROM events n WHERE n.seq = e.seq + 1) ORDER BY e.seq "
                         "LIMIT 1", (high,)).fetchone()
    return (f"events missing: seq {low}..{high} holds {count} events, "
            f"{high - low + 1 - count} missing (the first at seq {first[0] if first else '?'})")


def row_problems(conn: sqlite3.Connection) -> str | None:
    """The first problem of the rows (a hole in the events, then changed rows), or None."""
    return events_gap(conn) or checksum_mismatches(conn)
