"""Real `shoed run` processes on one state.dir (issue 13 §3 and §5): one daemon per
journal, and a damaged journal refused at start until the operator asks for a new one."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from shoed.store.journal import Journal

ROOT = pathlib.Path(__file__).resolve().parent.parent


def config(tmp_path: pathlib.Path) -> pathlib.Path:
    """No shoe and no broker: the daemon runs (READY) and keeps retrying both."""
    path = tmp_path / "shoed.toml"
    path.write_text(f'[device]\nport = "{tmp_path / "no-shoe"}"\n'
                    f'[mqtt]\nurl = "mqtt://127.0.0.1:1"\n'
                    f'[state]\ndir = "{tmp_path / "state"}"\n[log]\nformat = "json"\n')
    return path


def shoed(*args: str) -> list[str]:
    return [sys.executable, "-m", "shoed.cli", *args]


def holder(state: pathlib.Path) -> int | None:
    try:
        return int(json.loads((state / "journal.lock").read_text())["pid"])
    except (OSError, ValueError, KeyError):
        return None


class Daemon:
    def __init__(self, proc: subprocess.Popen[str], log: pathlib.Path) -> None:
        self.proc, self.log = proc, log
        self.pid = proc.pid

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    def output(self) -> str:
        return self.log.read_text()


@contextmanager
def daemon(tmp_path: pathlib.Path, *extra: str) -> Iterator[Daemon]:
    """A `shoed run` that holds the journal and is READY (waited for), stopped by SIGTERM
    after."""
    log = tmp_path / f"daemon-{time.monotonic_ns()}.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(shoed("run", "--config", str(config(tmp_path)), *extra),
                                cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, text=True)
    running = Daemon(proc, log)
    try:
        deadline = time.monotonic() + 30
        while holder(tmp_path / "state") != proc.pid or '"ready"' not in running.output():
            assert proc.poll() is None, running.output()
            assert time.monotonic() < deadline, "the daemon never became ready"
            time.sleep(0.05)
        yield running
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(20)


def test_second_daemon_on_the_same_state_dir_refuses_naming_the_first(
        tmp_path: pathlib.Path) -> None:
    state = tmp_path / "state"
    with daemon(tmp_path) as first:
        second = subprocess.run(shoed("run", "--config", str(config(tmp_path))), cwd=ROOT,
                                capture_output=True, text=True, timeout=60)
        assert second.returncode == 1, second
        out = second.stdout + second.stderr
        assert "cannot_start" in out and "in use by another shoed" in out, out
        assert f"pid {first.pid}" in out and str(state / "journal.lock") in out, out
        assert first.proc.poll() is None  # the first one is untouched
        assert holder(state) == first.pid
    assert first.returncode == 0
    # Released at its stop: the journal opens, and is the one the first daemon wrote.
    journal = Journal(state)
    assert journal.was_clean
    journal.close()


def test_lock_dies_with_a_killed_daemon(tmp_path: pathlib.Path) -> None:
    state = tmp_path / "state"
    with daemon(tmp_path) as first:
        os.kill(first.pid, signal.SIGKILL)
        first.proc.wait(10)
    with daemon(tmp_path) as second:  # takes over at once: the kernel dropped the lock
        assert holder(state) == second.pid
    assert second.returncode == 0


def test_damaged_journal_is_refused_until_the_operator_asks_for_a_new_one(
        tmp_path: pathlib.Path) -> None:
    state = tmp_path / "state"
    with daemon(tmp_path) as first:
        os.kill(first.pid, signal.SIGKILL)  # leaves the -wal and -shm
        first.proc.wait(10)
    old = (state / "journal.id").read_text().strip()
    (state / "journal.sqlite3").unlink()  # the database deleted, its -wal left
    for _ in range(2):  # and refused again: nothing was created in its place
        done = subprocess.run(shoed("run", "--config", str(config(tmp_path))), cwd=ROOT,
                              capture_output=True, text=True, timeout=60)
        out = done.stdout + done.stderr
        assert done.returncode == 1 and "cannot_start" in out, out
        assert "journal.sqlite3-wal" in out and "deleted or moved" in out, out
        assert not (state / "journal.sqlite3").exists()
    check = subprocess.run(shoed("check-journal", str(state)), cwd=ROOT,
                           capture_output=True, text=True, timeout=60)
    assert check.returncode == 2 and "deleted or moved" in check.stderr, check
    with daemon(tmp_path, "--new-journal") as second:
        pass
    out = second.output()
    assert second.returncode == 0, out
    assert "journal_moved_aside" in out, out
    aside = [p for p in state.iterdir() if p.name.startswith("damaged-")]
    assert len(aside) == 1 and (aside[0] / "journal.sqlite3-wal").exists()
    new = (state / "journal.id").read_text().strip()
    assert new != old
    check = subprocess.run(shoed("check-journal", str(state)), cwd=ROOT,
                           capture_output=True, text=True, timeout=60)
    assert check.returncode == 0 and f"instance {new}" in check.stdout, check
