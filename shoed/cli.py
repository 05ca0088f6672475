"""The `shoed` command line (mqtt-api.md section 6)."""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import pathlib
import re
import sys
from collections.abc import Callable

from . import __version__


def _cmd_run(args: argparse.Namespace) -> int:
    from .aio import exit_past_hung_device_calls
    return exit_past_hung_device_calls(_run_daemon(args))


def _run_daemon(args: argparse.Namespace) -> int:
    from . import logs
    from .aio import loop_factory
    from .config import ConfigError, check_device_port, load_settings
    from .daemon import Daemon
    from .errors import SupervisionFailed
    from .store.statedir import StorageError

    try:
        settings = load_settings(args.config)
        check_device_port(settings.device)
    except ConfigError as error:
        print(f"shoed: {error}", file=sys.stderr)
        return 2
    if args.new_journal:
        settings.state.new_journal = True
    logs.configure(settings.log.format, settings.log.level)
    try:
        factory, loop = loop_factory(settings.daemon.event_loop)
        if loop != settings.daemon.event_loop:
            logs.get().warning("event_loop_fallback", configured=settings.daemon.event_loop,
                               running=loop)
        with asyncio.Runner(loop_factory=factory) as runner:
            runner.run(Daemon(settings).run())
    except StorageError as error:
        logs.get().error("cannot_start", error=str(error))
        return 1
    except SupervisionFailed as error:
        logs.get().error("stopped_on_failure", error=str(error))
        return 1
    except KeyboardInterrupt:
        return 0
    except Exception:  # logged by the daemon (daemon_failed), its tasks stopped
        return 1
    return 0


def _cmd_check_config(args: argparse.Namespace) -> int:
    from .config import ConfigError, check_device_port, load_settings
    from .store.statedir import StorageError, check_state_dir

    try:
        settings = load_settings(args.path)
        check_device_port(settings.device)
        check_state_dir(settings.state.dir)  # the start's checks, creating nothing
    except (ConfigError, StorageError) as error:
        print(f"{args.path}: {error}", file=sys.stderr)
        return 2
    shown = settings.model_dump(mode="json")
    if shown["mqtt"].get("password_file"):
        shown["mqtt"]["password_file"] = str(settings.mqtt.password_file) + " (not shown)"
    print(f"{args.path}: OK")
    print(json.dumps(shown, indent=2))
    return 0


def _cmd_check_journal(args: argparse.Namespace) -> int:
    from .config import user_name
    from .store.check import check_journal

    try:
        ok, lines = check_journal(args.path)
    except OSError as error:  # e.g. a state directory this user may not read
        print(f"shoed: {error.filename or args.path}: {error.strerror or error} (as user "
              f"{user_name()}: run it as the daemon's user, or root)", file=sys.stderr)
        return 2
    for line in lines:
        print(line if ok else f"shoed: {line}", file=sys.stdout if ok else sys.stderr)
    return 0 if ok else 2


def _cmd_schema(args: argparse.Namespace) -> int:
    from .contract import schemas

    print(schemas.dumps(schemas.schema_document()))
    return 0


def _cmd_asyncapi(args: argparse.Namespace) -> int:
    from .contract import asyncapi

    print(asyncapi.dumps())
    return 0


def _cmd_tail(args: argparse.Namespace) -> int:
    from .client.tail import tail

    return tail(args)


def _cmd_sink(args: argparse.Namespace) -> int:
    from .sink.cli import sink

    return sink(args)


def _cmd_analyze(args: argparse.Namespace) -> int:
    from .core.analyze import analysis
    from .core.paytable import SIDE_BETS, PayTable, TableType

    table: PayTable | None = None
    decks: int | None = args.decks
    table_type: TableType | None = args.table
    if args.config is not None:
        from .config import ConfigError, load_settings

        try:
            # The pay table and the decks only: the secrets and the manifest it names
            # are not read (an auditor's copy of a table's config may lack them).
            rules = load_settings(args.config, files=False).rules
        except ConfigError as error:
            print(f"shoed: {error}", file=sys.stderr)
            return 2
        table_type = table_type or rules.table_type
        decks = rules.decks if decks is None else decks
        table = rules.model_copy(update={"table_type": table_type}).paytable(
            disabled=args.side_bets is not None)
    table_type = table_type or "commission"
    decks = 8 if decks is None else decks
    side_bets: list[str] | None = None
    if args.side_bets is not None:
        names = [name.strip() for name in args.side_bets.split(",")]
        given = args.side_bets.strip()
        side_bets = list(SIDE_BETS) if given == "all" else [] if given == "none" else names
        unknown = [name or "(an empty name)" for name in side_bets if name not in SIDE_BETS]
        twice = sorted({name for name in side_bets if side_bets.count(name) > 1})
        if unknown or twice:
            got = f"got {', '.join(unknown)}" if unknown else f"{', '.join(twice)} twice"
            print(f"shoed: --side-bets: expected 'all', 'none' or names from "
                  f"{', '.join(SIDE_BETS)}, "
                  f"each once; {got}", file=sys.stderr)
            return 2
    if not 1 <= decks <= 12:
        print(f"shoed: --decks: expected 1 to 12, got {decks}", file=sys.stderr)
        return 2
    result = analysis(decks, table_type, table, side_bets)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    probabilities, edges = result["probabilities"], result["house_edge"]
    assert isinstance(probabilities, dict) and isinstance(edges, dict)
    print(f"{decks} deck(s), {table_type} table: exact, by full enumeration\n")
    width = max(14, *(len(k) + 2 for k in probabilities))
    print(f"{'outcome':<{width}}{'probability':>14}")
    for key, value in probabilities.items():
        print(f"{key:<{width}}{value:>14.7f}")
    print(f"\n{'bet':<{width}}{'house edge':>14}")
    for key, value in edges.items():
        print(f"{key:<{width}}{value * 100:>13.4f}%")
    pays = result["side_bets"]
    assert isinstance(pays, dict)
    if pays:
        print("\nside bet pay tables (net units per unit staked; anything else loses)")
        for name, figures in pays.items():
            shown = ", ".join(f"{k} {v:g}" for k, v in figures.items())
            print(f"  {name}: {shown}")
    return 0


def _cmd_simulate(args: argparse.Namespace) -> int:
    from .sim.cli import simulate

    return simulate(args)


def _cmd_demo(args: argparse.Namespace) -> int:
    from .sim.demo import demo

    return demo(args)


def _cmd_roads(args: argparse.Namespace) -> int:
    from .roads_cli import roads

    return roads(args)


def _cmd_console(args: argparse.Namespace) -> int:
    from .console.cli import console_main

    return console_main(args)


def number(kind: type[int] | type[float], low: float | None = None,
           high: float | None = None) -> Callable[[str], float]:
    """An argparse `type=` that accepts a finite `kind` in low..high (either end optional).

    A bad value makes argparse print the option, the range and the value, and exit 2.
    """
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            noun = "a whole number" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"expected {noun}, got {text!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
        if (low is not None and value < low) or (high is not None and value > high):
            if high is None:
                wanted = f"at least {shown(low)}"
            elif low is None:
                wanted = f"at most {shown(high)}"
            else:
                wanted = f"from {shown(low)} to {shown(high)}"
            raise argparse.ArgumentTypeError(f"must be {wanted}, got {text}")
        return value

    def shown(bound: float | None) -> str:  # exactly: 18446744073709551615, not 1.8e+19
        return str(bound) if kind is int or (float(bound or 0).is_integer() and \
            abs(bound or 0) < 1e16) else f"{bound:g}"

    parse.__name__ = kind.__name__  # argparse names the type in its own messages
    return parse


DECKS = number(int, 1, 12)
RATE = number(float, 0, 1)
SECONDS = number(float, 0, 10**7)


def host_port(text: str, least: int = 1) -> str:
    """`HOST:PORT` (HOST may be empty: 127.0.0.1), PORT least..65535."""
    _host, sep, port = text.rpartition(":")
    if not sep:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    try:
        number(int, least, 65535)(port)
    except argparse.ArgumentTypeError as error:
        raise argparse.ArgumentTypeError(f"port {error} (in {text!r})") from None
    return text


def listen_address(text: str) -> str:
    """Where to serve: `HOST:PORT`, PORT 0..65535 (0: any free port, as `shoed console
    --listen` takes it)."""
    return host_port(text, least=0)


def table_id(text: str) -> str:
    """A table id as `table.id` takes it: letters, digits, `_.-` (a topic level, no
    wildcard)."""
    if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", text):
        raise argparse.ArgumentTypeError(
            f"expected a table id of letters, digits and _.- (at most 64), got {text!r}")
    return text


def broker_urls(text: str) -> str:
    """One broker URL, or several comma-separated, as mqtt.url takes them (not empty)."""
    from .mqtt.brokers import BrokerList, split_urls

    try:
        BrokerList.of(split_urls(text))
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


def table_ids(text: str) -> str:
    """A comma-separated list of table ids, as console.tables takes them, at least one (an
    empty `$TABLES` must not mean every table)."""
    from .config import tables_problem

    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise argparse.ArgumentTypeError(f"expected at least one table id, got {text!r}")
    if problem := tables_problem(items):
        raise argparse.ArgumentTypeError(problem)
    return text


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="shoed", description="Electronic baccarat shoe daemon")
    parser.add_argument("--version", action="version", version=f"shoed {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="the daemon")
    run.add_argument("--config", required=True, type=pathlib.Path)
    run.add_argument("--new-journal", action="store_true",
                     help="if the journal is damaged or foreign, move it aside and start a "
                          "new one (new instance id); a sound journal is kept")
    run.set_defaults(func=_cmd_run)

    check_j = sub.add_parser("check-journal", help="say whether a journal is sound "
                             "(exit 0) or what is wrong with it (exit 2)")
    check_j.add_argument("path", type=pathlib.Path, help="the journal or its state.dir")
    check_j.set_defaults(func=_cmd_check_journal)

    check = sub.add_parser("check-config", help="validate a config file")
    check.add_argument("path", type=pathlib.Path)
    check.set_defaults(func=_cmd_check_config)

    schema = sub.add_parser("schema", help="JSON Schema of events, state, roads and commands")
    schema.set_defaults(func=_cmd_schema)

    spec = sub.add_parser("asyncapi", help="the AsyncAPI 3.0 document of the MQTT interface")
    spec.set_defaults(func=_cmd_asyncapi)

    tail_ = sub.add_parser("tail", help="print a table's events, exactly once and in order")
    add_feed_options(tail_)
    tail_.add_argument("--table", required=True, type=table_id,
                       help="table id (topic root shoed/<id>)")
    tail_.add_argument("--from-seq", type=number(int, 1, 2**53 - 1), default=None,
                       help="start at this seq of the current instance, when --cursor "
                            "holds no cursor yet (a stored cursor wins, with a warning; "
                            "default: the stored cursor, else what arrives now)")
    tail_.add_argument("--json", action="store_true", help="one JSON event per line")
    tail_.add_argument("--cursor", type=pathlib.Path, default=None,
                       help="SQLite cursor file (default: none; --from-seq or live)")
    tail_.set_defaults(func=_cmd_tail)

    sink_ = sub.add_parser("sink", help="write tables' events into PostgreSQL, exactly once")
    add_feed_options(sink_)
    sink_.add_argument("--postgres", required=True, help="libpq URL or DSN")
    which = sink_.add_mutually_exclusive_group()
    which.add_argument("--tables", default=None, type=table_ids,
                       help="comma-separated table ids; default: every table (wildcard)")
    which.add_argument("--group", default=None, type=table_id,
                       help="share the wildcard subscription among workers of this group "
                            "(MQTT 5 shared subscription)")
    sink_.add_argument("--migrate-only", action="store_true",
                       help="apply the database migrations and exit")
    sink_.set_defaults(func=_cmd_sink)

    analyze = sub.add_parser("analyze", help="exact probabilities and house edges")
    analyze.add_argument("--decks", type=DECKS, default=None,
                         help="1 to 12 (default: the config's rules.decks, else 8)")
    analyze.add_argument("--table", choices=["commission", "super6", "ez"], default=None,
                         help="table type (default: the config's, else commission)")
    analyze.add_argument("--side-bets", default=None, metavar="all|none|NAME,...",
                         help="side bets to analyse (default: those the table offers)")
    analyze.add_argument("--config", type=pathlib.Path, default=None,
                         help="take the pay table and side bets from this config file")
    analyze.add_argument("--json", action="store_true")
    analyze.set_defaults(func=_cmd_analyze)

    board = sub.add_parser("roads", help="the current scoreboard, read from the broker")
    board.add_argument("--config", type=pathlib.Path, default=None,
                       help="the daemon's config (broker, credentials, TLS, table)")
    board.add_argument("--timeout", type=number(float, 0.1, 3600), default=5.0,
                       help="seconds to wait for the retained board")
    board.add_argument("--json", action="store_true", help="print the message as JSON")
    board.add_argument("--follow", action="store_true",
                       help="show every new board until Ctrl-C (survives a broker restart)")
    board.set_defaults(func=_cmd_roads)

    sim = sub.add_parser("simulate", help="a simulated shoe (device role)")
    where = sim.add_mutually_exclusive_group()
    where.add_argument("--pty", action="store_true", help="create a pseudo-terminal (default)")
    where.add_argument("--port", help="an existing serial device to speak on")
    where.add_argument("--listen", metavar="HOST:PORT", type=host_port,
                       help="serve TCP (socket:// in shoed)")
    sim.add_argument("--link", type=pathlib.Path, help="keep this symlink pointing at the pty")
    sim.add_argument("--record", type=pathlib.Path, help="append every dealt card to this file")
    add_simulation_options(sim)
    sim.set_defaults(func=_cmd_simulate)

    demo = sub.add_parser("demo", help="broker, simulated shoe and daemon, the table live")
    demo.add_argument("--config", type=pathlib.Path, help="use this config's broker and rules")
    demo.add_argument("--usb", action="store_true", help="the shoe as a simulated USB device")
    demo.add_argument("--betting", choices=["none", "commands"], default="commands",
                      help="commands: a simulated game server closes betting")
    demo.add_argument("--betting-time", type=SECONDS, default=2.0, metavar="SECONDS",
                      help="how long the simulated game server keeps betting open")
    demo.add_argument("--duration", type=SECONDS, default=0,
                      help="stop after N seconds (0 = run until Ctrl-C)")
    demo.add_argument("--broker", metavar="URL", type=broker_urls,
                      help="use the broker at this mqtt:// URL (default: the config's)")
    demo.add_argument("--own-broker", action="store_true",
                      help="start the demo's own mosquitto even if a broker answers")
    demo.add_argument("--table", metavar="ID", type=table_id,
                      help="table id (default: DEMO, or the first free DEMOn on a shared "
                           "broker)")
    demo.add_argument("--no-supervisor", action="store_true",
                      help="leave holds to the person at the console")
    demo.add_argument("--supervisor-delay", type=SECONDS, default=3.0, metavar="SECONDS",
                      help="how long the simulated supervisor lets a hold show")
    demo.add_argument("--no-console", action="store_true", help="do not start the web console")
    demo.add_argument("--console-listen", type=listen_address, metavar="HOST:PORT",
                      help="where the web console listens (default 127.0.0.1:8080, or a "
                           "free port)")
    add_simulation_options(demo)
    # The shoe's decks reach the daemon's rules too; without --decks: the config's, or 8.
    demo.set_defaults(func=_cmd_demo, decks=None, unread_rate=0.02)

    console = sub.add_parser("console", help="the table console: a web page, live")
    console.add_argument("--config", type=pathlib.Path, help="broker and table (default: "
                         "built-in defaults and SHOED_ variables)")
    console.add_argument("--listen", default=None, metavar="HOST:PORT",
                         help="where to serve the page (default console.listen, "
                              "127.0.0.1:8080)")
    console.add_argument("--tables", default=None, metavar="T01,T02,...",
                         help="the pit page's tables (default console.tables, or table.id)")
    console.set_defaults(func=_cmd_console)
    return parser


def add_feed_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", default="mqtt://127.0.0.1:1883",
                        help="the broker, or several comma-separated to fail over between")
    parser.add_argument("--prefix", default="shoed", help="topic roots are <prefix>/<table>")
    parser.add_argument("--username", default=None)
    parser.add_argument("--password-file", type=pathlib.Path, default=None)
    parser.add_argument("--protocol", choices=["5", "3.1.1"], default="5")
    parser.add_argument("--grace", type=number(float, 0, 3600), default=2.0,
                        help="seconds a gap may wait for late events before a replay")
    parser.add_argument("--ca-file", type=pathlib.Path, default=None,
                        help="the CA bundle that signed the broker's certificate (mqtts://; "
                             "default: the system's)")
    parser.add_argument("--cert-file", type=pathlib.Path, default=None,
                        help="a client certificate (PEM), for a broker that asks for one")
    parser.add_argument("--key-file", type=pathlib.Path, default=None,
                        help="its key, when not in --cert-file")


def add_simulation_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--decks", type=DECKS, default=8, help="1..12")
    parser.add_argument("--seed", type=number(int, 0, 2**64 - 1), default=None)
    parser.add_argument("--pace", type=number(float, 0, 3600), default=None,
                        help="seconds between pulls (0 = full speed)")
    parser.add_argument("--shoes", type=number(int, 0, 10**6), default=0,
                        help="shoes to deal (0 = forever)")
    for rate in ("multi-pull", "unnecessary", "unread", "noise", "duplicate", "truncate"):
        parser.add_argument(f"--{rate}-rate", type=RATE, default=0.0, help="0..1")
    # (the demo's --unread-rate defaults to 0.02: see its set_defaults)
    parser.add_argument("--reboot-after", type=number(int, 1, 10**9), default=None,
                        help="reboot after N cards")
    parser.add_argument("--unshuffled", action="store_true",
                        help="load every pack in new-deck order (the shoe-order watch's case)")
    parser.add_argument("--rfid-manifest", type=pathlib.Path, default=None,
                        help="send RFID codes; write the deck manifest (uid,card) here")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except BrokenPipeError:
        # The reader of our output went away (`shoed schema | head`): no traceback, and
        # none from the interpreter's flush of stdout at exit either.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
