"""Latency, throughput and footprint of shoed against a floor relay (docs/performance.md).

    .venv/bin/python bench/latency.py --cards 3000 --rounds 6  # latency: shoed and floor
    .venv/bin/python bench/latency.py --cards 3000 --rounds 5 --pin  # host on its own core
    .venv/bin/python bench/latency.py --cards 3000 --rounds 5 --subscriber process
                                          # the events taken in a process of their own
    .venv/bin/python bench/latency.py --throughput 600         # full-speed stop-and-wait
    .venv/bin/python bench/latency.py --footprint              # RSS, idle CPU, start->READY
    .venv/bin/python bench/latency.py --cards 5000 --rounds 5 --targets shoed,baseline \
        --baseline ../old-checkout                             # this tree against another
    .venv/bin/python bench/latency.py --cards 5000 --rounds 5 --targets shoed,baseline,floor \
        --baseline . --shoed-env SHOED_DAEMON__EVENT_LOOP=uvloop  # a setting against the default
    .venv/bin/python bench/latency.py --cards 1000 --targets shoed --journal /tmp/big
                                          # on a copy of a grown journal (grow_journal.py)
    .venv/bin/python bench/latency.py --cards 400 --rounds 2 --targets shoed,baseline \
        --baseline ../old-checkout --callgrind --pace 0.06  # instructions per card

Card-to-ACK: a CARD frame written to the pty -> its ACK read back. Card-to-event: the
same frame -> the `card` event received by a subscriber on a local Mosquitto. Durability
is on (shoed: SQLite WAL synchronous=FULL; floor: write + fsync). Each card is sent only
when the previous one is ACKed and 20 ms have passed, so no sample waits in a queue.
The targets take turns in rounds (`--rounds`), their order reversed every other round
(`--order mirrored`, the default; `same` keeps one order, as before 2026-12-04).

`--callgrind` runs each host under valgrind's callgrind and counts the instructions it
executes from its first card to its last, per card (`instructions_per_card`): the rounds
of one run agree within a fraction of a per cent, whatever else the machine does, as long
as the host keeps up with the cards (below), where CPU time moves ±10-15 % between rounds
on a shared VM. It counts work, not time: a cache miss costs no more than a hit. The
host runs 10-20 times slower (its start ~70), so time-driven work (the effect write's
coalescing, timers) happens at another rate than at full speed, and differently from
run to run: compare trees within one run. Latencies of such a run mean nothing.

Give such a run a slower pace (`--pace 0.06`): at the default 20 ms a host that needs
more than that under valgrind falls behind, its events go out in batches and its count
a card drops (a round of such a run read 0.884x where its others read 0.96-0.99x). The
bench warns when a host was busy over half the time; a round whose card-to-event p50
stands well above its others' fell behind (one did at a 25 % steal, even at 60 ms).
`--callgrind-keep DIR` keeps each round's counts, which bench/callgrind_split.py splits
by object file and by function.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import pathlib
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from procfs import (  # noqa: E402
    cpu_seconds,
    cpu_times,
    machine_busy_seconds,
    machine_steal_seconds,
    rss_kb,
    stop,
)
from quiet import ignore_closed_subscriber_writer  # noqa: E402
from ready import idle_shoe, notify_socket, wait_ready  # noqa: E402
from subscriber import take_events  # noqa: E402

from firmware_protocol import Delivered  # noqa: E402
from firmware_protocol.messages import Card  # noqa: E402
from shoed.config import write_config  # noqa: E402
from shoed.sim.broker import PrivateMosquitto  # noqa: E402
from shoed.sim.shoe import PtyShoe, Script, SimulatedShoe  # noqa: E402


class TimedShoe(SimulatedShoe):
    """The simulated shoe, noting when each CARD frame went out and when its ACK came."""

    def __post_init__(self) -> None:
        self.sent: dict[int, float] = {}  # seq -> first transmission
        self.acked: dict[int, float] = {}
        self.card_seqs: list[int] = []
        super().__post_init__()

    def _send(self, message: Any, now: float) -> bool:
        idle = self.link.idle
        ok = super()._send(message, now)
        if ok and isinstance(message, Card):
            seq = (self.link.next_seq - 1) % 65536
            self.card_seqs.append(seq)
            if idle:
                self.sent[seq] = time.perf_counter()
        return ok

    def on_link_event(self, event: Any, now: float) -> None:
        if isinstance(event, Delivered):
            self.acked.setdefault(event.seq, time.perf_counter())
        super().on_link_event(event, now)


# --pin: the bench (shoe, subscriber) and Mosquitto on CPU 0, the host under test alone on
# CPU 1, as on a table where the shoe is its own hardware and the host's work after an
# ACK cannot delay the shoe's reading of it. Both targets are pinned alike.
HOST_CPUS: set[int] | None = None
# --baseline: another checkout of shoed (with its own .venv), run as target "baseline".
BASELINE: pathlib.Path | None = None
# --profile: where shoed's cProfile statistics go (read them with pstats).
PROFILE: pathlib.Path | None = None
JOURNAL: pathlib.Path | None = None  # --journal: shoed starts on a copy of this state dir
# --shoed-env KEY=VALUE: set for the target "shoed" only (a setting to compare against the
# same tree as "baseline", e.g. SHOED_DAEMON__EVENT_LOOP=uvloop with --baseline .)
SHOED_ENV: dict[str, str] = {}
# --callgrind: every host under valgrind's callgrind, its instructions per card counted.
CALLGRIND = False
CALLGRIND_KEEP: pathlib.Path | None = None  # --callgrind-keep: the dumps copied here
CALLGRIND_SLOWDOWN = 100  # how much longer a start, a connect and the dealing may take
# A round whose machine lost more than this share of its CPUs to the hypervisor is named.
STEAL_WARN_PCT = 2.0
# --callgrind: a host busier than this share of a core meets cards faster than it works
# them off (~20-30 ms of CPU a card under valgrind on a slow day, a card every 20 ms)
CALLGRIND_BUSY_WARN = 0.5
# --subscriber: "bench" takes the events in the bench's own process, beside the simulated
# shoe (one loop: the shoe's handling of the host's frames and the events' arrival wait
# for each other); "process" in bench/subscriber.py, a process of its own, as the casino's
# system is apart from the shoe's hardware.
SUBSCRIBER = "bench"
TABLE = "B1"


def shoed_command(target: str) -> tuple[list[str], pathlib.Path | None]:
    """How to start the host under test: this tree's shoed, or the baseline checkout's."""
    if target == "baseline":
        assert BASELINE is not None, "--baseline PATH is needed for the baseline target"
        return [str(BASELINE / ".venv" / "bin" / "python"), "-m", "shoed.cli"], BASELINE
    if PROFILE is not None:  # --profile: the whole daemon under cProfile
        return [sys.executable, "-m", "cProfile", "-o", str(PROFILE), "-m", "shoed.cli"], None
    return [sys.executable, "-m", "shoed.cli"], None


def pin_host() -> None:
    if HOST_CPUS is not None:
        os.sched_setaffinity(0, HOST_CPUS)


def callgrind_prefix(tmp: pathlib.Path) -> list[str]:
    """valgrind's callgrind in front of a host's command (--callgrind); its counts are
    zeroed at the first card and dumped after the last (callgrind_control)."""
    if not CALLGRIND:
        return []
    return ["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp / 'callgrind.out'}"]


def callgrind_control(*args: str | subprocess.Popen[bytes]) -> None:
    words = [str(a.pid) if isinstance(a, subprocess.Popen) else a for a in args]
    done = subprocess.run(["callgrind_control", *words], capture_output=True, text=True,
                          timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"callgrind_control {' '.join(words)} failed: "
                           f"{done.stdout}{done.stderr}")


def counted_dumps(tmp: pathlib.Path) -> list[tuple[pathlib.Path, list[str]]]:
    """The dumps callgrind_control -d asked for (not the one a host's stop writes),
    each with its lines."""
    dumps = []
    for dump in sorted(tmp.glob("callgrind.out*")):
        lines = dump.read_text(errors="replace").splitlines()
        if "desc: Trigger: dump" in lines:
            dumps.append((dump, lines))
    return dumps


def callgrind_total(dumps: list[tuple[pathlib.Path, list[str]]]) -> int:
    """The instructions counted in these dumps (their `totals:` lines)."""
    return sum(int(line.split()[1]) for _, lines in dumps for line in lines
               if line.startswith("totals:"))


def keep_dumps(dumps: list[tuple[pathlib.Path, list[str]]], target: str) -> None:
    """--callgrind-keep: a round's counted dumps, as TARGET-rN.callgrind.out (and .1,
    .2, ... after the first), for bench/callgrind_split.py."""
    if CALLGRIND_KEEP is None:
        return
    CALLGRIND_KEEP.mkdir(parents=True, exist_ok=True)
    number = 1 + sum(1 for _ in CALLGRIND_KEEP.glob(f"{target}-r*.callgrind.out"))
    for kept, (dump, _) in enumerate(dumps):
        suffix = "" if kept == 0 else f".{kept}"
        shutil.copyfile(dump, CALLGRIND_KEEP / f"{target}-r{number}.callgrind.out{suffix}")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summary(values: list[float]) -> dict[str, float]:
    ms = [v * 1000 for v in values]
    return {"n": len(ms), "p50": round(statistics.median(ms), 3), "p99": round(pct(ms, 0.99), 3),
            "max": round(max(ms), 3)}


def shoed_config(tmp: pathlib.Path, port: str, mqtt_port: int, decks: int) -> pathlib.Path:
    return write_config(tmp / "shoed.toml", {
        "table": {"id": TABLE, "betting_control": "none"},
        "device": {"port": port},
        "mqtt": {"url": f"mqtt://127.0.0.1:{mqtt_port}"},
        "rules": {"decks": decks},
        "state": {"dir": str(tmp / "state")},
        "log": {"format": "json"},  # the default level (info), as deployed
    })


async def run_target(target: str, cards: int, pace: float, broker: PrivateMosquitto,
                     decks: int = 12, warm: bool = True) -> dict[str, Any]:
    """Deal `cards` to the host under test. `warm`: the shoe starts once the host is up
    (shoed: READY and connected to the broker; the floor: connected), and the CPU is
    counted from there: neither host's start (interpreter, imports, connect) is charged
    to its cards. Not warm: the shoe deals from the start (prune_cards.py)."""
    tmp = pathlib.Path(tempfile.mkdtemp(prefix=f"bench-{target}-"))
    slow = CALLGRIND_SLOWDOWN if CALLGRIND else 1
    loop = asyncio.get_running_loop()
    shoes = max(1, cards // (decks * 52 - 30) + 1)
    shoe = TimedShoe(decks=decks, seed=1, now=loop.time(),
                     script=Script(pace_s=pace, shoes=shoes, cut_card_from_end=20))
    pty = PtyShoe(shoe, link_path=tmp / "shoe")
    pty.plug()
    received: list[float] = []  # each first card event's arrival, in order
    is_shoed = target in ("shoed", "baseline")
    topic = f"shoed/{TABLE}/events" if is_shoed else "floor/events"
    kind = "shoed" if is_shoed else "floor"  # which events the subscriber counts

    if SUBSCRIBER == "process":  # the casino's system apart from the shoe
        sub_proc = subprocess.Popen(
            [sys.executable, str(ROOT / "bench" / "subscriber.py"), str(broker.port), topic,
             kind], stdout=subprocess.PIPE)
        assert sub_proc.stdout is not None
        line = await asyncio.to_thread(sub_proc.stdout.readline)
        if not line.startswith(b"ready"):
            stop(sub_proc)
            raise RuntimeError(f"the subscriber did not start (printed {line!r})")
    else:
        ready = asyncio.Event()
        sub = asyncio.create_task(take_events(broker.port, topic, kind, received, ready.set))
        await ready.wait()
    runner = None if warm else asyncio.create_task(pty.run())
    if is_shoed:
        notify = tmp / "notify.sock"
        sock = notify_socket(notify)
        config = shoed_config(tmp, str(tmp / "shoe"), broker.port, decks)
        if JOURNAL is not None:
            shutil.copytree(JOURNAL, tmp / "state")
            # On disk before the start, as a table's journal is: left dirty in the page
            # cache, the daemon's first fsync of the database (its first checkpoint)
            # would write the whole copy, ~60 ms for 200 MB, and time the bench's copy.
            os.sync()
        start = time.perf_counter()
        command, cwd = shoed_command(target)
        command = callgrind_prefix(tmp) + command
        extra = SHOED_ENV if target == "shoed" else {}
        proc = subprocess.Popen([*command, "run", "--config", str(config)], cwd=cwd,
                                env=dict(os.environ, NOTIFY_SOCKET=str(notify), **extra),
                                preexec_fn=pin_host,
                                stdout=open(tmp / "shoed.log", "wb"),  # noqa: SIM115
                                stderr=subprocess.STDOUT)
        ready_s = await wait_ready(sock, proc, start, 30 * slow, 0.005)
        if warm:  # after READY: the first connection to the broker
            log = tmp / "shoed.log"
            deadline = time.perf_counter() + 30 * slow
            while b'"mqtt_connected"' not in log.read_bytes():
                if time.perf_counter() > deadline or proc.poll() is not None:
                    stop(proc)
                    raise RuntimeError(f"{target} did not connect to the broker within "
                                       f"{30 * slow} s; its log: {log}")
                await asyncio.sleep(0.01)
    else:
        proc = subprocess.Popen([*callgrind_prefix(tmp), sys.executable,
                                 str(ROOT / "bench" / "floor_relay.py"),
                                 str(tmp / "shoe"), str(broker.port), str(tmp / "floor.log")],
                                stdout=subprocess.PIPE, preexec_fn=pin_host)
        ready_s = None
        if warm:  # it prints "ready" once connected (its connect() returned)
            assert proc.stdout is not None
            line = b""
            with contextlib.suppress(TimeoutError):
                line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline),
                                              30 * slow)
            if not line.startswith(b"ready"):
                stop(proc)  # its stdout closes, and the reading thread ends with it
                raise RuntimeError(f"the floor did not start within {30 * slow} s "
                                   f"(printed {line!r})")
    if CALLGRIND:
        callgrind_control("-z", proc)  # counted from here, as the CPU is
    started = time.perf_counter()
    cpu_before = cpu_times(proc.pid)  # the run's CPU, not the start's
    machine_before = machine_busy_seconds()
    steal_before = machine_steal_seconds()
    if runner is None:
        runner = asyncio.create_task(pty.run())
    deadline = started + (cards * max(pace, 0.004) * 3 + 120) * slow
    while len(shoe.card_seqs) < cards and time.perf_counter() < deadline:
        await asyncio.sleep(0.05)
    sent_cards = len(shoe.card_seqs)
    elapsed = time.perf_counter() - started
    await asyncio.sleep(1.0)
    user, system = (after - before for after, before in
                    zip(cpu_times(proc.pid), cpu_before, strict=True))
    machine = machine_busy_seconds() - machine_before
    steal = machine_steal_seconds() - steal_before
    steal_pct = 100 * steal / ((time.perf_counter() - started) * (os.cpu_count() or 1))
    rss = rss_kb(proc.pid)
    instructions = None
    if CALLGRIND:
        callgrind_control("-d", proc)  # the counts since the zero, to a file of their own
        dumps = counted_dumps(tmp)
        instructions = callgrind_total(dumps)
        keep_dumps(dumps, target)
    stop(proc, timeout=10 * slow)
    runner.cancel()
    if SUBSCRIBER == "process":
        sub_proc.send_signal(signal.SIGTERM)
        out, _ = await asyncio.to_thread(sub_proc.communicate)
        if sub_proc.returncode != 0:  # e.g. its connection to the broker failed
            raise RuntimeError(f"the subscriber failed (exit {sub_proc.returncode}); "
                               f"it printed {out[-200:]!r}")
        received += json.loads(out.decode().strip().splitlines()[-1])
    else:
        sub.cancel()
    pty.unplug()
    to_ack = [shoe.acked[s] - shoe.sent[s] for s in shoe.card_seqs
              if s in shoe.sent and s in shoe.acked]
    to_event = []
    for i, seq in enumerate(shoe.card_seqs):
        if seq in shoe.sent and i < len(received):
            to_event.append(received[i] - shoe.sent[seq])
    wall = time.time() - time.perf_counter()  # the shoe's times are perf_counter's
    return {"target": target, "cards_sent": sent_cards, "elapsed_s": round(elapsed, 2),
            "cards_per_s": round(sent_cards / elapsed, 1),
            "to_ack": to_ack, "to_event": to_event,
            # each card's (wall time sent, seconds to its ACK), and the host's log: for
            # benches that line cards up with what the daemon logged (prune_cards.py)
            "sent_to_ack": [(shoe.sent[s] + wall, shoe.acked[s] - shoe.sent[s])
                            for s in shoe.card_seqs if s in shoe.sent and s in shoe.acked],
            "log": str(tmp / "shoed.log") if is_shoed else None,
            "rss_kb_after": rss, "ready_s": round(ready_s, 3) if ready_s else None,
            "cpu_s": user + system, "cpu_user_s": user, "cpu_system_s": system,
            "machine_cpu_s": machine, "steal_pct": round(steal_pct, 1),
            "instructions": instructions}


def per_card(runs: list[dict[str, Any]], seconds: str) -> float:
    """Milliseconds of `seconds` (a CPU figure of each round) per card sent, pooled."""
    return round(1000 * sum(r[seconds] for r in runs)
                 / max(1, sum(r["cards_sent"] for r in runs)), 3)


def pooled(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One target's rounds together: samples pooled, the rest per round."""
    to_ack = [x for run in runs for x in run["to_ack"]]
    to_event = [x for run in runs for x in run["to_event"]]
    return {"target": runs[0]["target"], "rounds": len(runs),
            "cards_sent": sum(r["cards_sent"] for r in runs),
            "cards_per_s": [r["cards_per_s"] for r in runs],
            "card_to_ack_ms": summary(to_ack) if to_ack else None,
            "card_to_event_ms": summary(to_event) if to_event else None,
            # drift between rounds (machine noise): each round's p50 card-to-event
            "card_to_event_p50_by_round_ms": [round(statistics.median(r["to_event"]) * 1000,
                                                    3) for r in runs if r["to_event"]],
            "rss_kb_after": [r["rss_kb_after"] for r in runs],
            # user + system time of the host process while dealing (and 1 s after), per card
            "cpu_ms_per_card": per_card(runs, "cpu_s"),
            # drift between rounds: each round's CPU per card
            "cpu_ms_per_card_by_round": [per_card([r], "cpu_s") for r in runs],
            # the same in two parts: the process's own code, and the kernel's for it
            "cpu_user_ms_per_card": per_card(runs, "cpu_user_s"),
            "cpu_system_ms_per_card": per_card(runs, "cpu_system_s"),
            # the whole machine's busy CPU (bench, broker and kernel workers included)
            "machine_cpu_ms_per_card": per_card(runs, "machine_cpu_s"),
            # the share of the machine's CPUs its hypervisor took meanwhile (steal), per
            # round: a round with much of it measured a contended host
            "steal_pct_by_round": [r["steal_pct"] for r in runs],
            # --callgrind: instructions from the first card to the last, per card sent
            **({"instructions_per_card": round(sum(r["instructions"] for r in runs)
                                               / max(1, sum(r["cards_sent"] for r in runs))),
                "instructions_per_card_by_round": [
                    round(r["instructions"] / max(1, r["cards_sent"])) for r in runs]}
               if all(r["instructions"] is not None for r in runs) else {}),
            "ready_s": [r["ready_s"] for r in runs if r["ready_s"]]}


def ratios(results: list[dict[str, Any]], over: str = "floor") -> dict[str, float]:
    """shoed over the floor (or over the baseline checkout), per figure."""
    by = {r["target"]: r for r in results}
    if not {"shoed", over} <= by.keys():
        return {}
    # A figure a target has none of (no samples in its rounds: None) has no ratio.
    out = {f"{figure}_{q}": round(by["shoed"][figure][q] / by[over][figure][q], 2)
           for figure in ("card_to_ack_ms", "card_to_event_ms") for q in ("p50", "p99")
           if by["shoed"].get(figure) and by[over].get(figure)}
    for figure, name in (("cpu_ms_per_card", "cpu_per_card"),
                         ("cpu_user_ms_per_card", "cpu_user_per_card"),
                         ("cpu_system_ms_per_card", "cpu_system_per_card"),
                         ("machine_cpu_ms_per_card", "machine_cpu_per_card"),
                         ("instructions_per_card", "instructions_per_card")):
        if by[over].get(figure) and by["shoed"].get(figure):
            # instructions are counted, not timed: a third decimal means something
            digits = 3 if figure == "instructions_per_card" else 2
            out[name] = round(by["shoed"][figure] / by[over][figure], digits)
    # Round by round (the targets alternate, so a round's pair shares the machine's drift):
    # the spread says how far one run's pooled ratio can be trusted.
    for figure, name in (("cpu_ms_per_card_by_round", "cpu_per_card_by_round"),
                         ("card_to_event_p50_by_round_ms", "card_to_event_p50_by_round"),
                         ("instructions_per_card_by_round", "instructions_per_card_by_round")):
        pairs = zip(by["shoed"].get(figure, []), by[over].get(figure, []), strict=False)
        digits = 3 if name == "instructions_per_card_by_round" else 2
        if by_round := [round(a / b, digits) for a, b in pairs if b]:
            out[name] = by_round
    return out


async def footprint(broker: PrivateMosquitto, idle_s: float) -> dict[str, Any]:
    """Idle CPU over `idle_s` with heartbeats, and RSS, of shoed with a shoe attached."""
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="bench-idle-"))
    pty, runner = idle_shoe(tmp)
    config = shoed_config(tmp, str(tmp / "shoe"), broker.port, 8)
    notify = tmp / "notify.sock"
    sock = notify_socket(notify)
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "shoed.cli", "run", "--config", str(config)],
                            env=dict(os.environ, NOTIFY_SOCKET=str(notify)),
                            stdout=subprocess.DEVNULL)
    ready_s = await wait_ready(sock, proc, start, 30, 0.002)  # on an empty journal
    await asyncio.sleep(5)

    before = cpu_seconds(proc.pid)
    await asyncio.sleep(idle_s)
    used = cpu_seconds(proc.pid) - before
    rss = rss_kb(proc.pid)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=10)
    runner.cancel()
    pty.unplug()
    return {"idle_s": idle_s, "cpu_s": round(used, 3),
            "cpu_percent_of_one_core": round(100 * used / idle_s, 3), "rss_kb": rss,
            "ready_s": round(ready_s, 3) if ready_s else None}


async def main() -> None:
    ignore_closed_subscriber_writer(asyncio.get_running_loop())
    parser = argparse.ArgumentParser()
    parser.add_argument("--cards", type=int, default=0, help="latency run: cards per target")
    parser.add_argument("--pace", type=float, default=0.02)
    parser.add_argument("--throughput", type=int, default=0, help="full-speed run: cards")
    parser.add_argument("--footprint", action="store_true")
    parser.add_argument("--idle", type=float, default=60.0)
    parser.add_argument("--targets", default="shoed,floor")
    parser.add_argument("--rounds", type=int, default=1,
                        help="alternate the targets this many times, cards split evenly")
    parser.add_argument("--order", choices=("mirrored", "same"), default="mirrored",
                        help="the targets' order in a round: reversed every other round "
                             "(mirrored; use an even number of rounds) or the same in all")
    parser.add_argument("--pin", action="store_true",
                        help="bench and broker on CPU 0, the host under test on CPU 1")
    parser.add_argument("--baseline", type=pathlib.Path, default=None,
                        help="another checkout (with .venv) for the target 'baseline'")
    parser.add_argument("--journal", type=pathlib.Path, default=None,
                        help="start shoed on a copy of this state directory (one grown by "
                             "bench/grow_journal.py, table BENCH)")
    parser.add_argument("--shoed-env", action="append", default=[], metavar="KEY=VALUE",
                        help="an environment variable for the target 'shoed' only")
    parser.add_argument("--subscriber", choices=("bench", "process"), default="bench",
                        help="take the events in the bench's process (beside the simulated "
                             "shoe) or in a process of their own (bench/subscriber.py)")
    parser.add_argument("--profile", type=pathlib.Path, default=None,
                        help="run shoed under cProfile, statistics written here")
    parser.add_argument("--callgrind", action="store_true",
                        help="every host under valgrind's callgrind: instructions per card "
                             "(repeatable; the host ~10-20x slower: give it --pace 0.06, at which "
                             "1 000 cards a round take ~70 s)")
    parser.add_argument("--callgrind-keep", type=pathlib.Path, metavar="DIR",
                        help="with --callgrind: keep each round's counts in DIR "
                             "(TARGET-rN.callgrind.out), for bench/callgrind_split.py")
    args = parser.parse_args()
    if args.callgrind_keep is not None and not args.callgrind:
        parser.error("--callgrind-keep keeps what --callgrind counts: give both")
    for name, least in (("cards", 0), ("throughput", 0), ("rounds", 1)):
        if getattr(args, name) < least:
            parser.error(f"--{name} must be at least {least}, got {getattr(args, name)}")
    if not args.pace >= 0:  # NaN too
        parser.error(f"--pace must be 0 or more seconds, got {args.pace}")
    if not args.idle > 0:
        parser.error(f"--idle must be more than 0 seconds, got {args.idle}")
    if args.order == "mirrored" and args.rounds > 1 and args.rounds % 2:
        print(f"latency.py: {args.rounds} mirrored rounds: the first order runs once more "
              "than the other (an even number balances them)", file=sys.stderr)
    for item in args.shoed_env:
        key, sep, value = item.partition("=")
        if not sep or not key:
            parser.error(f"--shoed-env expects KEY=VALUE, got {item!r}")
        SHOED_ENV[key] = value
    global SUBSCRIBER, CALLGRIND, CALLGRIND_KEEP
    SUBSCRIBER = args.subscriber
    if args.callgrind:
        if args.profile is not None:
            parser.error("--callgrind and --profile each run the host under a tool: "
                         "choose one")
        if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
            parser.error("--callgrind needs valgrind and callgrind_control "
                         "(Debian: apt-get install valgrind)")
        CALLGRIND = True
        CALLGRIND_KEEP = args.callgrind_keep
        # The hosts' dicts and sets laid out alike in every run (it is read at their start).
        os.environ["PYTHONHASHSEED"] = "0"
    if args.profile is not None:
        global PROFILE
        PROFILE = args.profile.resolve()
    if args.journal is not None:
        global JOURNAL, TABLE
        JOURNAL, TABLE = args.journal.resolve(), "BENCH"
    if args.baseline is not None:
        global BASELINE
        BASELINE = args.baseline.resolve()
    if args.pin:
        global HOST_CPUS
        HOST_CPUS = {1}
        os.sched_setaffinity(0, {0})  # before the broker starts: it inherits CPU 0
    broker = PrivateMosquitto()
    broker.start()
    results: list[dict[str, Any]] = []
    try:
        for run, cards, pace in (("latency", args.cards, args.pace),
                                 ("throughput", args.throughput, 0.0)):
            if not cards:
                continue
            rounds: dict[str, list[dict[str, Any]]] = {}
            targets = args.targets.split(",")
            for number in range(args.rounds):  # alternating, so that drift hits both alike
                # Mirrored (A B, B A, A B, ...): a machine that speeds up or slows down
                # through the run favours no target. In the same order every round the
                # first target of each round meets the machine earlier, every time.
                mirror = args.order == "mirrored" and number % 2 == 1
                for target in reversed(targets) if mirror else targets:
                    result = await run_target(target, max(1, cards // args.rounds), pace,
                                              broker)
                    rounds.setdefault(target, []).append(result)
                    busy = result["cpu_s"] / max(result["elapsed_s"], 1e-9)  # of a core
                    if CALLGRIND and busy > CALLGRIND_BUSY_WARN:
                        print(f"latency.py: round {number + 1}, {target}: under valgrind the "
                              f"host was busy {busy:.0%} of a core at a card every "
                              f"{pace * 1000:g} ms: if it fell behind (its card-to-event "
                              "p50 well above its other rounds'), its events went out in "
                              "batches, which lowers the count a card; a slower --pace "
                              "leaves it room", file=sys.stderr)
                    if result["steal_pct"] > STEAL_WARN_PCT:
                        print(f"latency.py: round {number + 1}, {target}: the hypervisor "
                              f"took {result['steal_pct']}% of the machine's CPUs (steal); "
                              "this round measured a contended host", file=sys.stderr)
            pooled_runs = [{"run": run, **pooled(r)} for r in rounds.values()]
            results += pooled_runs
            if run == "latency" and (shoed_over_floor := ratios(pooled_runs)):
                results.append({"run": "latency", "shoed_over_floor": shoed_over_floor})
            if run == "latency" and (over_baseline := ratios(pooled_runs, "baseline")):
                results.append({"run": "latency", "shoed_over_baseline": over_baseline})
        if args.footprint:
            results.append({"run": "footprint", **await footprint(broker, args.idle)})
    finally:
        broker.stop()
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    asyncio.run(main())
