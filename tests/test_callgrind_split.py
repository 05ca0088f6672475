"""bench/callgrind_split.py: a callgrind dump's self costs by object and function, and
the calls of named functions, read from the compressed format as callgrind writes it."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

SCRIPT = pathlib.Path(__file__).resolve().parent.parent / "bench" / "callgrind_split.py"

# main (python) costs 100 + 50 itself and calls raise (python) twice, 30 inclusive; raise
# costs 30 itself; memcpy (libc) 20, called once from raise (its inclusive 20 is the
# callee's, not raise's). Names are given once, then by their (id) alone.
DUMP = """\
version: 1
creator: callgrind-3.19.0
cmd: python
events: Ir
ob=(1) /usr/bin/python3
fl=(1) ???
fn=(1) main
0 100
+1 50
cfn=(2) raise
calls=2 0
0 30
ob=(1)
fl=(1)
fn=(2)
0 30
cob=(2) /lib/libc.so.6
cfn=(3) memcpy
calls=1 0
0 20
ob=(2)
fl=(1)
fn=(3)
0 20
totals: 200
"""


def split(tmp_path: pathlib.Path, *args: str) -> subprocess.CompletedProcess[str]:
    dump = tmp_path / "shoed-r1.callgrind.out"
    dump.write_text(DUMP)
    return subprocess.run([sys.executable, str(SCRIPT), str(dump), *args],
                          capture_output=True, text=True, check=False)


def test_self_costs_by_object_and_function_and_the_calls_of_named_ones(
        tmp_path: pathlib.Path) -> None:
    done = split(tmp_path, "--cards", "2", "--calls", "raise,memcpy")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["instructions"] == 200  # the dump's totals: line, inclusive costs not added
    assert out["instructions_per_card"] == 100
    assert out["by_object_pct"] == {"/usr/bin/python3": 90.0, "/lib/libc.so.6": 10.0}
    assert [(f["function"], f["pct"]) for f in out["top_functions_pct"]] == [
        ("main", 75.0), ("raise", 15.0), ("memcpy", 10.0)]
    assert out["calls"]["raise"] == {"calls": 2, "calls_per_card": 1.0, "inclusive": 30,
                                     "inclusive_per_card": 15.0, "callers": {"main": 2}}
    assert out["calls"]["memcpy"]["callers"] == {"raise": 1}


def test_a_file_that_is_no_dump_and_a_bad_number_are_refused_by_name(
        tmp_path: pathlib.Path) -> None:
    other = tmp_path / "notes.txt"
    other.write_text("hello\n")
    done = subprocess.run([sys.executable, str(SCRIPT), str(other)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 2 and "no costs found" in done.stderr
    done = split(tmp_path, "--cards", "0")
    assert done.returncode == 2 and "--cards must be 1 or more, got 0" in done.stderr
