"""Fuzzing real checkpoints: every mutation is refused naming a field, or changes nothing.

Checkpoints of several pipelines (plain batch; tokenize + shuffle + pack_flat + batch; an
explicit ensure_mixture mixture), inline and with two workers, are mutated at random: values,
types, deletions, additions, array elements. Each mutated document must be refused by
``restore()`` with a ``CheckpointError`` naming a field, or restore the identical stream (the
next batches' ids, lineage and tokens equal those of the unmutated restore). Each case runs
under an alarm, so a hang fails the test instead of stalling it.

Version 1 documents (no digests) are fuzzed too: there a single change can name another valid
position, so the property is robustness — refused naming a field, or batches delivered without
any other error, never a hang.
"""

from __future__ import annotations

import copy
import json
import random
import signal
from contextlib import contextmanager

import pytest

from zephon import Pipeline
from zephon.io import Dataset
from zephon.ops.errors import CheckpointError
from zephon.work import StaticMixtureWorkSource

K = 3  # batches compared after each restore

PIPELINES = {
    "batch": lambda p, tok: p.batch(microbatch_size=5),
    "tokenize+shuffle+pack_flat": lambda p, tok: (
        p.tokenize(tokenizer=tok, field="text", max_length=48, split_long_samples=True)
        .shuffle(buffer_size=40, seed=1)
        .pack_flat(max_length=49, algorithm="best_fit", num_bins=4, pad_token_id=0)
        .batch(microbatch_size=3)),
    "ensure_mixture": lambda p, tok: (
        p.tokenize(tokenizer=tok, field="text").shuffle(buffer_size=24, seed=2)
        .ensure_mixture(max_buffer_size=30, mixture={"code": 0.5, "web": 0.5})
        .batch(microbatch_size=4)),
}


def _make(corpus_dir, tok, name, workers=0):
    ds = [Dataset.from_path("code", str(corpus_dir / "code")),
          Dataset.from_path("web", str(corpus_dir / "web"))]
    ws = StaticMixtureWorkSource(ds, {"code": 0.25, "web": 0.75}, seed=7, chunk_size=90)
    p = Pipeline(ws).options(num_workers=workers, canonical_replicas=2, micro_batch_size=37)
    return PIPELINES[name](p, tok)


def _sig(batch) -> tuple:
    b = batch.block
    tokens = json.dumps(b.payload_list(), sort_keys=True, default=str)
    return tuple(batch.ids), tuple(map(tuple, b.lineage.tolist())), tokens


class Hang(Exception):
    pass


@contextmanager
def alarm(seconds: float):
    def ring(*_):
        raise Hang(f"no result within {seconds}s")

    old = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _next_k(p) -> list:
    out = []
    try:
        it = iter(p)
        for _ in range(K):
            b = next(it, None)
            if b is None:
                break
            out.append(_sig(b))
    finally:
        p.close()
    return out


# -- mutations ---------------------------------------------------------------------------------

def _nodes(obj, path=()):
    yield path, obj
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _nodes(v, (*path, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _nodes(v, (*path, i))


def _parent(doc, path):
    for p in path[:-1]:
        doc = doc[p]
    return doc


def _other_value(rng: random.Random, v):
    if isinstance(v, bool):
        return not v
    if isinstance(v, int):
        return rng.choice([v + 1, v - 1, -v - 1, 2 * v + 1, -1, 0, 1 << 63, 10 ** 18, v + 17])
    if isinstance(v, float):
        return rng.choice([v * 1.5 + 0.1, -v, 0.0, float("inf"), v + 1e-9])
    if isinstance(v, str):
        return rng.choice([v + "x", "", v[::-1], "<i2", "0" * 64])
    return rng.choice([0, "x", [], {}])


def mutate(doc: dict, rng: random.Random) -> tuple[dict, str]:
    """A copy of ``doc`` with one random change, and what the change was."""
    doc = copy.deepcopy(doc)
    nodes = [(p, v) for p, v in _nodes(doc) if p]
    arrays = [(p, v) for p, v in nodes if isinstance(v, dict) and "__nd__" in v and v["data"]]
    kind = rng.choice(["value", "value", "type", "delete", "add", "array", "array"])
    if kind == "array" and arrays:
        path, nd = rng.choice(arrays)
        i = rng.randrange(len(nd["data"]))
        x = nd["data"][i]
        nd["data"][i] = rng.choice([x + 1, x - 1, -x - 1, -2, 1 << 40, x + 3])
        return doc, f"array {path}[{i}]: {x} -> {nd['data'][i]}"
    if kind == "value":
        leaves = [(p, v) for p, v in nodes if not isinstance(v, (dict, list))]
        path, v = rng.choice(leaves)
        new = _other_value(rng, v)
        _parent(doc, path)[path[-1]] = new
        return doc, f"value {path}: {v!r} -> {new!r}"
    path, v = rng.choice(nodes)
    parent = _parent(doc, path)
    if kind == "type":
        new = rng.choice([None, "7", 2.5, True, [], {}, [1, 2], {"a": 1}])
        parent[path[-1]] = new
        return doc, f"type {path}: {type(v).__name__} -> {new!r}"
    if kind == "delete":
        del parent[path[-1]]
        return doc, f"delete {path}"
    if isinstance(v, dict):
        v[rng.choice(["extra", "held", "discard", "skip", "digest", "9"])] = rng.choice([1, None, "x"])
        return doc, f"add key to {path}"
    if isinstance(v, list):
        v.append(copy.deepcopy(v[-1]) if v and rng.random() < 0.7 else 0)
        return doc, f"append to {path}"
    parent[path[-1]] = [v, v]
    return doc, f"wrap {path}"


def as_version_1(doc: dict) -> dict:
    """The same checkpoint as version 1 wrote it: no digests."""
    doc = copy.deepcopy(doc)
    doc["version"] = 1
    doc.pop("digest", None)
    for lane in doc["lanes"].values():
        if lane is not None:
            lane.pop("digest", None)
    return doc


# -- the test ----------------------------------------------------------------------------------

def _checkpoints(corpus_dir, tok, name, workers, cuts):
    out = []
    for cut in cuts:
        p = _make(corpus_dir, tok, name, workers)
        it = iter(p)
        for _ in range(cut):
            next(it)
        state = json.loads(json.dumps(p.checkpoint()))
        p.close()
        with alarm(120):
            ref = _next_k(_make(corpus_dir, tok, name, workers).restore(state))
        assert ref, f"{name}: nothing after batch {cut}"
        out.append((state, ref))
    return out


def _one_case(corpus_dir, tok, name, workers, doc, ref, signed: bool, what: str) -> str:
    try:
        with alarm(60 if workers else 20):
            try:
                p = _make(corpus_dir, tok, name, workers).restore(doc)
            except CheckpointError as e:
                assert e.field, f"{what}: refused without naming a field: {e}"
                return "refused"
            try:
                got = _next_k(p)
            except CheckpointError as e:  # what needs the records is checked as they return
                assert e.field, f"{what}: refused without naming a field: {e}"
                return "refused later"
    except Hang:
        pytest.fail(f"{name}, {workers} workers: {what}: restore or iteration hung")
    except Exception as e:
        pytest.fail(f"{name}, {workers} workers: {what}: {type(e).__name__}: {e}")
    if signed:
        assert got == ref, f"{name}, {workers} workers: {what}: accepted, but the stream differs"
    return "accepted"


CASES = [  # (pipeline, workers, cuts, signed mutations per checkpoint, version-1 mutations)
    ("batch", 0, (2, 11), 300, 60),
    ("tokenize+shuffle+pack_flat", 0, (3, 14), 300, 60),
    ("ensure_mixture", 0, (2, 12), 300, 60),
    ("tokenize+shuffle+pack_flat", 2, (5,), 120, 0),
]


@pytest.mark.parametrize("name,workers,cuts,signed,unsigned", CASES,
                         ids=[f"{c[0]}-{c[1]}w" for c in CASES])
def test_mutated_checkpoints_are_refused_or_change_nothing(corpus_dir, tokenizer_path, name,
                                                           workers, cuts, signed, unsigned):
    rng = random.Random(f"{name}-{workers}")
    outcomes: dict[str, int] = {}
    for state, ref in _checkpoints(corpus_dir, tokenizer_path, name, workers, cuts):
        for n, v1 in ((signed, False), (unsigned, True)):
            base = as_version_1(state) if v1 else state
            for _ in range(n):
                doc, what = mutate(base, rng)
                got = _one_case(corpus_dir, tokenizer_path, name, workers, doc, ref, not v1, what)
                outcomes[got] = outcomes.get(got, 0) + 1
    assert outcomes.get("refused", 0) > 0.5 * sum(outcomes.values()), outcomes


def test_the_fuzz_covers_two_thousand_mutations():
    assert sum(len(c[2]) * (c[3] + c[4]) for c in CASES) >= 2000


def test_version_1_documents_restore_the_same_stream(corpus_dir, tokenizer_path):
    """Reading version 1 (the migration path the version-1 fuzz relies on) changes nothing."""
    name = "tokenize+shuffle+pack_flat"
    (state, ref), = _checkpoints(corpus_dir, tokenizer_path, name, 0, (6,))
    assert state["version"] == 2
    assert _next_k(_make(corpus_dir, tokenizer_path, name).restore(as_version_1(state))) == ref
