"""The prefetch operator: look ahead in a lane's pointer stream and warm the shard cache.

It sits before fetch (whatever position it was declared at) and forwards pointer blocks
unchanged and in order, so it never changes the data; it only makes the shards those pointers
need local before the fetch that reads them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

import numpy as np

from zephon.block import Block
from zephon.io import fetch_timing


def warm_ahead(blocks: Iterator[Block], buffer_size: int, prefetcher) -> Iterator[Block]:
    """Yield ``blocks`` unchanged, the shards of the next ``buffer_size`` pointers submitted to
    ``prefetcher`` to be warmed (downloaded into the node cache, indexed) before they are read."""
    window: deque[Block] = deque()
    held = 0
    seen: set[tuple[int, int]] = set()

    def submit(block: Block) -> None:
        pairs = np.unique(np.stack([block.meta["dataset_id"], block.meta["shard_id"]], axis=1),
                          axis=0)
        fetch_timing.LOCAL.add_prefetch(batches=1, samples=len(block))
        for d, s in pairs.tolist():
            if (d, s) not in seen:
                seen.add((d, s))
                fetch_timing.LOCAL.add_prefetch(prefetch_requests=1)
                for fut in prefetcher.submit(d, [s]):
                    fut.add_done_callback(_count_outcome)

    for block in blocks:
        submit(block)
        window.append(block)
        held += len(block)
        while held - len(window[0]) >= buffer_size:
            out = window.popleft()
            held -= len(out)
            yield out
    while window:
        yield window.popleft()


def _count_outcome(fut) -> None:
    ok = not fut.cancelled() and fut.exception() is None
    fetch_timing.LOCAL.add_prefetch(**{"prefetch_succeeded" if ok else "prefetch_failed": 1})
