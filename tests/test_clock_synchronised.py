"""`status.clock_synchronised`: the kernel's word, else systemd-timesyncd's.

The shipped unit denies adjtimex (ProtectClock=yes, the @clock group: EPERM); the
status must still say whether the clock is synchronised where timesyncd keeps it."""

from __future__ import annotations

import ctypes
import pathlib

import pytest

from shoed import clock


class _Refused:
    """A libc whose adjtimex the sandbox refuses (-1, EPERM)."""

    def adjtimex(self, timex: object) -> int:
        ctypes.set_errno(1)
        return -1


@pytest.fixture
def refused(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> pathlib.Path:
    monkeypatch.setattr(clock, "_libc", lambda: _Refused())
    monkeypatch.setattr(clock, "_cached", (-clock.CACHE_S - 1e9, None))
    monkeypatch.setattr(clock, "TIMESYNCD", tmp_path / "timesync")
    return tmp_path / "timesync"


def _ask() -> bool | None:
    clock._cached = (-clock.CACHE_S - 1e9, None)
    return clock.clock_synchronised()


def test_refused_adjtimex_asks_timesyncd(refused: pathlib.Path) -> None:
    assert _ask() is None  # no timesyncd: not known
    refused.mkdir()
    assert _ask() is False  # timesyncd runs, not synchronised yet
    (refused / "synchronized").touch()
    assert _ask() is True


def test_the_kernels_answer_comes_first(monkeypatch: pytest.MonkeyPatch,
                                        refused: pathlib.Path) -> None:
    class Libc:
        def __init__(self, state: int) -> None:
            self.state = state

        def adjtimex(self, timex: object) -> int:
            return self.state

    refused.mkdir()
    (refused / "synchronized").touch()
    monkeypatch.setattr(clock, "_libc", lambda: Libc(clock.TIME_ERROR))
    assert _ask() is False
    monkeypatch.setattr(clock, "_libc", lambda: Libc(0))
    assert _ask() is True
