"""Per-lane record shuffle (spec 5.8) whose order depends on seeds and record identity only.

Records are numbered by arrival (0, 1, 2, ... since construction or the last ``flush``); the
caller passes one identity key per record (``record_keys``) and gets back the arrival numbers
to emit, in order. Pushing the same keys in blocks of 1 or of 1000 yields the same order,
because every decision is a hash of (seed, lane, key, emit counter, buffer fill).

- ``"streaming"``: a reservoir that starts with a window of min(128, buffer_size // 16)
  records (at least 1; 0 when buffer_size is 1) and grows by one per emission up to
  ``buffer_size``. Once the window is full, each arrival competes with the buffered records
  and one of them leaves (the arrival itself when the hash says so).
- ``"block"``: tumbling blocks of ``buffer_size``, each permuted by a seed made of the base
  seed and the keys of its records.
- ``"block_warmup"``: like ``"block"``, but the first block holds the streaming window and each
  next one ``max(size + 1, int(size * warmup_growth))`` up to ``buffer_size`` (the reference grew
  blocks at periodic flushes, which this design does not have).

The window is never cut short mid-stream: only ``flush`` (end of stream) drains the buffer,
in a seeded order, and returns the shuffler to its fresh state.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from zephon._ext import kernel

MODES = ("streaming", "block", "block_warmup")
STATE_VERSION = 1
_MASK = (1 << 64) - 1


def record_keys(dataset_id, shard_id, sample_idx, lineage=None) -> np.ndarray:
    """uint64 identity key per record of (dataset, shard, sample[, lineage path]).

    ``lineage``: a child index per record (1-D) or an (n, depth) matrix padded with -1.
    """
    return kernel("shuffle").record_keys(dataset_id, shard_id, sample_idx, lineage)


class StreamShuffler:
    """Deterministic per-lane shuffle buffer; see the module docstring."""

    def __init__(self, buffer_size: int | None = 8192, seed: int = 0, algorithm: str = "streaming",
                 warmup_growth: float = 1.5, lane_id: int = 0) -> None:
        buffer_size = 8192 if buffer_size is None else buffer_size
        if algorithm not in MODES:
            raise ValueError(f"algorithm must be one of {MODES}, got {algorithm!r}")
        if not isinstance(buffer_size, (int, np.integer)) or buffer_size < 1:
            raise ValueError(f"buffer_size must be a positive integer, got {buffer_size!r}")
        if not warmup_growth >= 1.0:
            raise ValueError(f"warmup_growth must be >= 1.0, got {warmup_growth!r}")
        self.buffer_size, self.seed, self.algorithm = int(buffer_size), int(seed), algorithm
        self.warmup_growth, self.lane_id = float(warmup_growth), int(lane_id)
        self._core = kernel("shuffle").ShuffleCore(MODES.index(algorithm), self.buffer_size,
                                                   self.seed & _MASK, self.lane_id & _MASK,
                                                   self.warmup_growth)

    @property
    def config(self) -> dict[str, Any]:
        return {"buffer_size": self.buffer_size, "seed": self.seed, "algorithm": self.algorithm,
                "warmup_growth": self.warmup_growth, "lane_id": self.lane_id}

    def push(self, keys) -> np.ndarray:
        """Add records (uint64 or int64 identity keys); returns arrival numbers to emit now."""
        k = np.asarray(keys).reshape(-1)
        if k.dtype != np.uint64:   # signed keys keep their bits (two's complement)
            k = k.astype(np.int64).view(np.uint64)
        return self._core.push(np.ascontiguousarray(k))

    def flush(self) -> np.ndarray:
        """End of stream: every buffered arrival number, in a seeded order; state becomes fresh."""
        return self._core.flush()

    @property
    def pending(self) -> int:
        """Records held in the buffer."""
        return int(self._core.pending)

    @property
    def arrivals(self) -> int:
        """Records pushed since construction or the last flush (the next arrival number)."""
        return int(self._core.arrivals)

    def has_pending(self) -> bool:
        return self.pending > 0

    def get_state(self) -> dict[str, Any]:
        """JSON-serialisable: buffered [arrival_number, key as signed int64] pairs in buffer
        slot order (slots matter to the eviction hash) plus the window / emit / arrival counters."""
        return {"version": STATE_VERSION, "algorithm": self.algorithm, **self._core.export()}

    @classmethod
    def from_state(cls, config: dict[str, Any], state: dict[str, Any]) -> StreamShuffler:
        sh = cls(**config)
        if state.get("version") != STATE_VERSION or state.get("algorithm") != sh.algorithm:
            raise ValueError("shuffle state does not match this version or algorithm")
        try:
            buf = [[int(a), int(k)] for a, k in state["buffer"]]
            counters = {k: int(state[k]) for k in ("window", "emitted", "arrivals")}
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"malformed shuffle state: {e}") from None
        if any(not 0 <= a < counters["arrivals"] or not -(1 << 63) <= k < (1 << 63) for a, k in buf):
            raise ValueError("malformed shuffle state: buffered entries out of range")
        if not 0 <= counters["window"] <= sh.buffer_size or len(buf) > sh.buffer_size:
            raise ValueError("malformed shuffle state: window exceeds buffer_size")
        sh._core.load({"buffer": buf, **counters})
        return sh

    def __reduce__(self):
        return (StreamShuffler.from_state, (self.config, self.get_state()))
