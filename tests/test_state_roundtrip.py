"""Every operator's state survives a checkpoint (in the manner of torchdata's shared
``save/load`` test for nodes): run a small pipeline through the operator, checkpoint at random
points (and at the start and the end), restore into a fresh pipeline with other execution
settings, and the continuation is the uninterrupted run's, unit for unit.

A new operator joins by adding one line to ``CASES``: its name and how it is added to a
pipeline of records with a ``text``, a number ``n`` and a two-turn ``messages`` conversation.
A ``batch`` is added after it (unless it batches itself), so rows it builds are also held by a
downstream buffer when the checkpoints are taken.
"""

from __future__ import annotations

import hashlib
import json
import random
import zlib
from pathlib import Path

import pytest
from test_user_ops_helpers import (
    GroupedPairs,
    counting3,
    group_sum,
    pair_flush,
    pair_init,
    pair_push,
    shout,
    sig,
)

from zephon import Pipeline
from zephon.io import Dataset, InMemoryShard
from zephon.work import StaticMixtureWorkSource

FALLBACK = {"tokenizer_id": "__fallback__"}


def _longer(payload: dict) -> dict:
    return {**payload, "text": payload["text"] + " " + "z" * (payload["n"] % 9)}


def _tag_batch(batch):
    return batch


CASES = {
    "decode_text": lambda p: p.decode_text(),
    "map_transform": lambda p: p.map_transform(_longer),
    "expand_chat": lambda p: p.expand_chat(),
    "tokenize": lambda p: p.tokenize(**FALLBACK, field="text", max_length=5,
                                     split_long_samples=True),
    "tokenize_chat": lambda p: p.tokenize_chat(**FALLBACK, apply_chat_template=False),
    "shuffle": lambda p: p.shuffle(buffer_size=12, seed=7),
    "ensure_mixture": lambda p: p.ensure_mixture(max_buffer_size=9, weight_by="samples"),
    "pack_flat": lambda p: p.tokenize(**FALLBACK, field="text").pack_flat(
        16, algorithm="best_fit", num_bins=3, pad_token_id=0),
    "pack_flat_wrap": lambda p: p.tokenize(**FALLBACK, field="text").pack_flat(
        16, algorithm="wrap"),
    "pack_sequences": lambda p: p.tokenize(**FALLBACK, field="text").pack_sequences(
        16, algorithm="best_fit_wrap", candidate_pool_size=4),
    "batch": lambda p: p.batch(4, drop_last=False),
    "map_batch": lambda p: p.batch(4, drop_last=False).map_batch(_tag_batch),
    "add_op": lambda p: p.add_op("shout", process_many=shout, preserves_cursor_order=True),
    "add_op_accumulator": lambda p: p.add_op("gsum", process_many=group_sum,
                                             preserves_cursor_order=True,
                                             accumulator=counting3),
    "add_op_instance": lambda p: p.add_op(GroupedPairs()),
    "stateful_transform": lambda p: p.stateful_transform(
        "pairs", init_state=pair_init, push=pair_push, flush=pair_flush,
        preserves_cursor_order=False),
}
BATCHES_ITSELF = {"batch", "map_batch"}


def _source() -> StaticMixtureWorkSource:
    def rows(name: str, start: int, n: int) -> list[dict]:
        return [{"text": f"{name}{i} " * (1 + i % 4), "n": i,
                 "messages": [{"role": "user", "content": f"q{i}"},
                              {"role": "assistant", "content": f"{name} says {i}"}]}
                for i in range(start, start + n)]

    a = Dataset.from_dict("a", {0: InMemoryShard(rows("a", 0, 30)),
                                1: InMemoryShard(rows("a", 30, 20))})
    b = Dataset.from_dict("b", {0: InMemoryShard(rows("b", 100, 35))})
    return StaticMixtureWorkSource([a, b], {"a": 0.6, "b": 0.4}, seed=11, chunk_size=12)


def _build(case: str, **options) -> Pipeline:
    opts = {"num_workers": 0, "canonical_replicas": 2, "micro_batch_size": 4,
            "auto_validation": "off", **options}
    p = CASES[case](Pipeline(_source()).options(**opts))
    return p if case in BATCHES_ITSELF else p.batch(3, drop_last=False)


def _cuts(case: str, n: int) -> list[int]:
    rng = random.Random(zlib.crc32(case.encode()))
    return sorted({0, n, *rng.sample(range(1, n), min(4, n - 1))})


@pytest.mark.parametrize("case", sorted(CASES))
def test_checkpoint_restore_continues_exactly(case):
    full = [sig(u) for u in _build(case)]
    assert len(full) > 4, "the case delivers too little to cut"
    for k in _cuts(case, len(full)):
        p = _build(case)
        it = iter(p)
        head = [sig(next(it)) for _ in range(k)]
        state = json.loads(json.dumps(p.checkpoint()))
        p.close()
        # other execution settings on restore: they change speed, never the stream
        q = _build(case, micro_batch_size=3, runner="threads", num_workers=2).restore(state)
        tail = [sig(u) for u in q]
        assert head + tail == full, f"{case}: resumed after {k} of {len(full)} units, diverged"


# checkpoints written by Zephon at c7edaa9 (before operators stated their own fingerprints and
# the checkpoint code moved to zephon.state), each with the digest of the stream that followed
BEFORE = json.loads((Path(__file__).parent / "tests_support" / "checkpoints_c7edaa9.json")
                    .read_text())


@pytest.mark.parametrize("case", sorted(BEFORE))
def test_checkpoints_written_before_still_restore(case):
    old = BEFORE[case]
    tail = [sig(u) for u in _build(case).restore(old["checkpoint"])]
    assert len(tail) == old["tail_units"]
    text = json.dumps([list(map(repr, s)) for s in tail])
    assert hashlib.sha256(text.encode()).hexdigest() == old["tail_sha256"]
