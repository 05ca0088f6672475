"""The record's fdatasync started, then waited for (``state.record_sync = "aio"``).

With Linux native AIO the engine works out a frame's events while the kernel syncs its
record; the ACK and the events still wait for the sync, and a sync that fails rolls the
engine and the outbox back (docs/decisions.md 141). The blocking sync keeps the order
record, ACK, engine. Each is tried here on a real file, through the recorder, and
through the whole daemon over a real pty and Mosquitto (tests/test_daemon_e2e.py).
"""

from __future__ import annotations

import ctypes
import errno
import os
import pathlib
from typing import Any

import pytest
from kit import asynctest

from firmware_protocol import DedupState
from shoed.core.config import EngineConfig
from shoed.core.engine import Engine
from shoed.core.inputs import Notice
from shoed.device.inputs import stamp
from shoed.status import TableStatus
from shoed.store import recorder as rec
from shoed.store.datasync import AioSync, BlockingSync, open_datasync
from shoed.store.journal import Journal


def _aio() -> AioSync:
    try:
        return AioSync()
    except OSError as error:  # a kernel without it: the daemon falls back (tested below)
        pytest.skip(f"no native AIO here: {error}")


@pytest.fixture
def data_file(tmp_path: pathlib.Path) -> Any:
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT, 0o600)
    yield fd
    os.close(fd)


# -- the datasync itself ---------------------------------------------------------------------


def test_an_aio_datasync_completes_and_only_one_runs_at_a_time(data_file: int) -> None:
    sync = _aio()
    try:
        for n in range(3):
            os.pwrite(data_file, b"x" * 100, n * 100)
            sync.start(data_file)
            with pytest.raises(RuntimeError, match="already pending"):
                sync.start(data_file)
            sync.wait()
            sync.wait()  # nothing pending: returns at once
        assert sync.kind == "aio" and sync.fallback is None
    finally:
        sync.close()


def test_a_bad_descriptor_is_an_oserror_naming_it(tmp_path: pathlib.Path) -> None:
    sync = _aio()
    fd = os.open(tmp_path / "g", os.O_RDWR | os.O_CREAT, 0o600)
    os.close(fd)
    try:
        with pytest.raises(OSError) as raised:
            sync.start(fd)
        assert raised.value.errno == errno.EBADF
        sync.wait()  # nothing was started
    finally:
        sync.close()


def _fake_syscall(sync: AioSync, name: str, result: Any) -> None:
    """Make the AIO system call `name` answer `result(sync)` (others go through)."""
    real = sync._syscall
    number = sync._nr[name]

    def syscall(nr: int, *args: Any) -> int:
        return int(result(sync)) if nr == number else int(real(nr, *args))

    sync._syscall = syscall  # type: ignore[assignment]


def test_a_refused_submit_goes_blocking_for_good(data_file: int) -> None:
    sync = _aio()

    def refused(_: AioSync) -> int:
        ctypes.set_errno(errno.EINVAL)
        return -1

    _fake_syscall(sync, "io_submit", refused)
    try:
        sync.start(data_file)  # synced at once, with os.fdatasync
        assert sync.kind == "blocking"
        assert sync.fallback is not None and "Invalid argument" in sync.fallback
        sync.wait()
        sync.start(data_file)  # and from then on
    finally:
        sync.close()


def test_a_sync_that_failed_in_the_kernel_is_an_oserror(data_file: int) -> None:
    sync = _aio()

    def failed(s: AioSync) -> int:
        s._event.res = -errno.EIO
        return 1

    sync.start(data_file)
    sync.wait()
    sync.start(data_file)
    _fake_syscall(sync, "io_getevents", failed)
    with pytest.raises(OSError) as raised:
        sync.wait()
    assert raised.value.errno == errno.EIO
    sync.close()


def test_open_datasync_by_name() -> None:
    blocking, why = open_datasync("blocking")
    assert isinstance(blocking, BlockingSync) and why is None
    aio, why = open_datasync("aio")
    assert aio.kind == "aio" or (aio.kind == "blocking" and why)
    aio.close()
    with pytest.raises(ValueError, match="'blocking' or 'aio', got 'fast'"):
        open_datasync("fast")


# -- through the recorder ---------------------------------------------------------------------


class Log:
    def __init__(self) -> None:
        self.lines: list[tuple[str, dict[str, Any]]] = []

    def info(self, event: str, **kw: Any) -> None:
        self.lines.append((event, kw))

    warning = error = exception = info


def _recorder(tmp_path: pathlib.Path, kind: str) -> rec.Recorder:
    journal = Journal(tmp_path / "state", record_sync=kind)
    return rec.Recorder(journal, Engine(EngineConfig("T1"), instance_id="i"),
                        TableStatus("T1"), 1000, Log())


def _frame(recorder: rec.Recorder, n: int, order: list[str]) -> Any:
    inputs = [Notice(**stamp(recorder.uptime), code="bad_payload", message=f"frame {n}")]
    return recorder.record_apply(inputs, DedupState(1, n),  # type: ignore[arg-type]
                                 lambda: order.append(f"ack {recorder.engine.seq}"))


@pytest.mark.parametrize("kind", ["blocking", "aio"])
@asynctest
async def test_the_ack_comes_after_the_record_and_before_any_event(
        tmp_path: pathlib.Path, kind: str) -> None:
    recorder = _recorder(tmp_path, kind)
    assert recorder.journal.record_sync == kind
    order: list[str] = []
    recorder.outbox.on_ready = lambda: order.append(f"ready {recorder.engine.seq}")
    seq = recorder.engine.seq
    outputs = _frame(recorder, 1, order)
    assert outputs is not None and [e.seq for e in outputs[0].events] == [seq + 1]
    # aio: the engine ran while the record was synced (its event exists at the ACK);
    # blocking: the ACK came first. Either way the publisher is woken after the ACK.
    at_ack = seq + 1 if kind == "aio" else seq
    assert order == [f"ack {at_ack}", f"ready {seq + 1}"]
    assert recorder.journal.pending  # recorded in the log, for the next transaction
    recorder.close()


@pytest.mark.parametrize("kind", ["blocking", "aio"])
@asynctest
async def test_a_failed_sync_acks_nothing_and_leaves_memory_as_it_was(
        tmp_path: pathlib.Path, kind: str) -> None:
    recorder = _recorder(tmp_path, kind)
    order: list[str] = []
    assert _frame(recorder, 1, order) is not None
    before = (recorder.engine.seq, recorder.engine.public_state(),
              list(recorder.outbox.unwritten), list(recorder.outbox.fresh))
    records = recorder.journal._records
    assert records is not None
    sync = records.sync
    real_wait, real_start = sync.wait, sync.start

    def broken(*_: Any) -> None:
        raise OSError(errno.EIO, "Input/output error")

    def failed_wait() -> None:  # the sync ran, and the kernel reported an error
        real_wait()
        broken()

    if kind == "aio":
        sync.wait = failed_wait  # type: ignore[method-assign]
    else:
        sync.start = broken  # type: ignore[method-assign]
    order.clear()
    assert _frame(recorder, 2, order) is None
    assert order == []  # no ACK, no publisher woken
    assert not recorder.status.storage_ok
    assert "Input/output error" in (recorder.status.storage_error or "")
    after = (recorder.engine.seq, recorder.engine.public_state(),
             list(recorder.outbox.unwritten), list(recorder.outbox.fresh))
    assert after == before  # the engine's work during the sync was rolled back

    sync.wait, sync.start = real_wait, real_start  # type: ignore[method-assign]
    assert _frame(recorder, 2, order) is not None  # storage back: retried, then recorded
    assert recorder.status.storage_ok
    live_seq = recorder.engine.seq
    live_state = recorder.engine.public_state()
    recorder.close()

    # What the journal holds replays to the same engine: nothing of the failed try is in it.
    settings: Any = type("S", (), {})()
    settings.state = type("St", (), {"dir": tmp_path / "state", "new_journal": False,
                                     "record_sync": kind, "snapshot_every": 1000})()
    again = rec.Recorder.open(settings, EngineConfig("T1"), TableStatus("T1"), Log())
    assert again.engine.seq == live_seq
    assert again.engine.public_state() == live_state
    again.close()


@asynctest
async def test_an_engine_bug_during_the_sync_still_acks_the_durable_record(
        tmp_path: pathlib.Path) -> None:
    """As with the blocking order (ACK, then the engine): the record is on disk, so the
    frame is ACKed, and the bug reaches the session's log (frame_handling_failed)."""
    recorder = _recorder(tmp_path, "aio")
    order: list[str] = []

    def bug(inp: Any) -> Any:
        raise RuntimeError("engine bug")

    recorder.engine.handle = bug  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="engine bug"):
        _frame(recorder, 1, order)
    assert order == ["ack 0"]
    assert recorder.journal.pending and recorder.status.storage_ok
    recorder.close()


@asynctest
async def test_the_start_logs_which_sync_the_records_use(tmp_path: pathlib.Path) -> None:
    log = Log()
    settings: Any = type("S", (), {})()
    settings.state = type("St", (), {"dir": tmp_path / "state", "new_journal": False,
                                     "record_sync": "aio", "snapshot_every": 64})()
    recorder = rec.Recorder.open(settings, EngineConfig("T1"), TableStatus("T1"), log)
    restored = [kw for event, kw in log.lines if event == "journal_restored"]
    assert restored and restored[0]["record_sync"] == recorder.journal.record_sync
    if recorder.journal.sync_fallback is not None:
        assert any(event == "record_sync_blocking" for event, _ in log.lines)
    recorder.close()
