"""`shoed console [--config PATH] [--listen HOST:PORT] [--tables T01,T02,...]`."""

from __future__ import annotations

import argparse
import asyncio
import sys

from shoed.config import ConfigError, load_settings

from .server import ConsoleError, start_console, ws_url


async def _serve(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    console = await start_console(settings, args.listen, args.tables)
    tables = ", ".join(t["table_id"] for t in console.config["tables"])
    print(f"shoed console: {console.url}", flush=True)
    print(f"  broker (WebSockets): {ws_url(settings)}; tables: {tables}", flush=True)
    try:
        await console.serve_forever()
    finally:
        await console.close()
    return 0


def console_main(args: argparse.Namespace) -> int:
    try:
        return asyncio.run(_serve(args))
    except (ConfigError, ConsoleError) as error:
        print(f"shoed console: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        print(f"shoed console: cannot listen on {args.listen}: {error.strerror}",
              file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
