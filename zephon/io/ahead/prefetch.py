"""Shard prefetching: download shards into the node cache ahead of the reads that need them.

The ``prefetch`` pipeline operator looks ahead over pointers, finds the distinct (dataset,
shard) pairs and hands them to a ``ShardPrefetcher``; a thread pool runs ``Dataset.warm`` on
them. Shards already being warmed are not submitted twice. A failed warm is kept, not raised:
the fetch that needs the shard reports the error with the shard's name.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from typing import Any

__all__ = ["ShardPrefetcher"]


class ShardPrefetcher:
    """``submit(dataset_id, shard_ids)`` warms shards of ``datasets[dataset_id]`` in the
    background with ``parallelism`` threads (``Dataset.warm``: downloads into the node cache,
    line indexes). A context manager: leaving it closes the threads.

    Args:
        datasets: The datasets, indexed by dataset id.
        parallelism: Worker threads.
    """

    def __init__(self, datasets: Sequence[Any], parallelism: int = 4) -> None:
        if parallelism < 1:
            raise ValueError(f"prefetch parallelism must be >= 1, got {parallelism}")
        self.datasets = list(datasets)
        self.parallelism = parallelism
        self._pool: ThreadPoolExecutor | None = ThreadPoolExecutor(
            max_workers=parallelism, thread_name_prefix="zephon-prefetch")
        self._inflight: dict[tuple[int, int], Future] = {}
        # re-entrant: a future that is already done runs its callback (which takes the lock)
        # inside add_done_callback, while submit still holds it
        self._lock = threading.RLock()
        self._errors: list[BaseException] = []
        self.completed = 0

    def submit(self, dataset_id: int, shard_ids: Iterable[int]) -> list[Future]:
        """Queue shards for warming.

        Args:
            dataset_id: Index of the dataset in ``datasets``.
            shard_ids: Its shards to warm.

        Returns:
            The futures (shared with earlier submissions of the same shards that are still
            running).
        """
        if self._pool is None:
            raise RuntimeError("ShardPrefetcher is closed")
        ds = self.datasets[dataset_id]
        futures = []
        with self._lock:
            for sid in shard_ids:
                key = (int(dataset_id), int(sid))
                fut = self._inflight.get(key)
                if fut is None:
                    fut = self._pool.submit(ds.warm, [key[1]])
                    self._inflight[key] = fut
                    fut.add_done_callback(lambda f, key=key: self._done(key, f))
                futures.append(fut)
        return futures

    def _done(self, key: tuple[int, int], fut: Future) -> None:
        with self._lock:
            if self._inflight.get(key) is fut:
                del self._inflight[key]
            if fut.cancelled():
                return
            if fut.exception() is not None:
                self._errors.append(fut.exception())
            else:
                self.completed += 1

    def errors(self) -> list[BaseException]:
        """The failures so far, in the order they happened."""
        with self._lock:
            return list(self._errors)

    def pending(self) -> int:
        """Shards submitted and not finished yet."""
        with self._lock:
            return len(self._inflight)

    def wait(self, timeout: float | None = None) -> None:
        """Block until everything submitted so far is done; raise the first failure.

        Args:
            timeout: Seconds to wait at most (None: no limit).
        """
        with self._lock:
            futures = list(self._inflight.values())
        wait_futures(futures, timeout=timeout)
        errors = self.errors()
        if errors:
            raise errors[0]

    def close(self) -> None:
        """Cancel queued work and stop the threads (idempotent)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> ShardPrefetcher:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
