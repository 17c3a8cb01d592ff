"""Keep freed CPU tensors in the process heap, so that a training step does not page-fault.

PyTorch's CPU tensors come from the C library's ``malloc``. glibc serves a request above its mmap
threshold (dynamic, at most 32 MiB by default) with a fresh ``mmap`` and returns it to the kernel on
``free``; every such tensor is then zero-filled page by page by the kernel on first touch, at every
step. The base-like model's ``[1024, 10000]`` logits and their log-softmax and gradient (40 MiB each)
cost about 30,000 page faults, 10–15% of a CPU training step. Raising the mmap threshold and the trim
threshold keeps those blocks in the heap for the next step, as a GPU caching allocator does; the
process's resident memory then stays at its peak instead of shrinking between steps.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import platform

log = logging.getLogger(__name__)

_M_TRIM_THRESHOLD = -1  # mallopt parameters, from glibc's <malloc.h>
_M_MMAP_THRESHOLD = -3
HEAP_LIMIT = 1 << 30  # requests up to 1 GiB come from the heap; larger ones are still mapped and unmapped


def keep_cpu_memory(limit: int = HEAP_LIMIT) -> bool:
    """Serve CPU allocations up to ``limit`` bytes from the heap and never trim it; False where not glibc.

    Process-wide and permanent: meant for a training or evaluation process (``txl train`` and
    ``txl eval`` call it unless ``train.keep_cpu_memory`` is false).
    """
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        ok = libc.mallopt(_M_MMAP_THRESHOLD, ctypes.c_int(limit)) == 1
        ok = libc.mallopt(_M_TRIM_THRESHOLD, ctypes.c_int(limit)) == 1 and ok
    except (OSError, AttributeError):
        return False
    if not ok:
        log.debug("mallopt refused the heap limit %d", limit)
    return ok
