"""Returning the memory of freed arrays to the operating system between episodes.

A long training run resets an env thousands of times; each npu reset builds a new day's request arrays (tens to
hundreds of MB) and frees the old ones. glibc's allocator keeps freed pages for reuse once its dynamic mmap
threshold has grown past the arrays' size, so the process's resident memory climbed from ~530 MB to ~1.1 GB over a
few dozen episodes while the live Python heap stayed flat at ~450-560 MB (tracemalloc; measured in
``benchmarks/results/npu_memory.md``). :func:`release_freed_memory` asks glibc to give the free pages back
(``malloc_trim(0)``); elsewhere (macOS, musl) it does nothing. Standard library only.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from typing import Any

_TRIM: Any = None  # glibc's malloc_trim, looked up once; False where there is none


def release_freed_memory() -> bool:
    """Return the free pages of the C heap to the operating system (glibc ``malloc_trim(0)``); True when glibc
    released some. Costs a walk of the heap's free lists (milliseconds), so call it once per episode, not per step."""
    global _TRIM
    if _TRIM is None:
        _TRIM = False
        if sys.platform.startswith("linux"):
            try:
                libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
                _TRIM = getattr(libc, "malloc_trim", False)
            except OSError:  # no C library by that name (a static or unusual build): nothing to trim
                _TRIM = False
        if _TRIM:
            _TRIM.argtypes = [ctypes.c_size_t]
            _TRIM.restype = ctypes.c_int
    return bool(_TRIM(0)) if _TRIM else False
