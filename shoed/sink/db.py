"""The sink's database side: versioned migrations and applying events (psycopg 3).

`apply_batch` writes a batch of one table's events and moves that table's cursor in ONE
transaction: a crash (of the sink, the database connection, anything) before the commit
leaves neither, so the feed delivers the same events again from the old cursor; and each
event goes through `events.event_id` first, so an event already stored changes nothing.
"""

from __future__ import annotations

import datetime as dt
import importlib.resources
import json
import re
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from shoed.client.cursor import Cursor
from shoed.client.errors import EventsLost
from shoed.client.feed import instance_of

MIGRATION_NAME = re.compile(r"^(\d+)_[a-z0-9_]+\.sql$")
LOCK_KEY = 0x5E0ED  # the advisory lock that serialises migrations


def migrations() -> list[tuple[int, str, str]]:
    """(version, name, sql) of every packaged migration, in order."""
    found = []
    for entry in importlib.resources.files("shoed.sink").joinpath("migrations").iterdir():
        match = MIGRATION_NAME.match(entry.name)
        if match:
            found.append((int(match[1]), entry.name, entry.read_text()))
    return sorted(found)


async def migrate(conn: psycopg.AsyncConnection[Any]) -> list[str]:
    """Apply the migrations not yet applied; returns their names. Safe to run from many
    workers at once (an advisory lock serialises them)."""
    applied: list[str] = []
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))
        await conn.execute("CREATE TABLE IF NOT EXISTS schema_version ("
                           "version integer PRIMARY KEY, name text NOT NULL, "
                           "applied_at timestamptz NOT NULL DEFAULT now())")
        cur = await conn.execute("SELECT coalesce(max(version), 0) FROM schema_version")
        row = await cur.fetchone()
        current = int(row[0]) if row else 0
        for version, name, sql in migrations():
            if version <= current:
                continue
            await conn.execute(sql.encode())
            await conn.execute("INSERT INTO schema_version (version, name) VALUES (%s, %s)",
                               (version, name))
            applied.append(name)
    return applied


async def load_cursor(conn: psycopg.AsyncConnection[Any], table: str) -> Cursor | None:
    cur = await conn.execute("SELECT instance, seq FROM sink_cursor WHERE table_id = %s",
                             (table,))
    row = await cur.fetchone()
    await conn.commit()
    return None if row is None else Cursor(str(row[0]), int(row[1]))


class PostgresCursorStore:
    """The feed's cursor, read from `sink_cursor`; saving is part of :func:`apply_batch`
    (the rows' own transaction), so :meth:`save` has nothing left to do."""

    def __init__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self.conn = conn

    async def load(self, table: str) -> Cursor | None:
        return await load_cursor(self.conn, table)

    async def save(self, table: str, cursor: Cursor) -> None:
        return None


def _ts(value: Any) -> dt.datetime | None:
    if not isinstance(value, str):
        return None
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))


async def apply_event(cur: psycopg.AsyncCursor[Any], e: dict[str, Any]) -> bool:
    """Store one event and what it changes; False when it was stored before."""
    instance = instance_of(e)
    ts = _ts(e.get("ts"))
    await cur.execute(
        "INSERT INTO events (event_id, table_id, instance, seq, type, ts, shoe_id, hand_no, "
        "body) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
        (e["event_id"], e["table_id"], instance, e["seq"], e["type"], ts, e.get("shoe_id"),
         e.get("hand_no"), Jsonb(e)))
    if cur.rowcount == 0:
        return False
    kind = e["type"]
    table, shoe, hand = e["table_id"], e.get("shoe_id"), e.get("hand_no")
    if kind == "shoe_started":
        await cur.execute(
            "INSERT INTO shoes (shoe_id, table_id, instance, started_at, decks, table_type, "
            "unnecessary_cards, betting_control) VALUES (%s, %s, %s, %s, %s, %s, %s, %s) "
            "ON CONFLICT (shoe_id) DO NOTHING",
            (shoe, table, instance, ts, e.get("decks"), e.get("table_type"),
             e.get("unnecessary_cards"), e.get("betting_control")))
    elif kind == "shoe_ended":
        await cur.execute("UPDATE shoes SET ended_at = %s, hands_played = %s, "
                          "hands_voided = %s WHERE shoe_id = %s",
                          (ts, e.get("hands_played"), e.get("hands_voided"), shoe))
    elif kind == "shoe_voided":
        await cur.execute("UPDATE shoes SET voided_at = %s, void_reason = %s, voided_by = %s "
                          "WHERE shoe_id = %s", (ts, e.get("reason"), e.get("operator"), shoe))
    elif kind == "hand_result":
        await cur.execute(
            "INSERT INTO hands (shoe_id, hand_no, table_id, result_at, player_cards, "
            "banker_cards, player_total, banker_total, winner, player_natural, "
            "banker_natural, player_pair, banker_pair, cards_dealt, big_small, banker_six, "
            "payouts, result_event_id) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, "
            "%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (shoe_id, hand_no) DO UPDATE SET "
            "result_at = excluded.result_at, player_cards = excluded.player_cards, "
            "banker_cards = excluded.banker_cards, player_total = excluded.player_total, "
            "banker_total = excluded.banker_total, winner = excluded.winner, "
            "player_natural = excluded.player_natural, banker_natural = "
            "excluded.banker_natural, player_pair = excluded.player_pair, banker_pair = "
            "excluded.banker_pair, cards_dealt = excluded.cards_dealt, big_small = "
            "excluded.big_small, banker_six = excluded.banker_six, payouts = "
            "excluded.payouts, result_event_id = excluded.result_event_id",
            (shoe, hand, table, ts, e.get("player_cards"), e.get("banker_cards"),
             e.get("player_total"), e.get("banker_total"), e.get("winner"),
             e.get("player_natural"), e.get("banker_natural"), e.get("player_pair"),
             e.get("banker_pair"), e.get("cards_dealt"), e.get("big_small"),
             e.get("banker_six"), Jsonb(e.get("payouts")), e["event_id"]))
    elif kind == "hand_voided" and shoe is not None and hand is not None:
        await cur.execute(
            "INSERT INTO hands (shoe_id, hand_no, table_id, voided, voided_at, void_reason, "
            "voided_by, result_withdrawn) VALUES (%s, %s, %s, true, %s, %s, %s, %s) "
            "ON CONFLICT (shoe_id, hand_no) DO UPDATE SET voided = true, voided_at = "
            "excluded.voided_at, void_reason = excluded.void_reason, voided_by = "
            "excluded.voided_by, result_withdrawn = excluded.result_withdrawn",
            (shoe, hand, table, ts, e.get("reason"), e.get("operator"),
             e.get("result_withdrawn")))
    elif kind == "card":
        await cur.execute(
            "INSERT INTO cards (event_id, table_id, instance, seq, shoe_id, hand_no, "
            "card_index, position, card, source, drawn_at, exposed_during_betting) VALUES "
            "(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
            (e["event_id"], table, instance, e["seq"], shoe, hand, e.get("card_index"),
             e.get("position"), e.get("card"), e.get("source"), _ts(e.get("drawn_at")),
             e.get("exposed_during_betting")))
    elif kind == "alarm":
        if e.get("active"):
            await cur.execute(
                "INSERT INTO alarms (alarm_id, table_id, code, message, shoe_id, hand_no, "
                "card_index, fault_code, momentary, active, raised_at, cleared_at, "
                "instance) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) "
                "ON CONFLICT (alarm_id) DO NOTHING",
                (e["alarm_id"], table, e["code"], e.get("message"), shoe, hand,
                 e.get("card_index"), e.get("fault_code"), e.get("momentary"),
                 not e.get("momentary"), ts, ts if e.get("momentary") else None, instance))
        else:
            await cur.execute(
                "INSERT INTO alarms (alarm_id, table_id, code, message, shoe_id, hand_no, "
                "card_index, fault_code, active, raised_at, cleared_at, instance) VALUES "
                "(%s, %s, %s, %s, %s, %s, %s, %s, false, %s, %s, %s) ON CONFLICT (alarm_id) "
                "DO UPDATE SET active = false, cleared_at = excluded.cleared_at",
                (e["alarm_id"], table, e["code"], e.get("message"), shoe, hand,
                 e.get("card_index"), e.get("fault_code"), ts, ts, instance))
    elif kind == "supervisor_action":
        await cur.execute(
            "INSERT INTO supervisor_actions (event_id, table_id, shoe_id, hand_no, ts, "
            "command, operator, request_id, detail) VALUES (%s, %s, %s, %s, %s, %s, %s, "
            "%s, %s) ON CONFLICT DO NOTHING",
            (e["event_id"], table, shoe, hand, ts, e["command"], e["operator"],
             e["request_id"], Jsonb(e.get("detail"))))
    elif kind == "shoe_report":
        await cur.execute(
            "INSERT INTO shoe_reports (shoe_id, table_id, event_id, ts, hands_played, "
            "hands_voided, hands_per_hour, cards_drawn, report) VALUES (%s, %s, %s, %s, "
            "%s, %s, %s, %s, %s) ON CONFLICT (shoe_id) DO UPDATE SET event_id = "
            "excluded.event_id, ts = excluded.ts, report = excluded.report",
            (shoe, table, e["event_id"], ts, e.get("hands_played"), e.get("hands_voided"),
             e.get("hands_per_hour"), e.get("cards_drawn"), Jsonb(e)))
    return True


#: An event the database or the sink cannot store as it is: a text PostgreSQL refuses
#: (U+0000), a number out of a column's range, a value of the wrong kind, a field its rows
#: need missing (events_unstored, migration 005).
EVENT_ERRORS = (KeyError, TypeError, ValueError, AttributeError, psycopg.errors.DataError,
                psycopg.errors.IntegrityError)


async def supersede(cur: psycopg.AsyncCursor[Any], e: dict[str, Any]) -> None:
    """A shoe of its table still in play in a journal stored before `e`'s was left by a
    replaced journal: no event will end it. It is marked superseded at `e`'s time, by
    `e`'s instance (migrations 004, 005: the journals' order is the database's, not the
    table's clock)."""
    at, instance = _ts(e.get("ts")), instance_of(e)
    await cur.execute(
        "UPDATE shoes s SET superseded_at = %(at)s, superseded_by = %(instance)s "
        "WHERE s.table_id = %(table)s AND s.instance <> %(instance)s "
        "AND s.ended_at IS NULL AND s.voided_at IS NULL AND s.superseded_at IS NULL "
        "AND coalesce((SELECT j.first_stored_at FROM journals j WHERE j.table_id = "
        "s.table_id AND j.instance = s.instance), '-infinity') < (SELECT j.first_stored_at "
        "FROM journals j WHERE j.table_id = %(table)s AND j.instance = %(instance)s)",
        {"at": at, "instance": instance, "table": e["table_id"]})


async def _unstored(cur: psycopg.AsyncCursor[Any], table: str, e: dict[str, Any],
                    error: BaseException) -> None:
    event_id, kind = e.get("event_id"), e.get("type")
    await cur.execute(
        "INSERT INTO events_unstored (table_id, instance, seq, event_id, type, body, error) "
        "VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
        (table, instance_of(e), e["seq"], None if event_id is None else str(event_id),
         None if kind is None else str(kind), json.dumps(e, default=str),
         f"{type(error).__name__}: {error}"[:1000]))


async def _record_losses(cur: psycopg.AsyncCursor[Any], table: str,
                         lost: list[EventsLost]) -> None:
    for loss in lost:
        await cur.execute(
            "INSERT INTO events_lost (table_id, instance, first_seq, last_seq, possible, "
            "detail) VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
            (table, loss.instance or "", loss.first, loss.last, loss.possible, str(loss)))


async def apply_batch(conn: psycopg.AsyncConnection[Any], table: str,
                      events: list[dict[str, Any]], lost: list[EventsLost] | None = None,
                      on_unstored: Any = None) -> int:
    """Store a batch of one table's events (in seq order) and move its cursor to the last
    of them, in one transaction, with the losses the feed found before them. Returns how
    many events were new. An event that cannot be stored (EVENT_ERRORS) sends the batch
    round again, each event in a savepoint of its own: that one goes to
    `events_unstored` (`on_unstored(event, error)` is told), the others are stored."""
    try:
        return await _apply(conn, table, events, lost or [], None)
    except EVENT_ERRORS:
        return await _apply(conn, table, events, lost or [], on_unstored or (lambda e, x: None))


async def _apply(conn: psycopg.AsyncConnection[Any], table: str, events: list[dict[str, Any]],
                 lost: list[EventsLost], careful: Any) -> int:
    new = 0
    last = events[-1]
    instance: str | None = None
    async with conn.transaction(), conn.cursor() as cur:
        for each in dict.fromkeys(instance_of(e) for e in events):  # in the order they come
            await cur.execute("INSERT INTO journals (table_id, instance) VALUES (%s, %s) "
                              "ON CONFLICT DO NOTHING", (table, each))
        await _record_losses(cur, table, lost)
        for event in events:
            first = new == 0 or instance_of(event) != instance
            if careful is None:
                stored = await _store(cur, event, first)
            else:
                try:
                    async with conn.transaction():  # a savepoint: this event only
                        stored = await _store(cur, event, first)
                except EVENT_ERRORS as error:
                    await _unstored(cur, table, event, error)
                    careful(event, error)
                    stored = False
            instance = instance_of(event)
            new += stored
        await cur.execute(
            "INSERT INTO sink_cursor (table_id, instance, seq) VALUES (%s, %s, %s) "
            "ON CONFLICT (table_id) DO UPDATE SET instance = excluded.instance, "
            "seq = excluded.seq, updated_at = now() "
            # never back within a journal, nor to a journal stored before the cursor's: a
            # worker that lost its table's lock and has not noticed yet (up to
            # claim_interval_s) writes behind the one that took it
            "WHERE (sink_cursor.instance = excluded.instance "
            "AND sink_cursor.seq < excluded.seq) OR (sink_cursor.instance <> "
            "excluded.instance AND coalesce((SELECT j.first_stored_at FROM journals j "
            "WHERE j.table_id = excluded.table_id AND j.instance = sink_cursor.instance), "
            "'-infinity') <= (SELECT j.first_stored_at FROM journals j WHERE j.table_id = "
            "excluded.table_id AND j.instance = excluded.instance))",
            (table, instance_of(last), last["seq"]))
    return new


async def _store(cur: psycopg.AsyncCursor[Any], event: dict[str, Any], first: bool) -> bool:
    stored = await apply_event(cur, event)
    if stored and first:
        await supersede(cur, event)  # the batch's first, or a new journal's
    return stored


def dumps(value: Any) -> str:
    return json.dumps(value, default=str)
