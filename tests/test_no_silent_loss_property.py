"""Hypothesis: no token is lost or repeated without a count, whatever the pipeline.

Random corpora (empty, tiny and oversized documents, one or two datasets) through random
pipelines of tokenize (optionally split_long_samples) / shuffle / ensure_mixture (strict mode
too) / pack_flat or pack_sequences (every algorithm and oversized policy, capped or not) /
batch. Every token of every record that tokenize made is delivered exactly once in the pass,
at its place in its document, or counted in ``metrics_snapshot()["losses"]`` under the reason
its policy names (per dataset, records and tokens) — never both, never neither.

The records tokenize makes are read from a second run that stops after tokenize (records are
named by lane, chunk, offset and lineage, which no later operator changes); the pieces of a
split document join back into its byte-level tokens. A packed row names its pieces in the
hidden ``__recipe`` column (chunk, offset, lineage, token start and length).

``batch`` keeps the last short batch by default (``drop_last=False``); ``drop_last=True``
counts it as ``short_batch`` (``tests/test_accounting.py``).
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zephon import Pipeline
from zephon.io import Dataset, InMemoryShard
from zephon.work import StaticMixtureWorkSource

BOS, EOS = 1, 2


def _encode(text: str, specials: bool) -> list[int]:
    """The fallback tokenizer: one id per UTF-8 byte (4 + byte), BOS / EOS around."""
    ids = [4 + b for b in text.encode()]
    return [BOS, *ids, EOS] if specials else ids


doc = st.one_of(st.just(0), st.integers(1, 3), st.integers(4, 30), st.integers(40, 90))
corpus_st = st.lists(st.lists(doc, min_size=1, max_size=14), min_size=1, max_size=2)

spec_st = st.fixed_dictionaries({
    "lanes": st.integers(1, 2), "chunk_size": st.integers(3, 20), "micro": st.integers(2, 9),
    "specials": st.booleans(), "split": st.sampled_from([None, 12, 33]),
    "shuffle": st.sampled_from([0, 1, 5]), "mixture": st.sampled_from([None, 6, "strict"]),
    "pack": st.sampled_from([None, "flat", "sequences"]),
    "algorithm": st.sampled_from(["first_fit", "best_fit", "wrap", "best_fit_wrap"]),
    "oversized": st.sampled_from(["split", "truncate", "drop"]),
    "max_length": st.integers(5, 40), "num_bins": st.integers(1, 3),
    "cap": st.sampled_from([None, 1, 3]), "batch": st.sampled_from([0, 1, 4]),
})


def _source(corpus: list[list[int]], spec: dict) -> tuple[StaticMixtureWorkSource, dict]:
    texts, datasets = {}, []
    for d, sizes in enumerate(corpus):
        name = f"d{d}"
        rows = ["".join(chr(97 + (i * 7 + j) % 26) for j in range(n)) for i, n in enumerate(sizes)]
        half = (len(rows) + 1) // 2
        shards = {0: rows[:half], 1: rows[half:]} if len(rows) > 1 else {0: rows}
        for s, part in shards.items():
            for i, t in enumerate(part):
                texts[(d, s, i)] = t
        datasets.append(Dataset.from_dict(name, {s: InMemoryShard([{"text": t} for t in part])
                                                 for s, part in shards.items()}))
    weights = {f"d{d}": 1.0 + d for d in range(len(corpus))}
    ws = StaticMixtureWorkSource(datasets, weights, chunk_size=spec["chunk_size"], seed=5)
    return ws, texts


def _tokenized(ws, spec) -> Pipeline:
    kw = {"special_tokens": "bos_eos", "bos_token_id": BOS, "eos_token_id": EOS} \
        if spec["specials"] else {"special_tokens": "none"}
    if spec["split"]:
        kw.update(max_length=spec["split"], split_long_samples=True)
    return (Pipeline(ws).options(num_workers=0, canonical_replicas=spec["lanes"],
                                 micro_batch_size=spec["micro"])
            .tokenize(tokenizer_id="__fallback__", field="text", **kw))


def _full(ws, spec, upto: str = "batch") -> Pipeline:
    p = _tokenized(ws, spec)
    if spec["shuffle"]:
        p = p.shuffle(buffer_size=spec["shuffle"], seed=3)
    if spec["mixture"] is not None:
        size = None if spec["mixture"] == "strict" else spec["mixture"]
        p = p.ensure_mixture(max_buffer_size=size)
    if upto == "mixture":
        return p
    if spec["pack"]:
        alg = spec["algorithm"]
        kw = {"max_length": spec["max_length"], "algorithm": alg,
              "oversized": spec["oversized"], "max_sequences_per_bin": spec["cap"]}
        if alg in ("first_fit", "best_fit"):
            kw["num_bins"] = spec["num_bins"]
        if alg == "best_fit_wrap":
            kw["candidate_pool_size"] = spec["num_bins"] + 1
        if spec["pack"] == "flat":
            p = p.pack_flat(pad_token_id=0, **kw)
        else:
            p = p.pack_sequences(**kw)
    if spec["batch"] or spec["pack"]:   # a packed row names its pieces in a batch's columns
        p = p.batch(microbatch_size=spec["batch"] or 1, drop_last=False)
    return p


def _key(meta) -> tuple:
    return (meta.lane_id, meta.chunk_id, meta.chunk_offset, tuple(meta.lineage))


def _records_made_by_tokenize(ws, spec, texts) -> dict[tuple, tuple[list[int], int]]:
    """key -> (tokens, dataset id) of every record tokenize makes in the pass."""
    made = {}
    pieces = defaultdict(list)
    for r in _tokenized(ws, spec):
        made[_key(r.meta)] = (list(r.payload["input_ids"]), r.meta.sample_id[0])
        pieces[(r.meta.lane_id, r.meta.chunk_id, r.meta.chunk_offset, r.meta.sample_id)].append(
            (tuple(r.meta.lineage), list(r.payload["input_ids"])))
    seen_docs = set()
    for (*_, sid), parts in pieces.items():
        # the pieces of a document, in lineage order, are its tokens
        assert [t for _, ids in sorted(parts) for t in ids] == _encode(texts[sid], spec["specials"])
        seen_docs.add(sid)
    assert seen_docs == set(texts)   # every document of every dataset is in the pass
    return made


def _delivered_units(p: Pipeline):
    """(meta, payload) of every delivered record; a packed row's payload keeps its recipe."""
    for unit in p:
        if not hasattr(unit, "block"):
            yield unit.meta, unit.payload
            continue
        cols = unit.block.payload.column_names
        recipes = (unit.block.payload.column("__recipe").to_pylist() if "__recipe" in cols
                   else [None] * len(unit))
        for record, recipe in zip(unit.records, recipes):
            yield record.meta, {**record.payload, "__recipe": recipe}


def _segments(meta, payload) -> list[tuple[tuple, int, list[int]]]:
    """(key, token start, tokens) of every piece a delivered record holds."""
    if "packed_samples" not in payload and "positions" not in payload:
        return [(_key(meta), 0, list(payload["input_ids"]))]
    recipe = payload["__recipe"]
    if "packed_samples" in payload:
        parts = [list(s["input_ids"]) for s in payload["packed_samples"]]
    else:
        row, pos, parts = list(payload["input_ids"]), 0, []
        for seg in recipe:
            parts.append(row[pos:pos + seg["len"]])
            pos += seg["len"]
        assert all(t == 0 for t in row[pos:])           # the rest is padding
    assert [len(x) for x in parts] == [seg["len"] for seg in recipe]
    return [((meta.lane_id, seg["chunk_id"], seg["chunk_offset"], tuple(seg["lineage"])),
             seg["start"], part) for seg, part in zip(recipe, parts)]


def _loss(spec: dict, n: int, kept: int, past_mixture: bool) -> tuple[str, int] | None:
    """(reason, tokens counted) for a record of n tokens of which ``kept`` were delivered."""
    L = spec["max_length"]
    if not past_mixture:
        return ("off_target", n)          # strict ensure_mixture's surplus at the end
    if spec["pack"] and n == 0:
        return ("empty", 0)
    if spec["pack"] and n > L and spec["oversized"] == "truncate":
        assert kept == L
        return ("truncated", n - L)
    if spec["pack"] and n > L and spec["oversized"] == "drop":
        assert kept == 0
        return ("oversized", n)
    assert kept == n, (n, kept)           # everything else is delivered whole
    return None


@settings(max_examples=120, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(corpus=corpus_st, spec=spec_st)
def test_every_token_is_delivered_once_or_counted(corpus, spec):
    ws, texts = _source(corpus, spec)
    made = _records_made_by_tokenize(ws, spec, texts)
    survivors = set(made)
    if spec["mixture"] == "strict":
        survivors = {_key(r.meta) for r in _full(_source(corpus, spec)[0], spec, upto="mixture")}
    p = _full(_source(corpus, spec)[0], spec)
    got = {k: np.full(len(v), -1, dtype=np.int64) for k, (v, _) in made.items()}
    for meta, payload in _delivered_units(p):
        for key, start, tokens in _segments(meta, payload):
            place = got[key][start:start + len(tokens)]
            assert len(place) == len(tokens) and (place == -1).all(), (key, start)  # once
            place[:] = tokens
    losses = p.metrics_snapshot()["losses"]["by_dataset"]
    p.close()

    counted: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for key, (tokens, dataset) in made.items():
        have = got[key]
        kept = int((have >= 0).sum())
        # whatever was delivered is the record's own tokens, from its first one on, in place
        assert have[:kept].tolist() == tokens[:kept] and (have[kept:] == -1).all(), key
        loss = _loss(spec, len(tokens), kept, key in survivors)
        if loss is not None:
            counted[(f"d{dataset}", loss[0])][0] += 1
            counted[(f"d{dataset}", loss[0])][1] += loss[1]
    said = {(d, r): [v["records"], v["tokens"]] for d, reasons in losses.items()
            for r, v in reasons.items()}
    assert said == dict(counted)
