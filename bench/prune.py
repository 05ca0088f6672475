"""How long a retention prune holds the loop, on a grown journal (docs/performance.md).

    .venv/bin/python bench/grow_journal.py --events 300000 --state /tmp/big
    .venv/bin/python bench/prune.py --state /tmp/big --events 420 10000 [--batch 0]

On a copy of the journal, the prune the daemon's housekeeping runs (on the loop, at most
once an hour) drops the oldest N events: an hour of a busy table is about 420 events, a
day about 10 000. The journal's clocks are set so that exactly those are old by both
(the wall clock: `now` just past the N-th event's `created` plus the retention; the
uptime: far past every event's). The daemon deletes PRUNE_BATCH events at a time with
the loop free in between (shoed/store/recorder.py); `--batch 0` times one delete of all
of them (as before issue 20). Prints each case's batches, their total and the longest:
a card that arrives meanwhile waits at most that long for its ACK.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from shoed.store.journal import Journal
from shoed.store.recorder import PRUNE_BATCH

RETENTION_DAYS = 30


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--state", type=pathlib.Path, required=True)
    parser.add_argument("--events", type=int, nargs="+", default=[420, 10_000])
    parser.add_argument("--batch", type=int, default=PRUNE_BATCH,
                        help="events a delete at most (the daemon's); 0: all at once")
    args = parser.parse_args()
    for count in args.events:
        copy = pathlib.Path(tempfile.mkdtemp(prefix="bench-prune-")) / "state"
        shutil.copytree(args.state, copy)
        os.sync()  # on disk, as a table's journal is (bench/latency.py says why)
        journal = Journal(copy)
        first, _ = journal.event_range()
        row = journal._conn().execute("SELECT created FROM events WHERE seq = ?",
                                      (first + count - 1,)).fetchone()
        now = float(row[0]) + RETENTION_DAYS * 86400.0 + 1e-3
        journal.uptime.now = lambda: 1e12  # type: ignore[method-assign]
        limit = args.batch or None
        dropped, took = 0, []
        while True:
            start = time.perf_counter()
            batch = journal.prune(RETENTION_DAYS, now=now, limit=limit)
            took.append(time.perf_counter() - start)
            dropped += batch
            if limit is None or batch < limit:
                break
        print(f"prune of the oldest {count} events: dropped {dropped} in {len(took)} "
              f"batch(es) of at most {limit or 'all'}, {sum(took) * 1000:.1f} ms in all, "
              f"the longest {max(took) * 1000:.1f} ms, median {statistics.median(took) * 1000:.1f}")
        journal.close()
        shutil.rmtree(copy.parent)


if __name__ == "__main__":
    main()
