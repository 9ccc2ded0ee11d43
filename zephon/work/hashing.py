"""Seed derivation: the integer hash every seeded decision of the curriculum comes from.

Python's ``hash()`` is salted per process and ``random.Random`` streams are an implementation
detail, so neither may decide data order. ``mix64`` is bit-identical to ``hash_mix`` in the
curriculum kernels (``zephon/_ext/curriculum*.py[x]``), which derive per-block and per-shard keys
from the keys made here.
"""

from __future__ import annotations

MASK64 = (1 << 64) - 1

# Domain tags keep the keys of different decisions independent for the same seed.
TAG_SHARDS = 1
TAG_WITHIN = 2
TAG_BLOCKS = 3
TAG_LANES = 4
TAG_CHUNK_SEED = 5

_ROOT = 0x5A6570686F6E2D31  # "Zephon-1"


def splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def mix64(key: int, x: int) -> int:
    """``splitmix64(key ^ splitmix64(x))`` on 64-bit words (negative ints wrap)."""
    return splitmix64((key & MASK64) ^ splitmix64(x & MASK64))


def derive_key(*parts: int) -> int:
    """A 64-bit key from a sequence of integers (seed, tag, dataset, epoch, ...)."""
    key = _ROOT
    for p in parts:
        key = mix64(key, p)
    return key
