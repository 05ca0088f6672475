"""What `shoed run` costs from its exec to READY=1 on an empty journal (docs/performance.md).

    .venv/bin/python bench/start_cost.py [--starts 5] [--tree DIR ...]
    .venv/bin/python bench/start_cost.py --instructions [--tree DIR ...]

Each start is a real daemon (`python -m shoed.cli run`, the log at info) with a simulated
shoe on a pty and no broker (READY does not wait for one), stopped once it said READY
on its NOTIFY_SOCKET. Wall-clock figures move with the machine's load: `--instructions`
runs each start under valgrind's callgrind instead and counts the instructions executed
up to READY (callgrind_control dumps the count at that moment), which is the same on
every run of the same tree. `--tree DIR` (repeatable) measures other checkouts too (each
with its own `.venv`), alternating with this one. Bytecode is written and used (the
environment's PYTHONDONTWRITEBYTECODE is dropped), as on a table installed with pip.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from procfs import stop  # noqa: E402
from ready import idle_shoe, notify_socket, wait_ready  # noqa: E402

from shoed.config import write_config  # noqa: E402

READY_WAIT_S = 600.0  # under callgrind a start is ~50 times slower


def config(tmp: pathlib.Path, port: str) -> pathlib.Path:
    return write_config(tmp / "shoed.toml", {
        "table": {"id": "B1", "betting_control": "none"},
        "device": {"port": port},
        "mqtt": {"url": "mqtt://127.0.0.1:9"},  # nothing listens: READY does not need it
        "rules": {"decks": 8},
        "state": {"dir": str(tmp / "state")},
        "log": {"format": "json"},
    })


async def one_start(tree: pathlib.Path, instructions: bool) -> float:
    """Seconds from exec to READY, or the instructions executed up to READY."""
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="bench-start-"))
    pty, runner = idle_shoe(tmp)
    notify = tmp / "notify.sock"
    sock = notify_socket(notify)
    command = [str(tree / ".venv" / "bin" / "python"), "-m", "shoed.cli", "run",
               "--config", str(config(tmp, str(tmp / "shoe")))]
    dump = tmp / "callgrind.out"
    if instructions:
        command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={dump}",
                   "--dump-instr=no", *command]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["NOTIFY_SOCKET"] = str(notify)
    start = time.perf_counter()
    proc = subprocess.Popen(command, cwd=tree, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        took = await wait_ready(sock, proc, start, READY_WAIT_S, 0.001)
        if took is None:
            raise SystemExit(f"{tree}: no READY (exit status {proc.poll()})")
        if not instructions:
            return took
        subprocess.run(["callgrind_control", "--dump=ready", str(proc.pid)], check=True,
                       capture_output=True, timeout=120)
        return float(ready_instructions(tmp))
    finally:
        stop(proc, timeout=60)
        runner.cancel()
        pty.unplug()
        sock.close()
        shutil.rmtree(tmp, ignore_errors=True)


def ready_instructions(tmp: pathlib.Path) -> int:
    """The instruction count of the dump callgrind_control asked for at READY."""
    for path in sorted(tmp.glob("callgrind.out*")):
        text = path.read_text(errors="replace")
        found = re.search(r"^summary: (\d+)", text, re.M)
        if re.search(r"^desc: Trigger: dump ready$", text, re.M) and found:
            return int(found.group(1))
    raise SystemExit(f"no callgrind dump at READY in {tmp}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--starts", type=int, default=5, help="starts per tree")
    parser.add_argument("--tree", action="append", default=[], type=pathlib.Path,
                        help="another checkout with its .venv (repeatable)")
    parser.add_argument("--instructions", action="store_true",
                        help="count instructions to READY under callgrind (deterministic)")
    args = parser.parse_args()
    if args.starts < 1:
        parser.error(f"--starts: {args.starts} is not a positive number of starts")
    if args.instructions and shutil.which("valgrind") is None:
        parser.error("--instructions needs valgrind (apt-get install valgrind)")
    trees = [ROOT, *(t.resolve() for t in args.tree)]
    for tree in trees:
        if not (tree / ".venv" / "bin" / "python").exists():
            parser.error(f"--tree {tree}: no .venv/bin/python there")
    starts = 1 if args.instructions else args.starts
    runs: dict[str, list[float]] = {str(t): [] for t in trees}
    for _ in range(starts):
        for tree in trees:  # alternating, so that the machine's drift hits each alike
            runs[str(tree)].append(await one_start(tree, args.instructions))
    out = []
    for tree, values in runs.items():
        if args.instructions:
            out.append({"tree": tree, "instructions_to_ready": int(values[0])})
        else:
            out.append({"tree": tree, "ready_s": [round(v, 3) for v in values],
                        "min_s": round(min(values), 3),
                        "median_s": round(statistics.median(values), 3)})
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    asyncio.run(main())
