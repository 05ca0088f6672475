"""An ``fdatasync`` started now and waited for later: the record's sync while the engine runs.

A card's record must be on disk before its ACK (firmware-protocol.md section 3), and its
``fdatasync`` is most of a card's time to the ACK, with the CPU idle. Started through
Linux's native AIO (``io_submit`` of an ``IOCB_CMD_FDSYNC``, Linux 4.18 and later), the
kernel syncs in a worker of its own and ``io_submit`` returns at once: the daemon works
out the frame's events meanwhile and waits for the sync (``io_getevents``) before the ACK
and before any event leaves (``state.record_sync = "aio"``, docs/decisions.md 141).
Durability is unchanged: the kernel runs the same ``vfs_fsync_range(datasync=1)`` that
``os.fdatasync`` runs, and nothing is ACKed or published before it has returned 0.

The kernel's worker is bound to the CPU that submitted the sync, so :meth:`AioSync.start`
yields the CPU once (``sched_yield``) for it to start the sync; without that it started
only once the daemon next slept, and nothing overlapped (measured, docs/performance.md,
"Ninth pass"). No thread of ours: it would need the GIL to start the sync while the
engine holds it. The standard library has no AIO, and the PyPI bindings (caio, aiofile)
complete through the event loop, a turn too late for a wait inside one callback; the
four system calls are made with ``ctypes``.

Where native AIO is not there (another kernel or architecture, a seccomp filter, a file
system without it), the sync is blocking, as ``state.record_sync = "blocking"`` (the
default) makes it: ``os.fdatasync`` inside :meth:`start`, so the daemon ACKs before the
engine runs, exactly as without this module. Errors of the sync itself are ``OSError``,
as from ``os.fdatasync``.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import platform
from typing import Protocol

IOCB_CMD_FDSYNC = 3
# What io_submit answers when there is no AIO fsync here (old kernel, file system, filter).
REFUSALS = {errno.EINVAL, errno.EOPNOTSUPP, errno.ENOSYS, errno.EPERM}
# The AIO system calls by machine (x86_64's table, and the generic one of arm64/riscv64).
SYSCALLS = {
    "x86_64": {"io_setup": 206, "io_destroy": 207, "io_getevents": 208, "io_submit": 209},
    "aarch64": {"io_setup": 0, "io_destroy": 1, "io_submit": 2, "io_getevents": 4},
    "riscv64": {"io_setup": 0, "io_destroy": 1, "io_submit": 2, "io_getevents": 4},
}


class _Iocb(ctypes.Structure):  # struct iocb (linux/aio_abi.h), little-endian, 64 bytes
    _fields_ = [("aio_data", ctypes.c_uint64), ("aio_key", ctypes.c_uint32),
                ("aio_rw_flags", ctypes.c_int32), ("aio_lio_opcode", ctypes.c_uint16),
                ("aio_reqprio", ctypes.c_int16), ("aio_fildes", ctypes.c_uint32),
                ("aio_buf", ctypes.c_uint64), ("aio_nbytes", ctypes.c_uint64),
                ("aio_offset", ctypes.c_int64), ("aio_reserved2", ctypes.c_uint64),
                ("aio_flags", ctypes.c_uint32), ("aio_resfd", ctypes.c_uint32)]


class _IoEvent(ctypes.Structure):  # struct io_event
    _fields_ = [("data", ctypes.c_uint64), ("obj", ctypes.c_uint64),
                ("res", ctypes.c_int64), ("res2", ctypes.c_int64)]


class Datasync(Protocol):
    """One fdatasync at a time: :meth:`start` it, then :meth:`wait` for it (OSError if it
    failed). ``kind`` says which for the log: "aio" or "blocking"."""

    kind: str

    def start(self, fd: int) -> None: ...

    def wait(self) -> None: ...

    def close(self) -> None: ...


class BlockingSync:
    """``os.fdatasync`` in :meth:`start`: the sync is done when start returns."""

    kind = "blocking"

    def start(self, fd: int) -> None:
        os.fdatasync(fd)

    def wait(self) -> None:
        pass

    def close(self) -> None:
        pass


class AioSync:
    """``IOCB_CMD_FDSYNC`` through one AIO context. OSError from the constructor when the
    kernel refuses the context; from :meth:`start` when it refuses the sync (the caller
    may then sync another way); from :meth:`wait` when the sync failed."""

    kind = "aio"
    fallback: str | None = None  # why start() went blocking (io_submit refused the sync)

    def __init__(self) -> None:
        numbers = SYSCALLS.get(platform.machine())
        if numbers is None:
            raise OSError(errno.ENOSYS, f"no AIO system call table for {platform.machine()}")
        self._nr = numbers
        libc = ctypes.CDLL(None, use_errno=True)
        self._syscall = libc.syscall
        self._syscall.restype = ctypes.c_long
        self._ctx = ctypes.c_ulong(0)
        self._check(self._syscall(numbers["io_setup"], 1, ctypes.byref(self._ctx)))
        self._iocb = _Iocb(aio_lio_opcode=IOCB_CMD_FDSYNC)
        self._iocbs = (ctypes.POINTER(_Iocb) * 1)(ctypes.pointer(self._iocb))
        self._event = _IoEvent()
        self._pending = False

    @staticmethod
    def _check(result: int) -> int:
        if result < 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))
        return result

    def start(self, fd: int) -> None:
        if self._pending:
            raise RuntimeError("a datasync is already pending: wait() for it first")
        if self.kind != "aio":
            os.fdatasync(fd)
            return
        self._iocb.aio_fildes = fd
        if self._syscall(self._nr["io_submit"], self._ctx, 1, self._iocbs) != 1:
            code = ctypes.get_errno()
            if code not in REFUSALS:
                raise OSError(code, os.strerror(code))
            # The kernel or the file system has no AIO fsync: blocking from now on.
            self.kind = "blocking"
            self.fallback = f"io_submit of an fdatasync refused: {os.strerror(code)}"
            os.fdatasync(fd)
            return
        self._pending = True
        # The kernel's sync runs in a worker bound to this CPU: give it the CPU now, or
        # it starts only when this thread next sleeps (the engine's work would not overlap).
        os.sched_yield()

    def wait(self) -> None:
        if not self._pending:
            return
        while True:
            got = self._syscall(self._nr["io_getevents"], self._ctx, 1, 1,
                                ctypes.byref(self._event), None)
            if got < 0 and ctypes.get_errno() == errno.EINTR:
                continue  # a signal (SIGTERM's handler runs after this callback)
            break
        self._pending = False
        self._check(got)
        if got != 1:
            raise OSError(errno.EIO, f"io_getevents returned {got} events, expected 1")
        if self._event.res < 0:
            code = -self._event.res
            raise OSError(code, os.strerror(code))

    def close(self) -> None:
        if self._ctx.value:
            with contextlib.suppress(OSError):
                self.wait()
            self._syscall(self._nr["io_destroy"], self._ctx)
            self._ctx = ctypes.c_ulong(0)


def open_datasync(kind: str = "blocking") -> tuple[Datasync, str | None]:
    """The datasync of `kind` ("blocking" or "aio"); for "aio", the blocking one when the
    kernel gives no AIO context, with why (else None)."""
    if kind == "blocking":
        return BlockingSync(), None
    if kind != "aio":
        raise ValueError(f"expected record_sync 'blocking' or 'aio', got {kind!r}")
    try:
        return AioSync(), None
    except OSError as error:
        return BlockingSync(), f"native AIO unavailable: {error}"
