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
    if args.new_journal:
        settings.state.new_journal = True
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


def _cmd_check_journal(args: argparse.Namespace) -> int:
    from .journal_check import check_journal

    ok, lines = check_journal(args.path)
    for line in lines:
        print(line if ok else f"shoed: {line}", file=sys.stdout if ok else sys.stderr)
    return 0 if ok else 2


def _cmd_schema(args: argparse.Namespace) -> int:
    from .core.commands import COMMAND_ADAPTER
    from .core.events import EVENT_ADAPTER, StateSnapshot
    from .core.roads import RoadsMessage

    response = {"type": "object", "required": ["request_id", "ok", "error", "result"],
                "properties": {"request_id": {"type": ["string", "null"]},
                               "ok": {"type": "boolean"},
                               "error": {"type": ["object", "null"], "properties": {
                                   "code": {"type": "string"}, "message": {"type": "string"}}},
                               "result": {}}}
    print(json.dumps({
        "events": EVENT_ADAPTER.json_schema(),
        "commands": COMMAND_ADAPTER.json_schema(),
        "state": StateSnapshot.model_json_schema(),
        "roads": RoadsMessage.model_json_schema(),
        "response": response,
    }, indent=2))
    return 0


def _cmd_analyze(args: argparse.Namespace) -> int:
    from .core.analyze import analysis
    from .core.paytable import SIDE_BETS, PayTable, TableType

    table: PayTable | None = None
    decks: int | None = args.decks
    table_type: TableType | None = args.table
    if args.config is not None:
        from .config import ConfigError, load_settings

        try:
            rules = load_settings(args.config).rules
        except ConfigError as error:
            print(f"shoed: {error}", file=sys.stderr)
            return 2
        table_type = table_type or rules.table_type
        decks = rules.decks if decks is None else decks
        table = rules.model_copy(update={"table_type": table_type}).paytable()
    table_type = table_type or "commission"
    decks = 8 if decks is None else decks
    side_bets: list[str] | None = None
    if args.side_bets:
        side_bets = list(SIDE_BETS) if args.side_bets == "all" else [
            name.strip() for name in args.side_bets.split(",") if name.strip()]
        unknown = [name for name in side_bets if name not in SIDE_BETS]
        if unknown:
            print(f"shoed: --side-bets: expected 'all' or names from {', '.join(SIDE_BETS)}, "
                  f"got {', '.join(unknown)}", file=sys.stderr)
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
    from .simulate_cli import simulate

    return simulate(args)


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import demo

    return demo(args)


def _cmd_roads(args: argparse.Namespace) -> int:
    from .roads_cli import roads

    return roads(args)


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

    analyze = sub.add_parser("analyze", help="exact probabilities and house edges")
    analyze.add_argument("--decks", type=int, default=None,
                         help="1 to 12 (default: the config's rules.decks, else 8)")
    analyze.add_argument("--table", choices=["commission", "super6", "ez"], default=None,
                         help="table type (default: the config's, else commission)")
    analyze.add_argument("--side-bets", default=None, metavar="all|NAME,...",
                         help="side bets to analyse (default: those the table offers)")
    analyze.add_argument("--config", type=pathlib.Path, default=None,
                         help="take the pay table and side bets from this config file")
    analyze.add_argument("--json", action="store_true")
    analyze.set_defaults(func=_cmd_analyze)

    board = sub.add_parser("roads", help="the current scoreboard, read from the broker")
    board.add_argument("--config", type=pathlib.Path, default=None,
                       help="the daemon's config (broker, credentials, TLS, table)")
    board.add_argument("--timeout", type=float, default=5.0,
                       help="seconds to wait for the retained board")
    board.add_argument("--json", action="store_true", help="print the message as JSON")
    board.add_argument("--follow", action="store_true",
                       help="show every new board until Ctrl-C (survives a broker restart)")
    board.set_defaults(func=_cmd_roads)

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
    parser.add_argument("--unshuffled", action="store_true",
                        help="load every pack in new-deck order (the shoe-order watch's case)")
    parser.add_argument("--rfid-manifest", type=pathlib.Path, default=None,
                        help="send RFID codes; write the deck manifest (uid,card) here")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
