"""The mutation fuzzer's short form (the long run: scripts/fuzz_link.py --inputs 1000000)."""

from __future__ import annotations

import importlib.util
import pathlib

from faultlab import scale

SCRIPT = pathlib.Path(__file__).resolve().parent.parent / "scripts" / "fuzz_link.py"


def outcomes_line(report: dict[str, object]) -> str:
    outcomes = report["outcomes"]
    assert isinstance(outcomes, dict)
    return ", ".join(f"{k} {v}" for k, v in outcomes.items())


def test_mutated_streams_never_raise_and_stay_bounded() -> None:
    spec = importlib.util.spec_from_file_location("fuzz_link", SCRIPT)
    assert spec is not None and spec.loader is not None
    fuzz = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fuzz)
    report = fuzz.run(scale(20_000, 1_000_000), seed=3)
    print(f"fuzz: {report['inputs']} inputs, {report['bytes']} bytes, {outcomes_line(report)}")
    outcomes = report["outcomes"]
    assert outcomes.get("FrameRejected", 0) > 1000  # the mutations really broke frames
    assert outcomes.get("MessageReceived", 0) > 1000  # and good frames still got through
