"""The `shoed` command line (mqtt-api.md section 6)."""

from __future__ import annotations

import argparse
import asyncio
import json
import pathlib
import sys

from . import __version__


def _cmd_run(args: argparse.Namespace) -> int:
    from . import logs
    from .config import ConfigError, load_settings
    from .daemon import Daemon
    from .journal import StorageError

    try:
        settings = load_settings(args.config)
    except ConfigError as error:
        print(f"shoed: {error}", file=sys.stderr)
        return 2
    logs.configure(settings.log.format, settings.log.level)
    try:
        asyncio.run(Daemon(settings).run())
    except StorageError as error:
        logs.get().error("cannot_start", error=str(error))
        return 1
    except KeyboardInterrupt:
        return 0
    return 0


def _cmd_check_config(args: argparse.Namespace) -> int:
    from .config import ConfigError, load_settings

    try:
        settings = load_settings(args.path)
    except ConfigError as error:
        print(f"{args.path}: {error}", file=sys.stderr)
        return 2
    shown = settings.model_dump(mode="json")
    if shown["mqtt"].get("password_file"):
        shown["mqtt"]["password_file"] = str(settings.mqtt.password_file) + " (not shown)"
    print(f"{args.path}: OK")
    print(json.dumps(shown, indent=2))
    return 0


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

    result = analysis(args.decks, args.table)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    probabilities, edges = result["probabilities"], result["house_edge"]
    assert isinstance(probabilities, dict) and isinstance(edges, dict)
    print(f"{args.decks} deck(s), {args.table} table: exact, by full enumeration\n")
    print(f"{'outcome':<14}{'probability':>14}")
    for key, value in probabilities.items():
        print(f"{key:<14}{value:>14.7f}")
    print(f"\n{'bet':<14}{'house edge':>14}")
    for key, value in edges.items():
        print(f"{key:<14}{value * 100:>13.4f}%")
    return 0


def _cmd_simulate(args: argparse.Namespace) -> int:
    from .simulate_cli import simulate

    return simulate(args)


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import demo

    return demo(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="shoed", description="Electronic baccarat shoe daemon")
    parser.add_argument("--version", action="version", version=f"shoed {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="the daemon")
    run.add_argument("--config", required=True, type=pathlib.Path)
    run.set_defaults(func=_cmd_run)

    check = sub.add_parser("check-config", help="validate a config file")
    check.add_argument("path", type=pathlib.Path)
    check.set_defaults(func=_cmd_check_config)

    schema = sub.add_parser("schema", help="JSON Schema of events, state and commands")
    schema.set_defaults(func=_cmd_schema)

    spec = sub.add_parser("asyncapi", help="the AsyncAPI 3.0 document of the MQTT interface")
    spec.set_defaults(func=_cmd_asyncapi)

    tail_ = sub.add_parser("tail", help="print a table's events, exactly once and in order")
    add_feed_options(tail_)
    tail_.add_argument("--table", required=True, help="table id (topic root shoed/<id>)")
    tail_.add_argument("--from-seq", type=int, default=None,
                       help="start at this seq of the current instance (default: the "
                            "stored cursor, else what arrives now)")
    tail_.add_argument("--json", action="store_true", help="one JSON event per line")
    tail_.add_argument("--cursor", type=pathlib.Path, default=None,
                       help="SQLite cursor file (default: none; --from-seq or live)")
    tail_.set_defaults(func=_cmd_tail)

    sink_ = sub.add_parser("sink", help="write tables' events into PostgreSQL, exactly once")
    add_feed_options(sink_)
    sink_.add_argument("--postgres", required=True, help="libpq URL or DSN")
    sink_.add_argument("--tables", default=None,
                       help="comma-separated table ids; default: every table (wildcard)")
    sink_.add_argument("--group", default=None,
                       help="share the wildcard subscription among workers of this group "
                            "(MQTT 5 shared subscription)")
    sink_.add_argument("--migrate-only", action="store_true",
                       help="apply the database migrations and exit")
    sink_.set_defaults(func=_cmd_sink)

    analyze = sub.add_parser("analyze", help="exact probabilities and house edges")
    analyze.add_argument("--decks", type=int, default=8)
    analyze.add_argument("--table", choices=["commission", "super6"], default="commission")
    analyze.add_argument("--json", action="store_true")
    analyze.set_defaults(func=_cmd_analyze)

    sim = sub.add_parser("simulate", help="a simulated shoe (device role)")
    where = sim.add_mutually_exclusive_group()
    where.add_argument("--pty", action="store_true", help="create a pseudo-terminal (default)")
    where.add_argument("--port", help="an existing serial device to speak on")
    where.add_argument("--listen", metavar="HOST:PORT", help="serve TCP (socket:// in shoed)")
    sim.add_argument("--link", type=pathlib.Path, help="keep this symlink pointing at the pty")
    sim.add_argument("--record", type=pathlib.Path, help="append every dealt card to this file")
    add_simulation_options(sim)
    sim.set_defaults(func=_cmd_simulate)

    demo = sub.add_parser("demo", help="broker, simulated shoe and daemon, the table live")
    demo.add_argument("--config", type=pathlib.Path, help="use this config's broker and rules")
    demo.add_argument("--usb", action="store_true", help="the shoe as a simulated USB device")
    demo.add_argument("--betting", choices=["none", "commands"], default="commands",
                      help="commands: a simulated game server closes betting")
    demo.add_argument("--duration", type=float, default=0, help="stop after N seconds")
    add_simulation_options(demo)
    demo.set_defaults(func=_cmd_demo)
    return parser


def add_feed_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", default="mqtt://127.0.0.1:1883", help="the broker")
    parser.add_argument("--prefix", default="shoed", help="topic roots are <prefix>/<table>")
    parser.add_argument("--username", default=None)
    parser.add_argument("--password-file", type=pathlib.Path, default=None)
    parser.add_argument("--protocol", choices=["5", "3.1.1"], default="5")
    parser.add_argument("--grace", type=float, default=2.0,
                        help="seconds a gap may wait for late events before a replay")


def add_simulation_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--decks", type=int, default=8)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--pace", type=float, default=None,
                        help="seconds between pulls (0 = full speed)")
    parser.add_argument("--shoes", type=int, default=0, help="shoes to deal (0 = forever)")
    parser.add_argument("--multi-pull-rate", type=float, default=0.0)
    parser.add_argument("--unnecessary-rate", type=float, default=0.0)
    parser.add_argument("--unread-rate", type=float, default=0.0)
    parser.add_argument("--noise-rate", type=float, default=0.0)
    parser.add_argument("--duplicate-rate", type=float, default=0.0)
    parser.add_argument("--truncate-rate", type=float, default=0.0)
    parser.add_argument("--reboot-after", type=int, default=None, help="reboot after N cards")
    parser.add_argument("--rfid-manifest", type=pathlib.Path, default=None,
                        help="send RFID codes; write the deck manifest (uid,card) here")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
