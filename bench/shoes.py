"""Many simulated shoes in one process, each on its own pty (bench/scale.py starts it).

    python bench/shoes.py BASE_DIR TABLES PACE

It prints "ready" once every pty exists, and starts dealing when a line arrives on its
standard input (when every host has started, so that no shoe fills its buffer first).

For table i (named S00, S01, ...): the pty's path is kept as the symlink BASE_DIR/Sii/shoe,
and every dealt card is appended to BASE_DIR/Sii/dealt.txt with the moment it left
(CLOCK_MONOTONIC, comparable across processes). One process for all shoes keeps the
simulators' own overhead (a Python process each) out of what the daemons are measured on.
"""

from __future__ import annotations

import asyncio
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from shoed.sim.shoe import PtyShoe, Script, SimulatedShoe  # noqa: E402


async def main(base: pathlib.Path, tables: int, pace: float) -> None:
    loop = asyncio.get_running_loop()
    ptys = []
    for i in range(tables):
        folder = base / f"S{i:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        shoe = SimulatedShoe(decks=8, seed=i, now=loop.time(),
                             script=Script(pace_s=pace, shoes=1))
        shoe.record_to = open(folder / "dealt.txt", "a", buffering=1)  # noqa: SIM115
        pty = PtyShoe(shoe, link_path=folder / "shoe")
        pty.plug()
        ptys.append(pty)
    print("ready", flush=True)
    await asyncio.to_thread(sys.stdin.readline)
    await asyncio.gather(*(pty.run() for pty in ptys))


if __name__ == "__main__":
    asyncio.run(main(pathlib.Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])))
