"""The C library, for what Python does not offer: the kernel's NTP state (adjtimex, in
`shoed.clock`) and handing the C heap's free pages back to the system (malloc_trim)."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools


@functools.cache
def libc() -> ctypes.CDLL | None:
    # find_library runs ldconfig in a subprocess: once per process, not per question.
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None


def trim_heap() -> bool:
    """glibc's `malloc_trim(0)`: give the free pages inside the C heap back to the system.

    glibc returns only the heap's free top by itself; what the start leaves free inside it
    (the schemas' and the imports' temporaries, about 2 MB) stays in the RSS until asked.
    About 0.4 ms the first time, 20-30 us after that. False where the C library has no
    malloc_trim (musl) or nothing was released.
    """
    lib = libc()
    try:
        trim = lib.malloc_trim if lib is not None else None
    except AttributeError:
        trim = None
    return bool(trim(0)) if trim is not None else False
