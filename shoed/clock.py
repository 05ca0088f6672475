"""Is the system clock synchronised? Asked of the kernel (adjtimex), not of a daemon."""

from __future__ import annotations

import ctypes
import ctypes.util

TIME_ERROR = 5  # the kernel's "clock not synchronised" state


class _Timex(ctypes.Structure):
    _fields_ = [("modes", ctypes.c_uint), ("_rest", ctypes.c_byte * 204)]


def clock_synchronised() -> bool | None:
    """True/False from the kernel's NTP state; None where it cannot be asked."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        timex = _Timex()
        state = libc.adjtimex(ctypes.byref(timex))
    except (OSError, AttributeError):
        return None
    if state < 0:
        return None
    return bool(state != TIME_ERROR)
