"""A table's events exactly once and in order, and its commands, over MQTT (aiomqtt).

    async with TableFeed("mqtt://broker:1883", "T01",
                         cursor_store=SQLiteCursorStore("t01.cursor")) as feed:
        async for event in feed:
            handle(event)           # the cursor moves only after this returns
        answer = await feed.command("void_hand", hand_no=3, reason="misdeal")

Delivery on the broker is at least once and may lose events across a broker restart
(docs/integrating.md). The feed turns that into exactly once, in `seq` order:

- an event already yielded (same instance, seq not above the cursor) is dropped: that is
  the deduplication by `event_id` (an event_id names one (instance, seq));
- an event ahead of the next expected seq waits in a buffer; if the missing ones have not
  arrived after `grace_s` (they may be late, e.g. `state` overtakes events), the feed asks
  the daemon to `replay` exactly the missing range, paging with `next_from_seq`;
- the retained `state` names the last seq: a tail that never arrived is replayed too;
- on start the feed asks for everything after the stored cursor;
- an event of another `instance` (the journal was reset) starts a new stream at seq 1,
  never a gap; events of an instance left behind are dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import ssl
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import aiomqtt
import structlog

from shoed.aio import cancel_and_wait, wait_set
from shoed.mqtt.brokers import BrokerList, split_urls

from .cursor import Cursor, CursorStore, MemoryCursorStore
from .errors import CommandTimeout, EventsLost, error_for, replaced_losses

log = structlog.get_logger("shoed.client")
_HELD = re.compile(r"within (\d+)\.\.(\d+)")


def _held_range(error: dict[str, Any]) -> tuple[int, int] | None:
    """The journal's range, from an out_of_range error: its `first_seq` and `last_seq`,
    or, from a daemon before them, as its message states it."""
    first, last = error.get("first_seq"), error.get("last_seq")
    if type(first) is int and type(last) is int:
        return first, last
    found = _HELD.search(str(error.get("message")))
    return (int(found[1]), int(found[2])) if found else None


def instance_of(event: dict[str, Any]) -> str:
    """The event's journal instance: its `instance` field, else derived from `event_id`
    (`{table_id}-{instance}-{seq}`, as daemons before the field published it)."""
    value = event.get("instance")
    if not isinstance(value, str) or not value:
        event_id = str(event.get("event_id", ""))
        table = str(event.get("table_id", ""))
        middle = event_id[len(table) + 1:] if table and event_id.startswith(table + "-") \
            else event_id
        value = middle.rsplit("-", 1)[0]
    # Some builds wrote the instance as `i<id>` inside ids: one spelling for both.
    return value[1:] if value.startswith("i") and len(value) > 1 else value


class TableConnection:
    """One MQTT connection to one table's topics: reconnects by itself, sends commands and
    matches their answers. :class:`TableFeed` adds the event stream."""

    def __init__(self, url: str, table: str, *, root: str | None = None,
                 username: str | None = None, password: str | None = None,
                 operator: str | None = None, protocol: str = "5",
                 client_id: str | None = None, command_timeout_s: float = 5.0,
                 command_retries: int = 3, tls_context: ssl.SSLContext | None = None) -> None:
        # One broker, or several (a list or comma-separated) to fail over between.
        try:
            self.brokers = BrokerList.of(split_urls(url))
        except ValueError as error:
            raise ValueError(f"expected mqtt:// or mqtts:// URLs, got {url!r}: {error}"
                             ) from None
        if len({b.tls for b in self.brokers.brokers}) > 1:
            raise ValueError(f"{url!r}: every broker must use TLS (mqtts://), or none")
        self.tls = tls_context or (ssl.create_default_context()
                                   if self.brokers.current.tls else None)
        self.table = table
        self.root = (root or f"shoed/{table}").rstrip("/")
        self.username, self.password = username, password
        self.operator = operator or username or "shoed-client"
        self.protocol = (aiomqtt.ProtocolVersion.V5 if protocol == "5"
                         else aiomqtt.ProtocolVersion.V311)
        self.client_id = client_id
        self.command_timeout_s = command_timeout_s
        self.command_retries = command_retries
        if username:
            self.cmd_topic = f"{self.root}/cmd/by/{username}"
            self.response_topic = f"{self.root}/cmd/response/{username}"
        else:
            self.cmd_topic = f"{self.root}/cmd"
            self.response_topic = f"{self.root}/cmd/response"
        self._client: aiomqtt.Client | None = None
        self._connected = asyncio.Event()
        self._pending: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self.connects = 0
        self.last_error: str | None = None  # why the last connection failed or ended

    # -- lifecycle --------------------------------------------------------------------------

    async def __aenter__(self) -> TableConnection:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"shoed-client-{self.table}")

    async def close(self) -> None:
        self._closing = True
        if self._task is not None:
            # Cancelled again until it ends: on 3.11 aiomqtt's publish can swallow a cancel.
            await cancel_and_wait((self._task,))
            self._task = None

    def topics(self) -> list[str]:
        return [self.response_topic]

    @property
    def host(self) -> str:
        """The broker the connection is on (or tries next)."""
        return self.brokers.current.host

    @property
    def port(self) -> int:
        return self.brokers.current.port

    async def wait_connected(self, timeout: float | None = None) -> None:
        """Return once connected; TimeoutError after `timeout` seconds."""
        if not await wait_set(self._connected, timeout):
            raise TimeoutError(f"not connected to {self.host}:{self.port} within {timeout} s")

    async def _run(self) -> None:
        delay = 0.2
        while not self._closing:
            connects = self.connects
            try:
                identifier = self.client_id or f"shoed-client-{uuid.uuid4().hex[:10]}"
                async with aiomqtt.Client(
                        self.host, self.port, identifier=identifier,
                        username=self.username, password=self.password,
                        protocol=self.protocol, tls_context=self.tls,
                        clean_session=None if self.protocol == aiomqtt.ProtocolVersion.V5
                        else self.client_id is None,
                        keepalive=15, timeout=5) as client:
                    for topic in self.topics():
                        await client.subscribe(topic, qos=1)
                    self._client = client
                    self.connects += 1
                    self.brokers.connected()
                    self._connected.set()
                    delay = 0.2
                    await self.on_connect()
                    async for message in client.messages:
                        try:
                            self._dispatch(str(message.topic), message.payload,
                                           bool(message.retain))
                        except Exception:  # one bad message must not stop the feed
                            log.exception("client_message_failed", table=self.table,
                                          topic=str(message.topic))
            except aiomqtt.MqttCodeError as error:
                # The broker answered and said no (credentials, authorisation, protocol):
                # it will say so again until someone changes something.
                self.last_error = str(error)
                log.warning("client_refused", table=self.table, url=self.brokers.current.url,
                            username=self.username, error=str(error),
                            action="trying again; check the user, its password and the "
                                   "broker's ACL")
            except aiomqtt.MqttError as error:
                self.last_error = str(error)
                level = log.warning if "SSL" in self.last_error or "certificate" in \
                    self.last_error else log.info
                level("client_disconnected", table=self.table, url=self.brokers.current.url,
                      error=str(error))
            finally:
                self._client = None
                self._connected.clear()
            # The next broker of the list: at once, unless a round is over or it dropped.
            if self.brokers.advance(was_connected=self.connects > connects):
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    async def on_connect(self) -> None:
        """Called after each (re)connect and subscribe."""

    def _dispatch(self, topic: str, payload: Any, retained: bool = False) -> None:
        try:
            data = json.loads(payload) if payload else None
        except ValueError:
            log.warning("client_bad_json", topic=topic)
            return
        if not isinstance(data, dict):
            return
        self.on_message(topic, data, retained)

    def on_message(self, topic: str, data: dict[str, Any], retained: bool = False) -> None:
        """One message; `retained`: delivered from the broker's store of retained
        messages (on subscribing), not as it was published."""
        if topic == self.response_topic:
            future = self._pending.get(str(data.get("request_id")))
            if future is not None and not future.done():
                future.set_result(data)

    # -- commands ---------------------------------------------------------------------------

    async def command(self, name: str, *, request_id: str | None = None,
                      operator: str | None = None, timeout_s: float | None = None,
                      retries: int | None = None, **fields: Any) -> Any:
        """Send one command and return its answer's `result`, or raise a
        :class:`~shoed.client.errors.CommandError` subclass naming the refusal.

        Unanswered within `timeout_s`, it is sent again (`retries` times) with the same
        `request_id`: the daemon applies a request_id once and answers a repeat with the
        original answer, so a retry never applies a command twice.
        """
        answer = await self.request(name, request_id=request_id, operator=operator,
                                    timeout_s=timeout_s, retries=retries, **fields)
        if not answer.get("ok"):
            raise error_for(answer)
        return answer.get("result")

    async def request(self, name: str, *, request_id: str | None = None,
                      operator: str | None = None, timeout_s: float | None = None,
                      retries: int | None = None, **fields: Any) -> dict[str, Any]:
        """Like :meth:`command` but returns the whole answer, ok or not."""
        request_id = request_id or f"{self.operator}-{uuid.uuid4().hex}"
        body = json.dumps({"request_id": request_id, "command": name,
                           "operator": operator or self.operator, **fields})
        timeout = self.command_timeout_s if timeout_s is None else timeout_s
        attempts = (self.command_retries if retries is None else retries) + 1
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        started = time.monotonic()
        try:
            for _ in range(attempts):
                deadline = time.monotonic() + timeout
                with contextlib.suppress(aiomqtt.MqttError):
                    client = self._client if await wait_set(self._connected, timeout) \
                        else None
                    if client is not None:
                        await client.publish(self.cmd_topic, body, qos=1)
                # asyncio.wait, not wait_for: the future is kept, and a cancel is never
                # swallowed as the answer arrives (3.11).
                await asyncio.wait((future,), timeout=max(0.01, deadline - time.monotonic()))
                if future.done():
                    return future.result()
            raise CommandTimeout(request_id, name, attempts, time.monotonic() - started,
                                 None if self._connected.is_set() else
                                 self.last_error or "never connected")
        finally:
            self._pending.pop(request_id, None)


class TableFeed(TableConnection):
    """Every event of one table exactly once, in seq order (see the module docstring).

    `from_seq` starts at that seq of the current instance when no cursor is stored;
    without either, the feed starts with the first event that arrives (`from_seq=1` to
    take the whole journal). Iterate with ``async for event in feed`` (one event per
    turn) or ``async for batch in feed.batches(n)``; the cursor is saved when the loop
    asks for the next item, that is after the caller's code for the last one returned.
    """

    def __init__(self, url: str, table: str, *, cursor_store: CursorStore | None = None,
                 from_seq: int | None = None, grace_s: float = 2.0,
                 replay_page_wait_s: float = 5.0, **options: Any) -> None:
        super().__init__(url, table, **options)
        self.store: CursorStore = cursor_store or MemoryCursorStore()
        self.from_seq = from_seq
        self.grace_s = grace_s
        self.replay_page_wait_s = replay_page_wait_s
        self.instance: str | None = None
        self.next_seq: int | None = None  # the next seq to yield
        self.retired: set[str] = set()
        self._buffer: dict[int, dict[str, Any]] = {}
        self._head = 0  # the highest seq known to exist in the current instance
        self._ready: list[dict[str, Any]] = []
        self._wake = asyncio.Event()
        self._uncommitted: Cursor | None = None
        self._loaded = False
        self._gap_task: asyncio.Task[None] | None = None
        self._replaying = False
        self.stats = {"duplicates": 0, "replays": 0, "replayed": 0, "instances": 0,
                      "buffered_max": 0}
        self.lost: list[EventsLost] = []
        # The journal we were in when a new one replaced it, and our cursor in it: the
        # first answer of the new one says where the old one ended (_check_replaced).
        self._replaced: tuple[str, int] | None = None

    def topics(self) -> list[str]:
        return [f"{self.root}/events", f"{self.root}/replay", f"{self.root}/state",
                self.response_topic]

    async def start(self) -> None:
        if not self._loaded:
            cursor = await self.store.load(self.table)
            self._loaded = True
            if cursor is not None:
                self.instance, self.next_seq = cursor.instance, cursor.seq + 1
                self._head = cursor.seq
                if self.from_seq is not None:  # the stored cursor wins: said, not silent
                    log.warning("client_from_seq_ignored", table=self.table,
                                from_seq=self.from_seq, cursor_instance=cursor.instance,
                                cursor_seq=cursor.seq,
                                action=f"going on from the stored cursor, seq {cursor.seq + 1}")
            elif self.from_seq is not None:
                self.next_seq = self.from_seq
                self._head = self.from_seq - 1
        await super().start()

    async def close(self) -> None:
        # Closing from here: a message dispatched while the gap task's cancel is waited
        # for must not start another one, left pending when the loop closes (asyncio's
        # "Task was destroyed but it is pending!" at the end of `shoed tail | head`).
        self._closing = True
        gaps, self._gap_task = self._gap_task, None
        try:
            if gaps is not None:
                await cancel_and_wait((gaps,))
        finally:  # a cancel meanwhile (SIGTERM) still stops the connection's task
            await super().close()

    async def on_connect(self) -> None:
        # After a (re)connect: anything after what we have may have been lost meanwhile.
        if self.next_seq is not None:
            self._head = max(self._head, self.next_seq)  # probe one past the cursor
            self._schedule_gap(0.0)

    # -- the stream -------------------------------------------------------------------------

    def on_message(self, topic: str, data: dict[str, Any], retained: bool = False) -> None:
        leaf = topic[len(self.root) + 1:]
        if leaf in ("events", "replay"):
            self._take_event(data)
        elif leaf == "state":
            self._take_state(data, retained)
        else:
            super().on_message(topic, data, retained)

    def _take_state(self, state: dict[str, Any], retained: bool = False) -> None:
        seq = state.get("seq")
        if not isinstance(seq, int):
            return
        instance = state.get("instance")
        if isinstance(instance, str) and instance:
            instance = instance_of({"instance": instance})
            if self.instance is not None and instance != self.instance:
                if instance in self.retired:
                    return
                if retained and self.next_seq is not None:
                    # From the broker's store: maybe older than the stream (a broker back
                    # from its persistence file keeps the `state` of a journal replaced
                    # since). Not taken for a new journal on its word: the daemon is asked
                    # (a replay probe past the cursor); the events it replays, or its
                    # answer's `instance`, name the live journal (outside review: a stale
                    # retained state retired the live journal for good).
                    log.info("client_retained_state_of_another_instance", table=self.table,
                             current=self.instance, retained=instance,
                             action="asking the daemon which journal is live")
                    self._head = max(self._head, self.next_seq)
                    self._schedule_gap(0.0)
                    return
                self._new_instance(instance)
            elif self.instance is None and self.next_seq is None:
                return  # live start: begin with the next event itself
            elif self.instance is None:
                self.instance = instance  # from_seq counts in the current journal
        elif self.instance is None and self.next_seq is None:
            return
        if seq > self._head:
            self._head = seq
            self._schedule_gap(self.grace_s)

    def _take_event(self, event: dict[str, Any]) -> None:
        seq = event.get("seq")
        if not isinstance(seq, int) or "event_id" not in event:
            log.warning("client_not_an_event", table=self.table, event=str(event)[:200])
            return
        instance = instance_of(event)
        event.setdefault("instance", instance)
        if self.instance is None:
            self.instance = instance
            if self.next_seq is None:
                self.next_seq = seq  # live start
        elif instance != self.instance:
            if instance in self.retired:
                self.stats["duplicates"] += 1
                return
            self._new_instance(instance)
        assert self.next_seq is not None
        if seq < self.next_seq or seq in self._buffer:
            self.stats["duplicates"] += 1
            return
        self._buffer[seq] = event
        self.stats["buffered_max"] = max(self.stats["buffered_max"], len(self._buffer))
        self._head = max(self._head, seq)
        self._release()
        if self._buffer or self._head >= self.next_seq:
            self._schedule_gap(self.grace_s)

    def _new_instance(self, instance: str) -> None:
        log.warning("client_new_instance", table=self.table, old=self.instance, new=instance)
        if self.instance is not None:
            self.retired.add(self.instance)
            if self.next_seq is not None:  # where we were in it: checked against the
                self._replaced = (self.instance, self.next_seq - 1)  # daemon's answer
        self.instance = instance
        self.stats["instances"] += 1
        self._buffer = {s: e for s, e in self._buffer.items() if instance_of(e) == instance}
        self.next_seq = 1
        self._head = max(self._buffer, default=0)
        self._release()
        if self._replaced is not None:  # a probe past the cursor: its answer says where
            self._head = max(self._head, self.next_seq)  # the old journal ended
        self._schedule_gap(0.0 if self._head else self.grace_s)

    def _check_replaced(self, answer: dict[str, Any]) -> None:
        """The first answer of the journal that replaced ours: were events of the old one
        published that we never got? (:func:`replaced_losses`; outside review: a consumer
        behind on the old journal skipped its last events without a word.)"""
        if self._replaced is None:
            return
        (old, cursor), self._replaced = self._replaced, None
        body = answer.get("result") or answer.get("error") or {}
        lost = replaced_losses(old, cursor, body.get("previous_instance"))
        for each in lost:
            log.error("client_events_lost", table=self.table, error=str(each),
                      action="compare with the replaced journal, moved aside in the "
                             "daemon's state directory (shoed check-journal DIR)"
                      if each.possible else "")
        self.lost.extend(lost)

    def _release(self) -> None:
        assert self.next_seq is not None
        while self.next_seq in self._buffer:
            self._ready.append(self._buffer.pop(self.next_seq))
            self.next_seq += 1
        if self._ready:
            self._wake.set()

    def _missing(self) -> tuple[int, int] | None:
        if self.next_seq is None or self._head < self.next_seq:
            return None
        upper = min(self._buffer) - 1 if self._buffer else self._head
        return (self.next_seq, upper) if upper >= self.next_seq else None

    def _schedule_gap(self, delay: float) -> None:
        if self._closing:
            return
        if self._gap_task is None or self._gap_task.done():
            self._gap_task = asyncio.create_task(self._fill_gaps(delay))

    async def _fill_gaps(self, delay: float) -> None:
        await asyncio.sleep(delay)
        while not self._closing:
            missing = self._missing()
            if missing is None:
                return
            if self._client is None:
                await self._connected.wait()
                continue
            first, last = missing
            probe = last == self._head and not self._buffer
            self.stats["replays"] += 1
            instance = self.instance
            try:
                span: dict[str, Any] = {} if probe else {"to_seq": last}
                answer = await self.request("replay", from_seq=first, **span,
                                            timeout_s=self.replay_page_wait_s, retries=2)
            except CommandTimeout as error:
                log.warning("client_replay_unanswered", table=self.table, error=str(error))
                continue
            if instance is not None and instance != self.instance:
                continue  # a new journal meanwhile: its own gaps are computed afresh
            named = (answer.get("result") or answer.get("error") or {}).get("instance")
            named = instance_of({"instance": named}) if isinstance(named, str) and named \
                else None
            if named is not None and named == self.instance:
                self._check_replaced(answer)
            if named is not None and self.instance is not None \
                    and named != self.instance and named not in self.retired:
                self._new_instance(named)  # the daemon's live journal is another
                held = _held_range(answer.get("error") or {})
                result = answer.get("result") or {}
                ends = [v for v in (held[1] if held else None, result.get("to_seq"))
                        if isinstance(v, int)]
                self._head = max([self._head, *ends])  # what it holds: read from seq 1
                continue
            if not answer.get("ok"):
                code = (answer.get("error") or {}).get("code")
                if code != "out_of_range":
                    log.warning("client_replay_refused", table=self.table, answer=answer)
                    await asyncio.sleep(self.grace_s)
                    continue
                held = _held_range(answer.get("error") or {})
                if held is not None and first < held[0]:
                    # a probe knows no upper end: all before the first held is gone
                    gone = held[0] - 1 if probe else min(last, held[0] - 1)
                    lost = EventsLost(self.instance, first, gone)
                    log.error("client_events_lost", table=self.table, error=str(lost))
                    self.lost.append(lost)
                    self.next_seq = gone + 1
                    self._release()
                    continue
                # Nothing at or after `first` (yet): the head is what we have.
                self._head = (held[1] if held is not None and held[1] < first
                              else first - 1)
                return
            result = answer.get("result") or {}
            count = int(result.get("count") or 0)
            self.stats["replayed"] += count
            for key in ("to_seq", "next_from_seq"):  # more pages: keep asking
                value = result.get(key)
                if isinstance(value, int) and value > self._head:
                    self._head = value
            # The events were published before the answer; give stragglers a moment.
            deadline = time.monotonic() + self.grace_s
            while time.monotonic() < deadline and self._missing() == missing:
                await asyncio.sleep(0.02)
            if probe and count == 0:
                return

    # -- iteration --------------------------------------------------------------------------

    async def commit(self) -> None:
        """The last event (or batch) given out is handled: save the cursor now. The loop
        does this itself when it asks for the next item; call it before a ``break`` that
        comes after the handling, or that last event is delivered again at the next
        start (at least once, never lost). A loop that ends by an exception in the
        handling, or a ``break`` before it, must not call it."""
        await self._commit()

    async def _commit(self) -> None:
        if self._uncommitted is not None:
            cursor, self._uncommitted = self._uncommitted, None
            await self.store.save(self.table, cursor)

    async def batches(self, max_items: int = 500) -> AsyncIterator[list[dict[str, Any]]]:
        await self.start()
        while True:
            await self._commit()
            while not self._ready:
                self._wake.clear()
                task = self._task
                if task is not None and task.done() and not task.cancelled():
                    error = task.exception()
                    if error is not None:
                        raise error
                await wait_set(self._wake, 1.0)
            batch, self._ready = self._ready[:max_items], self._ready[max_items:]
            last = batch[-1]
            self._uncommitted = Cursor(instance_of(last), int(last["seq"]))
            yield batch

    async def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        async for batch in self.batches(1):
            yield batch[0]

    async def __aenter__(self) -> TableFeed:
        await self.start()
        return self
