"""A real PostgreSQL for the sink's tests: the server at 127.0.0.1:5432 when it answers,
otherwise a private cluster started from the installed server binaries (as the
`postgres` user: initdb and pg_ctl refuse root). Each test gets its own database."""

from __future__ import annotations

import contextlib
import glob
import os
import pathlib
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator

import psycopg

from shoed.sim.broker import answers, free_port


def _bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if found:
        return found[-1]
    path = shutil.which(name)
    if path is None:
        raise RuntimeError(f"PostgreSQL's {name} is not installed (scripts/bootstrap-test)")
    return path


class PrivatePostgres:
    def __init__(self) -> None:
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="shoed-pg-"))
        self.port = free_port()
        self.data = self.dir / "data"
        self.as_root = os.geteuid() == 0

    def _run(self, *argv: str) -> None:
        command = ["runuser", "-u", "postgres", "--", *argv] if self.as_root else list(argv)
        subprocess.run(command, check=True, capture_output=True)

    def start(self) -> str:
        if self.as_root:
            shutil.chown(self.dir, "postgres", "postgres")
        self._run(_bin("initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres",
                  "--no-sync")
        self._run(_bin("pg_ctl"), "-D", str(self.data), "-w", "-l", str(self.dir / "log"),
                  "-o", f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 "
                        "-c fsync=on", "start")
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def stop(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self._run(_bin("pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop")
        shutil.rmtree(self.dir, ignore_errors=True)


@contextlib.contextmanager
def server() -> Iterator[str]:
    """A URL of a PostgreSQL server with superuser rights."""
    if answers("127.0.0.1", 5432):
        url = "postgresql://postgres@127.0.0.1:5432/postgres"
        try:
            psycopg.connect(url, connect_timeout=5).close()
            yield url
            return
        except psycopg.Error:
            pass
    private = PrivatePostgres()
    url = private.start()
    try:
        yield url
    finally:
        private.stop()


@contextlib.contextmanager
def database(server_url: str) -> Iterator[str]:
    name = f"shoed_test_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield server_url.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with psycopg.connect(server_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
