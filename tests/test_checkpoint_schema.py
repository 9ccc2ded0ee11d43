"""The checkpoint document is checked whole at restore(): tampering is refused naming the field;
a micro-batch size change resumes the exact remaining records."""

from __future__ import annotations

import copy
import json
import warnings

import pytest

from zephon import Pipeline, merge_checkpoints
from zephon.io import Dataset
from zephon.ops.errors import CheckpointError, ZephonError
from zephon.work import StaticMixtureWorkSource


def _ws(corpus_dir, chunk_size=90, **kw):
    ds = [Dataset.from_path("code", str(corpus_dir / "code")),
          Dataset.from_path("web", str(corpus_dir / "web"))]
    return StaticMixtureWorkSource(ds, {"code": 0.25, "web": 0.75}, seed=7,
                                   chunk_size=chunk_size, **kw)


def _shuffled(corpus_dir, size=5, workers=0, lanes=2, **ws_kw):
    return (Pipeline(_ws(corpus_dir, **ws_kw))
            .options(num_workers=workers, canonical_replicas=lanes, micro_batch_size=37)
            .shuffle(buffer_size=64, seed=3).batch(microbatch_size=size, drop_last=True))


def _packed(corpus_dir, tok):
    return (Pipeline(_ws(corpus_dir)).options(num_workers=0, canonical_replicas=2,
                                              micro_batch_size=37)
            .tokenize(tokenizer=tok, field="text", max_length=48, split_long_samples=True)
            .shuffle(buffer_size=40, seed=1).ensure_mixture(max_buffer_size=30)
            .pack_flat(max_length=49, algorithm="best_fit", num_bins=4, pad_token_id=0)
            .batch(microbatch_size=3))


def _state_after(p, n):
    it = iter(p)
    for _ in range(n):
        next(it)
    state = json.loads(json.dumps(p.checkpoint()))
    p.close()
    return state


def _lane0(doc):
    return doc["lanes"]["0"]


# (what the issue reported, how to do it, the field the refusal must name)
TAMPERING = [
    ("negative held offset", lambda d: _lane0(d)["base"]["ops"][0]["held"]["chunk_offset"]
     ["data"].__setitem__(2, -3), r"lanes\[0\]\.base\.ops\[0\]\.held\.chunk_offset\[2\]"),
    ("skip=-1", lambda d: _lane0(d).__setitem__("skip", -1), r"lanes\[0\]\.skip"),
    ("skip=10**18", lambda d: _lane0(d).__setitem__("skip", 10 ** 18), r"lanes\[0\]\.skip"),
    ("skip=2.7", lambda d: _lane0(d).__setitem__("skip", 2.7), r"lanes\[0\]\.skip"),
    ("skip=True", lambda d: _lane0(d).__setitem__("skip", True), r"lanes\[0\]\.skip"),
    ("offset past its chunk", lambda d: _lane0(d)["base"].__setitem__("position", [0, 91]),
     r"lanes\[0\]\.base\.position\[1\]"),
    ("chunk past the stream", lambda d: _lane0(d)["base"].__setitem__("position", [10 ** 6, 0]),
     r"lanes\[0\]\.base\.position"),
    ("missing base", lambda d: _lane0(d).pop("base"), r"lanes\[0\]\.base"),
    ("missing skip", lambda d: _lane0(d).pop("skip"), r"lanes\[0\]\.skip"),
    ("missing ops", lambda d: _lane0(d)["base"].pop("ops"), r"lanes\[0\]\.base\.ops"),
    ("held id out of order", lambda d: _lane0(d)["base"]["ops"][0]["held_ids"]["data"]
     .__setitem__(1, 0), r"lanes\[0\]\.base\.ops\[0\]\.held_ids\[1\]"),
    ("lane outside the lanes", lambda d: d["lanes"].__setitem__("7", None), r"lanes\[7\]"),
    ("a missing lane", lambda d: d["lanes"].pop("1"), r"lanes\[1\]"),
    ("an unknown key", lambda d: _lane0(d).__setitem__("extra", 1), r"lanes\[0\]\.extra"),
]


@pytest.mark.parametrize("signed", [True, False], ids=["version-2", "version-1"])
@pytest.mark.parametrize("what,change,field", TAMPERING, ids=[t[0] for t in TAMPERING])
def test_tampered_checkpoint_is_refused_naming_the_field(corpus_dir, what, change, field,
                                                         signed):
    state = _state_after(_shuffled(corpus_dir), 9)  # lane 0's shuffle holds 20 records
    if not signed:  # version 1 had no digests: the schema alone must catch these
        state["version"] = 1
        state.pop("digest")
        for lane in state["lanes"].values():
            lane.pop("digest")
    change(state)
    with pytest.raises(CheckpointError, match=field) as e:
        _shuffled(corpus_dir).restore(state)
    assert e.value.field


def test_a_plausible_edit_is_caught_by_the_lane_digest(corpus_dir):
    """skip 1 -> 0 or another delivered count names a real position: only the digest knows."""
    state = _state_after(_shuffled(corpus_dir), 9)
    for lane, key in (("0", "skip"), ("1", "delivered")):
        doc = copy.deepcopy(state)
        doc["lanes"][lane][key] = max(0, doc["lanes"][lane][key] - 1)
        with pytest.raises(CheckpointError, match=rf"lanes\[{lane}\]: does not match its digest"):
            _shuffled(corpus_dir).restore(doc)
    doc = copy.deepcopy(state)
    doc["lanes"]["1"] = None  # a lane reset to "not started" would replay its records
    with pytest.raises(CheckpointError, match="^checkpoint digest"):
        _shuffled(corpus_dir).restore(doc)


def test_checkpoint_error_is_the_types_callers_catch():
    e = CheckpointError("lanes[0].skip", "bad")
    assert isinstance(e, ZephonError) and isinstance(e, ValueError)
    assert isinstance(e, RuntimeError) and e.field == "lanes[0].skip"


def test_record_that_does_not_exist_is_refused_when_it_is_rebuilt(corpus_dir, tokenizer_path):
    """A split child index is only known once the document is tokenized again: restore names
    the operator's state when the lane starts, never delivers a different record."""
    state = _state_after(_packed(corpus_dir, tokenizer_path), 20)
    state["version"] = 1  # a forged edit (version 1 has no digests to catch it)
    state.pop("digest")
    for lane in state["lanes"].values():
        lane.pop("digest")
    i = 2  # pack_flat: nothing in its state repeats the records' identity
    held = _lane0(state)["base"]["ops"][i]["held"]
    assert held["lineage"]["shape"][1] == 1
    held["lineage"]["data"][0] = 977  # split documents have a few children, not 978
    p = _packed(corpus_dir, tokenizer_path).restore(state)
    with pytest.raises(CheckpointError, match=rf"lanes\[0\]\.base\.ops\[{i}\]"):
        next(iter(p))
    p.close()


def _lane_records(batches):
    out: dict[int, list] = {}
    for b in batches:
        out.setdefault(b.lane_ids[0], []).extend(zip(b.ids, map(tuple, b.block.lineage.tolist())))
    return out


@pytest.mark.parametrize("old,new,cut", [(8, 4, 5), (8, 3, 3), (4, 8, 7)])
def test_restore_with_another_microbatch_size_delivers_exactly_the_rest(corpus_dir, old, new,
                                                                        cut):
    every = _lane_records(_shuffled(corpus_dir, 1))  # each lane's records, one per batch
    p = _shuffled(corpus_dir, old)
    it = iter(p)
    head = [next(it) for _ in range(cut)]
    state = json.loads(json.dumps(p.checkpoint()))
    p.close()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # unaligned sizes warn (spec 9.4), tested below
        q = _shuffled(corpus_dir, new).restore(state)
    it = iter(q)
    tail = [next(it) for _ in range(6)]
    # a checkpoint of the resumed run, restored again (the discard count travels in it)
    again = _shuffled(corpus_dir, new).restore(json.loads(json.dumps(q.checkpoint())))
    q.close()
    tail += list(again)
    assert all(len(b) == new for b in tail)
    done, rest = _lane_records(head), _lane_records(tail)
    for lane, records in every.items():
        got = done.get(lane, []) + rest.get(lane, [])
        assert got == records[:len(got)], f"lane {lane}: a record lost, repeated or moved"
        assert len(records) - len(got) < new, f"lane {lane}: records left undelivered"


def test_microbatch_change_with_two_workers(corpus_dir):
    p = _shuffled(corpus_dir, 8, workers=2)
    it = iter(p)
    head = [next(it) for _ in range(5)]
    state = json.loads(json.dumps(p.checkpoint()))
    p.close()
    q = _shuffled(corpus_dir, 4, workers=2).restore(state)
    it = iter(q)
    tail = [next(it) for _ in range(8)]
    q.close()
    every = _lane_records(_shuffled(corpus_dir, 1))
    done, rest = _lane_records(head), _lane_records(tail)
    for lane in every:
        got = done.get(lane, []) + rest.get(lane, [])
        assert got == every[lane][:len(got)]


def test_unaligned_microbatch_change_warns(corpus_dir):
    state = _state_after(_shuffled(corpus_dir, 8), 3)  # lanes delivered 16 and 8 records
    with pytest.warns(UserWarning, match=r"8 -> 3; lane\(s\) \[0, 1\]"):
        _shuffled(corpus_dir, 3).restore(state)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _shuffled(corpus_dir, 4).restore(state)


def test_microbatch_change_is_refused_when_an_operator_follows_batch(corpus_dir):
    def make(size):
        return _shuffled(corpus_dir, size).map_batch(lambda b: b)

    state = _state_after(make(8), 3)
    with pytest.raises(CheckpointError, match=r"operators\[1\]\.microbatch_size.*map_batch"):
        make(4).restore(state)


def test_data_settings_are_refused_execution_settings_are_not(corpus_dir):
    def make(seed=3, parallelism=None):
        return (Pipeline(_ws(corpus_dir)).options(num_workers=0, canonical_replicas=2)
                .map_transform(lambda r: r, parallelism=parallelism)
                .shuffle(buffer_size=64, seed=seed).batch(microbatch_size=4))

    state = _state_after(make(), 3)
    with pytest.raises(CheckpointError, match=r"fingerprint\.operators\[1\]\.seed"):
        make(seed=4).restore(state)
    expected = [b.ids for _, b in zip(range(4), make().restore(state))]
    assert [b.ids for _, b in zip(range(4), make(parallelism=2).restore(state))] == expected


def test_merge_checkpoints_signs_the_union_and_refuses_an_altered_part(corpus_dir):
    parts = []
    for rank in range(2):
        p = _shuffled(corpus_dir, lanes=4).options(world_size=2, global_rank=rank)
        parts.append(_state_after(p, 4))
    merged = merge_checkpoints(parts)
    _shuffled(corpus_dir, lanes=4).restore(merged)
    parts[1]["token_ratios"] = {"code": 1.0, "web": 1.0}
    with pytest.raises(CheckpointError, match=r"parts\[1\]\.digest"):
        merge_checkpoints(parts)


def test_token_aware_source_restores_with_the_checkpoints_ratios(tmp_path, tokenizer_path):
    from zephon import synthetic
    from zephon.work import TokenEstimation

    synthetic.write_dataset(tmp_path, "long", 300, n_shards=2, seed=1, mean_words=120)
    synthetic.write_dataset(tmp_path, "short", 900, n_shards=2, seed=2, mean_words=30)

    def make():
        ds = [Dataset.from_path(n, str(tmp_path / n)) for n in ("long", "short")]
        ws = StaticMixtureWorkSource(ds, {"long": 0.5, "short": 0.5}, chunk_size=128, seed=3,
                                     token_estimation=TokenEstimation(calibration_samples=64))
        return (Pipeline(ws).options(num_workers=0, canonical_replicas=2)
                .tokenize(tokenizer=tokenizer_path, field="text").shuffle(buffer_size=32)
                .batch(microbatch_size=8))

    full = [b.ids for _, b in zip(range(12), make())]
    state = _state_after(make(), 7)
    assert [b.ids for _, b in zip(range(5), make().restore(state))] == full[7:]
    doc = copy.deepcopy(state)
    doc["token_ratios"]["short"] *= 1.5
    with pytest.raises(CheckpointError, match=r"^checkpoint digest"):
        make().restore(doc)
    doc["version"] = 1  # without digests, a ratio is a plausible value: only its form is checked
    doc.pop("digest")
    for lane in doc["lanes"].values():
        lane.pop("digest")
    del doc["token_ratios"]["short"]
    with pytest.raises(CheckpointError, match=r"^checkpoint token_ratios"):
        make().restore(doc)
