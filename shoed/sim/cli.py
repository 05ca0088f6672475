"""`shoed simulate`: the simulated shoe as its own process."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import sys

from .shoe import PtyShoe, Script, SimulatedShoe, TcpShoe, rfid_manifest


def build_shoe(args: argparse.Namespace, now: float, default_pace: float = 1.0
               ) -> SimulatedShoe:
    script = Script(
        pace_s=default_pace if args.pace is None else args.pace,
        multi_pull_rate=args.multi_pull_rate, unnecessary_rate=args.unnecessary_rate,
        unread_rate=args.unread_rate, noise_rate=args.noise_rate,
        duplicate_rate=args.duplicate_rate, truncate_rate=args.truncate_rate,
        reboot_after_cards=args.reboot_after, shoes=args.shoes,
        unshuffled=getattr(args, "unshuffled", False),
    )
    if args.rfid_manifest is not None:
        uids, csv_text = rfid_manifest(args.decks)
        args.rfid_manifest.write_text(csv_text)
        script.rfid = uids
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    shoe = SimulatedShoe(decks=args.decks, seed=seed, script=script, now=now)
    record = getattr(args, "record", None)
    if record is not None:
        shoe.record_to = open(record, "a", buffering=1)  # noqa: SIM115 - one per process
    return shoe


async def _serve_port(shoe: SimulatedShoe, port: str) -> None:
    import serial

    try:
        device = serial.serial_for_url(port, baudrate=115200, timeout=0)
    except ValueError as error:  # a URL pyserial cannot read: said as a port it cannot open
        raise OSError(f"--port {port!r}: {error}") from None
    loop = asyncio.get_running_loop()
    while True:
        data = device.read(4096)
        if data:
            shoe.receive_data(data, loop.time())
        shoe.poll(loop.time())
        out = shoe.data_to_send()
        if out:
            device.write(out)
        await asyncio.sleep(0.005)


async def _main(args: argparse.Namespace) -> None:
    loop = asyncio.get_running_loop()
    shoe = build_shoe(args, loop.time())
    print(f"simulated shoe: seed {shoe.seed}, {shoe.decks} deck(s), boot_id {shoe.boot_id}",
          flush=True)
    if args.listen:
        host, _, port = args.listen.rpartition(":")
        tcp = TcpShoe(shoe)
        server = await tcp.serve(host or "127.0.0.1", int(port))
        print(f"listening on {args.listen}: use port = \"socket://{args.listen}\"", flush=True)
        async with server:
            await tcp.run()
    elif args.port:
        print(f"speaking on {args.port}", flush=True)
        await _serve_port(shoe, args.port)
    else:
        pty = PtyShoe(shoe, link_path=args.link)
        path = pty.plug()
        print(path, flush=True)
        if args.link:
            print(f"symlink {args.link} -> {path}", flush=True)
        await pty.run()


def simulate(args: argparse.Namespace) -> int:
    from shoed.device.transports import SERIAL_PORT_FORMS, serial_port_problem

    if args.port is not None and (problem := serial_port_problem(args.port)):
        print(f"shoed simulate: --port: {args.port!r} {problem}; expected {SERIAL_PORT_FORMS}",
              file=sys.stderr)
        return 2
    try:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(_main(args))
    except OSError as error:  # a port, an address, a file of the options (serial's too)
        print(f"shoed simulate: {error}", file=sys.stderr, flush=True)
        return 2
    sys.stdout.flush()
    return 0
