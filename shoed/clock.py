"""Is the system clock synchronised? Asked of the kernel (adjtimex), not of a daemon.

Where adjtimex is refused (the shipped unit's ProtectClock=yes and system-call filter
deny the whole @clock group, adjtimex's read-only use included: EPERM), the answer is
systemd-timesyncd's: its runtime directory exists while it runs, and it creates the file
`synchronized` there once the clock is synchronised (systemd-timesyncd.service(8)).
With another NTP client and no adjtimex the answer is None: not known.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import pathlib
import time

TIME_ERROR = 5  # the kernel's "clock not synchronised" state
CACHE_S = 10.0
TIMESYNCD = pathlib.Path("/run/systemd/timesync")  # systemd-timesyncd's runtime directory


class _Timex(ctypes.Structure):
    _fields_ = [("modes", ctypes.c_uint), ("_rest", ctypes.c_byte * 204)]


@functools.cache
def _libc() -> ctypes.CDLL | None:
    # find_library runs ldconfig in a subprocess: once per process, not per question.
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None


_cached: tuple[float, bool | None] = (-CACHE_S, None)


def clock_synchronised() -> bool | None:
    """True/False from the kernel's NTP state; None where it cannot be asked.

    Cached for 10 s: it is asked on every status publish.
    """
    global _cached
    now = time.monotonic()
    if now - _cached[0] < CACHE_S:
        return _cached[1]
    libc = _libc()
    answer: bool | None = None
    if libc is not None:
        try:
            state = libc.adjtimex(ctypes.byref(_Timex()))
            answer = None if state < 0 else bool(state != TIME_ERROR)
        except AttributeError:
            answer = None
    if answer is None:
        answer = _timesyncd()
    _cached = (now, answer)
    return answer


def _timesyncd() -> bool | None:
    """systemd-timesyncd's word (module docstring), None where it does not run."""
    try:
        if not TIMESYNCD.is_dir():
            return None
        return (TIMESYNCD / "synchronized").exists()
    except OSError:
        return None
