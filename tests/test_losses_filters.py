"""Whatever a filter removes is counted: drawn = delivered + counted, per dataset, for random
chains of maps that return None, ``filter``, ``map_batch`` dropping batches and user operators
(stateless and stateful) that emit fewer records than they take in; said once; the filtered
share warns or raises past the options' thresholds; a typo in an option name is refused."""

from __future__ import annotations

import random
import warnings

import engine_fakes as F
import numpy as np
import pytest

from zephon import Pipeline
from zephon.errors import ConfigError, DataError

RECORDS, DATASETS, SHARDS = 600, 2, 3


def _source():
    return F.make_source(records=RECORDS, datasets=DATASETS, shards=SHARDS, chunk=40, seed=3)


# user functions at module level (they travel to worker processes by reference)
def none_for_threes(p):
    return None if p["id"] % 3 == 0 else p


def keep_evens(p):
    return p["id"] % 2 == 0


def _id(record) -> int:
    """A record's id field: user operators see ``SampleRecord``s (``.payload``)."""
    return record.payload["id"] if hasattr(record, "payload") else record["id"]


def drop_fives_many(records):
    return [r for r in records if _id(r) % 5 != 1]


def drop_odd_batches(batch):
    return None if batch.ids[0][2] % 2 else batch


def _push_pairs(state, records):
    """Holds a record until the next; every 4th record is never emitted."""
    out = []
    for r in records:
        if _id(r) % 4 == 2:
            continue
        state = state + [r]
        if len(state) == 2:
            out, state = out + state, []
    return state, out


def _flush(state):
    return list(state)


MENU = {
    "map_none": lambda p: p.map_transform(none_for_threes),
    "filter": lambda p: p.filter(keep_evens),
    "add_op": lambda p: p.add_op("drop_fives", process_many=drop_fives_many,
                                 preserves_cursor_order=True),
    "stateful": lambda p: p.stateful_transform("pairs", init_state=list, push=_push_pairs,
                                               flush=_flush),
}


def _chain(seed: int):
    rng = random.Random(seed)
    names = rng.sample(sorted(MENU), rng.randint(1, 3))
    batch_drop = rng.random() < 0.5
    return names, batch_drop


def _build(names, batch_drop, **opts) -> Pipeline:
    p = Pipeline(_source())
    for n in names:
        p = MENU[n](p)
    p = p.batch(7)
    if batch_drop:
        p = p.map_batch(drop_odd_batches)
    return p.options(**opts)


def _delivered(p) -> tuple[np.ndarray, dict]:
    got = np.zeros(DATASETS, dtype=np.int64)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        for b in p:
            got += np.bincount(np.asarray(b.block.meta["dataset_id"]), minlength=DATASETS)
    snap = p.metrics_snapshot()
    return got, {"snap": snap, "said": [str(w.message) for w in said]}


@pytest.mark.parametrize("seed,workers", [(s, 0) for s in range(8)] + [(1, 2), (5, 2)])
def test_every_record_drawn_is_delivered_or_counted(seed, workers):
    names, batch_drop = _chain(seed)
    p = _build(names, batch_drop, num_workers=workers)
    delivered, out = _delivered(p)
    snap = out["snap"]
    assert snap["datasets"]["ds0"]["records"] == delivered[0]
    lost = np.array([sum(r["records"] for r in snap["losses"]["by_dataset"].get(f"ds{d}", {})
                         .values()) for d in range(DATASETS)])
    drawn = np.full(DATASETS, RECORDS // DATASETS)
    assert (drawn == delivered + lost).all(), (names, batch_drop, delivered, lost, snap["losses"])
    assert lost.sum() > 0
    # said once per operator and reason, naming the operator
    reasons = {(op, why) for per in snap["losses"]["by_dataset"].values()
               for why, e in per.items() for op in e["operators"]}
    for op, why in reasons:
        assert sum(f"operator {op} counted" in s and f"'{why}'" in s for s in out["said"]) == 1


def test_map_transform_returning_none_is_counted_as_filtered():
    p = Pipeline(F.make_source(records=10, datasets=1, shards=1, chunk=10, seed=0)) \
        .map_transform(lambda r: r if r["id"] % 2 else None).batch(5)
    delivered, out = _delivered(p)
    assert delivered.sum() == 5
    losses = out["snap"]["losses"]
    assert losses["records"] == 5
    assert losses["by_dataset"]["ds0"]["filtered"]["operators"] == ["map_transform[<lambda>]"]


def test_a_stateful_operator_that_never_emits_a_record_has_it_counted():
    p = _build(["stateful"], False)
    delivered, out = _delivered(p)
    losses = out["snap"]["losses"]["by_dataset"]
    assert {why for per in losses.values() for why in per} == {"not_emitted"}
    assert delivered.sum() + out["snap"]["losses"]["records"] == RECORDS


def test_a_filter_with_nothing_to_remove_counts_nothing():
    p = Pipeline(_source()).filter(lambda r: True).map_transform(lambda r: r).batch(7)
    delivered, out = _delivered(p)
    assert delivered.sum() == RECORDS and out["snap"]["losses"]["records"] == 0
    assert not [s for s in out["said"] if "filtered" in s]


def test_the_filtered_share_warns_and_raises_past_the_thresholds():
    many = Pipeline(_source()).filter(lambda r: r["id"] % 20 == 0).batch(7)
    _, out = _delivered(many)  # 95% removed: past the default filter_warn_ratio (0.9)
    assert sum("more than filter_warn_ratio=0.9" in s for s in out["said"]) == 1
    few = Pipeline(_source()).filter(keep_evens).batch(7)
    _, out = _delivered(few)  # 50%: below it
    assert not [s for s in out["said"] if "filter_warn_ratio" in s]
    strict = Pipeline(_source()).filter(keep_evens).batch(7).options(filter_raise_ratio=0.3)
    with pytest.raises(DataError, match=r"filters removed 300 of the 600 records .*"
                                        r"filter_raise_ratio=0.3"):
        _delivered(strict)
    with pytest.raises(ConfigError, match="share between 0 and 1"):
        Pipeline(_source()).options(filter_warn_ratio=2)


def test_an_unknown_option_is_refused_naming_the_nearest():
    with pytest.raises(ConfigError, match=r"unknown option 'num_wrkers'; did you mean "
                                          r"'num_workers'"):
        Pipeline(_source()).options(num_wrkers=2)
    with pytest.raises(ConfigError, match=r"Dataset.from_path\(\.\.\., on_bad_record"):
        Pipeline(_source()).options(on_bad_record="skip")
