"""glibc's malloc in the coordinator and the workers: large freed buffers go back to the system.

glibc serves a large allocation by its own ``mmap`` and unmaps it when freed, but it raises that
threshold each time such a block is freed (up to 32 MiB). In the coordinator and the workers,
whose arrays come and go by the megabyte (pointer blocks, decoded and tokenized columns, the
serial stage's buffers), the threshold soon passes them all; they then live in the heap, whose
freed pages stay counted in the process's memory: the coordinator's heap was 38-62 MiB in W2.
Fixing the thresholds keeps such buffers mapped per allocation and returned when freed (W2 with 2
workers: 10-25 MiB less PSS in the process tree, throughput unchanged, measured with
``benchmarks/bench_startup.py --only w2``). Only for processes the engine starts: the training
process is the user's.
"""

from __future__ import annotations

import ctypes
import sys

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
THRESHOLD = 128 << 10  # glibc's own starting value for both


def return_freed_memory() -> None:
    """Fix glibc's mmap and trim thresholds in this process (nothing elsewhere)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return
    mallopt(M_MMAP_THRESHOLD, THRESHOLD)
    mallopt(M_TRIM_THRESHOLD, THRESHOLD)
