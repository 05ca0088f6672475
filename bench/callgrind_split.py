"""Where a host's counted instructions go: a callgrind dump split by object file and
by function, and how often chosen functions were called.

    .venv/bin/python bench/latency.py --cards 800 --pace 0.06 --targets shoed \\
        --callgrind --callgrind-keep /tmp/cg
    .venv/bin/python bench/callgrind_split.py /tmp/cg/shoed-r1.callgrind.out \\
        --cards 800 --calls PyTraceBack_Here,PyErr_Format

`callgrind_annotate` does not resolve the dump of a run whose counters were zeroed
(`callgrind_control -z`, as bench/latency.py does at the first card), so this reads the
format itself: the self cost of each `fn=` (its cost lines, not those after a `calls=`
line, which are the callee's inclusive cost) summed by object (`ob=`) and function;
and, for the functions named by `--calls`, the calls counted on their `calls=` lines,
the callee's inclusive cost, and their callers. Names are compressed in the format as
`(id) name` at their first use and `(id)` after; both are read. A stripped binary's
static functions appear as addresses, and their cost is theirs, not their neighbours'.

With `--cards` the counts are also given per card (the cards the run sent).
"""

from __future__ import annotations

import argparse
import collections
import json
import pathlib
import re
import sys
from dataclasses import dataclass, field

NAME = re.compile(r"^(ob|fl|fi|fe|fn|cob|cfi|cfl|cfn)=\((\d+)\)(?: (.*))?$")
# cfi/cfl/fi/fe name files, cob objects, cfn functions: one table per kind of name
TABLE = {"ob": "ob", "cob": "ob", "fn": "fn", "cfn": "fn",
         "fl": "fl", "fi": "fl", "fe": "fl", "cfi": "fl", "cfl": "fl"}


@dataclass
class Split:
    total: int = 0
    by_object: collections.Counter[str] = field(default_factory=collections.Counter)
    by_function: collections.Counter[tuple[str, str]] = field(
        default_factory=collections.Counter)
    calls: collections.Counter[str] = field(default_factory=collections.Counter)
    inclusive: collections.Counter[str] = field(default_factory=collections.Counter)
    callers: dict[str, collections.Counter[str]] = field(
        default_factory=lambda: collections.defaultdict(collections.Counter))


def read(path: pathlib.Path, split: Split) -> None:
    """Add one dump's costs (its first event: instructions) to `split`."""
    names: dict[str, dict[str, str]] = {"ob": {}, "fl": {}, "fn": {}}
    ob = fn = cfn = "?"
    after_calls = False
    with path.open(errors="replace") as lines:
        for raw in lines:
            line = raw.rstrip("\n")
            if match := NAME.match(line):
                kind, ident, name = match.groups()
                table = names[TABLE[kind]]
                if name is not None:
                    table[ident] = name
                value = table.get(ident, f"({ident})")
                if kind == "ob":
                    ob = value
                elif kind == "fn":
                    fn = value
                elif kind == "cfn":
                    cfn = value
                continue
            if line.startswith("calls="):
                count = int(line[len("calls="):].split()[0])
                split.calls[cfn] += count
                split.callers[cfn][fn] += count
                after_calls = True
                continue
            if not line or not (line[0].isdigit() or line[0] in "+-*"):
                continue
            parts = line.split()
            cost = int(parts[1]) if len(parts) > 1 else 0
            if after_calls:  # the call's inclusive cost: the callee's, not this fn's
                split.inclusive[cfn] += cost
                after_calls = False
                continue
            split.total += cost
            split.by_object[ob] += cost
            split.by_function[(ob, fn)] += cost


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dumps", nargs="+", type=pathlib.Path)
    parser.add_argument("--top", type=int, default=30, help="functions listed")
    parser.add_argument("--calls", default="",
                        help="comma-separated function names: their calls and callers")
    parser.add_argument("--cards", type=int, help="cards the run sent: figures per card")
    args = parser.parse_args()
    if args.top < 0:
        parser.error(f"--top must be 0 or more, got {args.top}")
    if args.cards is not None and args.cards < 1:
        parser.error(f"--cards must be 1 or more, got {args.cards}")
    split = Split()
    for path in args.dumps:
        try:
            read(path, split)
        except OSError as error:
            parser.error(f"cannot read {path}: {error.strerror}")
        except ValueError as error:
            parser.error(f"{path} is not a callgrind dump ({error})")
    if split.total == 0:
        parser.error("no costs found: are these callgrind dumps?")

    def share(cost: int) -> float:
        return round(100 * cost / split.total, 2)

    per = (lambda n: round(n / args.cards, 2)) if args.cards else (lambda n: None)
    wanted = [name for name in args.calls.split(",") if name]
    out = {
        "instructions": split.total, "instructions_per_card": per(split.total),
        "by_object_pct": {ob: share(c) for ob, c in split.by_object.most_common()},
        "top_functions_pct": [
            {"function": fn, "object": pathlib.Path(ob).name, "pct": share(c)}
            for (ob, fn), c in split.by_function.most_common(args.top)],
        "calls": {name: {"calls": split.calls[name], "calls_per_card": per(split.calls[name]),
                         "inclusive": split.inclusive[name],
                         "inclusive_per_card": per(split.inclusive[name]),
                         "callers": dict(split.callers[name].most_common(6))}
                  for name in wanted},
    }
    json.dump(out, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
