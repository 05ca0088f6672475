"""`shoed tail`: a table's events, exactly once and in order, as lines or JSON."""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
from typing import Any

from shoed.aio import run_until_signalled

from .cursor import SQLiteCursorStore
from .feed import TableFeed
from .options import OptionError, feed_options


def describe(event: dict[str, Any]) -> str:
    """One human-readable line per event."""
    kind = event.get("type")
    ts = str(event.get("ts", ""))[11:23]
    head = f"{event.get('table_id')} {event.get('instance')}#{event.get('seq'):<6} {ts} " \
           f"hand {event.get('hand_no') if event.get('hand_no') is not None else '-':<3} "
    if kind == "card":
        what = (f"card {event.get('position') or 'pending'} {event.get('card') or '??'} "
                f"(index {event.get('card_index')}, {event.get('source')})")
    elif kind == "hand_result":
        what = (f"RESULT {str(event.get('winner')).upper()} player "
                f"{' '.join(event.get('player_cards') or [])} = {event.get('player_total')}, "
                f"banker {' '.join(event.get('banker_cards') or [])} = "
                f"{event.get('banker_total')}")
    elif kind == "alarm":
        state = "RAISED" if event.get("active") else "cleared"
        what = f"ALARM {state} {event.get('code')}: {event.get('message')}"
    elif kind == "hand_voided":
        what = f"hand VOIDED: {event.get('reason')} (by {event.get('operator') or 'rule'})"
    elif kind == "shoe_started":
        what = f"shoe started {event.get('shoe_id')} ({event.get('decks')} decks)"
    elif kind == "shoe_ended":
        what = (f"shoe ended: {event.get('hands_played')} hands, "
                f"{event.get('hands_voided')} voided")
    elif kind == "supervisor_action":
        what = f"supervisor {event.get('operator')}: {event.get('command')}"
    else:
        skip = {"schema_version", "type", "event_id", "seq", "ts", "table_id", "shoe_id",
                "hand_no", "instance"}
        rest = ", ".join(f"{k}={v}" for k, v in event.items() if k not in skip)
        what = f"{kind} {rest}".rstrip()
    return head + what


class TailError(Exception):
    """An option that cannot be used: one line naming it, exit 2."""


def _feed(args: argparse.Namespace) -> TableFeed:
    try:
        options = feed_options(args)
    except OptionError as error:
        raise TailError(str(error)) from None
    try:
        store = SQLiteCursorStore(args.cursor) if args.cursor else None
    except (OSError, sqlite3.Error) as error:
        raise TailError(f"--cursor {args.cursor}: cannot be used as the cursor's SQLite "
                        f"file: {error}") from None
    return TableFeed(args.url, args.table, root=f"{args.prefix}/{args.table}",
                     cursor_store=store, from_seq=args.from_seq, grace_s=args.grace,
                     **options)


async def run_tail(args: argparse.Namespace) -> int:
    feed = _feed(args)
    out = sys.stdout
    async with feed:
        async for event in feed:
            out.write((json.dumps(event) if args.json else describe(event)) + "\n")
            out.flush()  # handled = written out: only then may the cursor move
    return 0


def tail(args: argparse.Namespace) -> int:
    from shoed import logs

    # The client's own lines (a lost connection, a gap) go to stderr: stdout carries the
    # events alone (`--json`: one JSON event per line, for jq).
    logs.configure("console" if sys.stderr.isatty() else "json", "info", file=sys.stderr)
    try:
        return run_until_signalled(run_tail(args))  # SIGTERM/SIGINT: exit 0
    except TailError as error:
        print(f"shoed tail: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader of our output went away (`shoed tail | head`). What is still in
        # stdout's buffer would fail again at the interpreter's exit ("Exception ignored
        # ... BrokenPipeError", exit 120): stdout goes to /dev/null first, as the Python
        # docs' note on SIGPIPE says (seen once on a fresh Debian 12).
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
