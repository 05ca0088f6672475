"""The `shoed` command line (mqtt-api.md section 6)."""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import pathlib
import sys
from collections.abc import Callable

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
    from .core.commands import COMMAND_ADAPTER
    from .core.events import EVENT_ADAPTER, StateSnapshot

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
        "response": response,
    }, indent=2))
    return 0


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
                wanted = f"at least {low:g}"
            elif low is None:
                wanted = f"at most {high:g}"
            else:
                wanted = f"from {low:g} to {high:g}"
            raise argparse.ArgumentTypeError(f"must be {wanted}, got {text}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its own messages
    return parse


DECKS = number(int, 1, 12)
RATE = number(float, 0, 1)
SECONDS = number(float, 0, 10**7)


def host_port(text: str) -> str:
    """`HOST:PORT` (HOST may be empty: 127.0.0.1), PORT 1..65535."""
    _host, sep, port = text.rpartition(":")
    if not sep:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    try:
        number(int, 1, 65535)(port)
    except argparse.ArgumentTypeError as error:
        raise argparse.ArgumentTypeError(f"port {error} (in {text!r})") from None
    return text


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

    analyze = sub.add_parser("analyze", help="exact probabilities and house edges")
    analyze.add_argument("--decks", type=DECKS, default=8, help="1..12")
    analyze.add_argument("--table", choices=["commission", "super6"], default="commission")
    analyze.add_argument("--json", action="store_true")
    analyze.set_defaults(func=_cmd_analyze)

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
    demo.add_argument("--duration", type=SECONDS, default=0,
                      help="stop after N seconds (0 = run until Ctrl-C)")
    add_simulation_options(demo)
    demo.set_defaults(func=_cmd_demo)
    return parser


def add_simulation_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--decks", type=DECKS, default=8, help="1..12")
    parser.add_argument("--seed", type=number(int, 0, 2**64 - 1), default=None)
    parser.add_argument("--pace", type=number(float, 0, 3600), default=None,
                        help="seconds between pulls (0 = full speed)")
    parser.add_argument("--shoes", type=number(int, 0, 10**6), default=0,
                        help="shoes to deal (0 = forever)")
    for rate in ("multi-pull", "unnecessary", "unread", "noise", "duplicate", "truncate"):
        parser.add_argument(f"--{rate}-rate", type=RATE, default=0.0, help="0..1")
    parser.add_argument("--reboot-after", type=number(int, 1, 10**9), default=None,
                        help="reboot after N cards")
    parser.add_argument("--rfid-manifest", type=pathlib.Path, default=None,
                        help="send RFID codes; write the deck manifest (uid,card) here")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
