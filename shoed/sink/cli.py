"""`shoed sink --postgres URL`: one process writing many tables' events into PostgreSQL.

Each table has one TableFeed (exactly once, in seq order) and is owned by one sink
worker at a time: a PostgreSQL session-level advisory lock per table, so several workers
can run (`--group` shares the discovery subscription among them with an MQTT 5 shared
subscription) and a dead worker's tables pass to another, which goes on from the cursor
stored in the database.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import time
import uuid
from datetime import datetime
from typing import Any

import aiomqtt
import psycopg
import structlog
from psycopg.conninfo import conninfo_to_dict

from shoed.aio import run_until_signalled
from shoed.client.cursor import Cursor
from shoed.client.feed import TableConnection, TableFeed
from shoed.client.options import OptionError, feed_options

from .db import apply_batch, apply_event, load_cursor, migrate

log = structlog.get_logger("shoed.sink")
TABLE_LOCK = 0x5E0EE  # first key of the per-table advisory locks


class DatabaseUnreachable(Exception):
    """The database of --postgres did not answer at the start (exit 1: it may later)."""


class _LockedStore:
    def __init__(self, conn: psycopg.AsyncConnection[Any], lock: asyncio.Lock) -> None:
        self.conn, self.lock = conn, lock

    async def load(self, table: str) -> Cursor | None:
        async with self.lock:
            return await load_cursor(self.conn, table)

    async def save(self, table: str, cursor: Cursor) -> None:
        return None  # written with the rows, in their transaction (apply_batch)


class Sink:
    def __init__(self, url: str, conninfo: str, *, prefix: str = "shoed",
                 tables: list[str] | None = None, group: str | None = None,
                 feed_options: dict[str, Any] | None = None, batch: int = 500,
                 claim_interval_s: float = 5.0) -> None:
        self.url, self.conninfo, self.prefix = url, conninfo, prefix.rstrip("/")
        self.tables, self.group = tables, group
        self.feed_options = feed_options or {}
        self.batch = batch
        self.claim_interval_s = claim_interval_s
        self.owned: dict[str, asyncio.Task[None]] = {}
        self.seen: set[str] = set()
        # One claim at a time: discovery's claim and the claimer's tick each checked
        # `owned` before awaiting the lock, and session advisory locks are re-entrant, so
        # both won and one table was served by two feeds (outside review).
        self.claim_lock = asyncio.Lock()
        self.write_lock = asyncio.Lock()
        self.stats = {"events": 0, "new": 0, "batches": 0}
        self.lag: list[float] = []  # seconds from an event's ts to its commit
        self._crash_after = int(os.environ.get("SHOED_TEST_SINK_CRASH_IN_TX", "0") or 0)

    async def run(self) -> None:
        self.locks = await psycopg.AsyncConnection.connect(self.conninfo, autocommit=True)
        self.conn = await psycopg.AsyncConnection.connect(self.conninfo)
        self._failed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        tasks = [asyncio.create_task(self._claimer())]
        if self.tables is None:
            tasks.append(asyncio.create_task(self._discover()))
        else:
            self.seen.update(self.tables)
        try:
            done, _ = await asyncio.wait([*tasks, self._failed],
                                         return_when=asyncio.FIRST_COMPLETED)
            for finished in done:
                finished.result()  # a table's writer failed: say so and stop (K13)
        finally:
            for task in [*tasks, *self.owned.values()]:
                task.cancel()
            await asyncio.gather(*tasks, *self.owned.values(), return_exceptions=True)
            await self.conn.close()
            await self.locks.close()

    async def _claimer(self) -> None:
        while True:
            # The locks live in this session: if it is gone, so are they (K13).
            await self.locks.execute("SELECT 1")
            for table in sorted(self.seen - set(self.owned)):
                await self._claim(table)
            await asyncio.sleep(self.claim_interval_s)

    async def _claim(self, table: str) -> None:
        async with self.claim_lock:
            if table in self.owned:
                return
            cur = await self.locks.execute("SELECT pg_try_advisory_lock(%s, hashtext(%s))",
                                           (TABLE_LOCK, table))
            row = await cur.fetchone()
            if not (row and row[0]):
                return
            log.info("sink_table_claimed", table=table)
            task = asyncio.create_task(self._serve(table), name=f"sink-{table}")
            task.add_done_callback(self._on_table_done)
            self.owned[table] = task

    def _on_table_done(self, task: asyncio.Task[None]) -> None:
        if task.cancelled() or self._failed.done():
            return
        error = task.exception()
        if error is not None:
            log.error("sink_table_failed", task=task.get_name(), error=repr(error))
            self._failed.set_exception(error)

    async def _discover(self) -> None:
        """Tables appear by their retained `status` (and, with a group, its refreshes:
        the shared subscription hands each to one worker of the group)."""
        topic = f"{self.prefix}/+/status"
        if self.group:
            topic = f"$share/{self.group}/{topic}"
        probe = TableConnection(self.url, "discovery", **{
            k: v for k, v in self.feed_options.items()
            if k in ("username", "password", "protocol", "tls_context")})
        while True:
            try:
                async with aiomqtt.Client(probe.host, probe.port, username=probe.username,
                                          password=probe.password, protocol=probe.protocol,
                                          tls_context=probe.tls,
                                          identifier=f"shoed-sink-{uuid.uuid4().hex[:8]}"
                                          ) as client:
                    await client.subscribe(topic, qos=1)
                    async for message in client.messages:
                        table = str(message.topic).split("/")[-2]
                        if table not in self.seen:
                            self.seen.add(table)
                            await self._claim(table)
            except aiomqtt.MqttError as error:
                log.info("sink_discovery_disconnected", broker=probe.brokers.current.url,
                         error=str(error))
                probe.brokers.advance(was_connected=False)  # the next broker of --url
                await asyncio.sleep(1.0)

    async def _serve(self, table: str) -> None:
        store = _LockedStore(self.conn, self.write_lock)
        # From the journal's start when nothing is stored yet; else the stored cursor
        # (a from_seq beside it would be "ignored" at every start, said as a warning).
        stored = await store.load(table)
        feed = TableFeed(self.url, table, root=f"{self.prefix}/{table}", cursor_store=store,
                         from_seq=1 if stored is None else None, **self.feed_options)
        recorded = 0  # feed.lost recorded so far

        def unstored(event: dict[str, Any], error: BaseException) -> None:
            log.error("sink_event_unstored", table=table, seq=event.get("seq"),
                      event_id=str(event.get("event_id")), error=f"{type(error).__name__}: "
                      f"{error}", action="kept whole in events_unstored; going on past it")

        async with feed:
            async for events in feed.batches(self.batch):
                lost = feed.lost[recorded:]
                async with self.write_lock:
                    if self._crash_after and self.stats["batches"] + 1 >= self._crash_after:
                        await self._crash_mid_transaction(table, events)
                    new = await apply_batch(self.conn, table, events, lost, unstored)
                recorded += len(lost)
                now = time.time()
                self.stats["batches"] += 1
                self.stats["events"] += len(events)
                self.stats["new"] += new
                for event in events:
                    with contextlib.suppress(ValueError, TypeError, AttributeError):
                        at = datetime.fromisoformat(event.get("ts", "").replace("Z", "+00:00"))
                        self.lag.append(now - at.timestamp())
                del self.lag[:-10_000]

    async def _crash_mid_transaction(self, table: str, events: list[dict[str, Any]]) -> None:
        """Test hook: die by SIGKILL with the batch's rows written, not committed."""
        async with self.conn.cursor() as cur:  # psycopg opens the transaction
            for event in events:
                await apply_event(cur, event)
            await cur.execute("UPDATE sink_cursor SET seq = %s WHERE table_id = %s",
                              (events[-1]["seq"], table))
        os.kill(os.getpid(), signal.SIGKILL)


async def run_sink(args: argparse.Namespace) -> int:
    options: dict[str, Any] = {}
    if not args.migrate_only:  # the options before the database is touched
        options = feed_options(args)
        if args.group and args.protocol != "5":
            raise OptionError("--group needs MQTT 5 shared subscriptions (--protocol 5)")
    try:  # libpq's own parse: a typo is the operator's, named as such (exit 2)
        conninfo_to_dict(args.postgres)
    except psycopg.ProgrammingError as error:
        raise OptionError(f"--postgres: {error}") from None
    try:
        admin = await psycopg.AsyncConnection.connect(args.postgres, autocommit=True)
    except psycopg.OperationalError as error:
        raise DatabaseUnreachable(f"--postgres: cannot connect: {error}".strip()) from None
    try:
        applied = await migrate(admin)
    finally:
        await admin.close()
    if applied:
        log.info("sink_migrated", applied=applied)
    if args.migrate_only:
        print(json.dumps({"migrations_applied": applied}))
        return 0
    tables = [t.strip() for t in args.tables.split(",") if t.strip()] if args.tables else None
    sink = Sink(args.url, args.postgres, prefix=args.prefix, tables=tables, group=args.group,
                feed_options={"grace_s": args.grace, **options})
    await sink.run()
    return 0


def sink(args: argparse.Namespace) -> int:
    from shoed import logs

    logs.configure("json", "info")
    try:
        return run_until_signalled(run_sink(args))
    except OptionError as error:
        print(f"shoed sink: {error}", file=sys.stderr)
        return 2
    except (psycopg.Error, OSError, DatabaseUnreachable) as error:
        log.error("sink_stopped", error=str(error))
        return 1
    except Exception as error:  # a fault of the sink's own: said in its log, not a trace
        log.error("sink_stopped", error=repr(error), exc_info=True)
        return 1
