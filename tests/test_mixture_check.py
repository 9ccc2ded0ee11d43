"""The realised-mixture check: on by default, judged on what is delivered, said once with a cause."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from zephon import Pipeline
from zephon.engine.observe.mixture_check import MixtureCheck
from zephon.io import Dataset, InMemoryShard
from zephon.work import StaticMixtureWorkSource

TOK = {"tokenizer_id": "__fallback__", "field": "text", "special_tokens": "bos_eos",
       "bos_token_id": 1, "eos_token_id": 2}


def _dataset(name: str, sizes: list[int]) -> Dataset:
    texts = ["x" * n for n in sizes]
    return Dataset.from_dict(name, {i: InMemoryShard([{"text": t} for t in texts[i::2]])
                                    for i in range(2)})


def _source(weights=None, short=120, long=120) -> StaticMixtureWorkSource:
    """'short' documents of 5-14 bytes and 'long' ones of 40-79 bytes, mixed by records."""
    ds = [_dataset("short", [5 + i % 10 for i in range(short)]),
          _dataset("long", [40 + i % 40 for i in range(long)])]
    return StaticMixtureWorkSource(ds, weights or {"short": 0.5, "long": 0.5}, chunk_size=16,
                                   seed=2)


def _mixture_warnings(p: Pipeline) -> list[str]:
    """Run ``p`` to its end; the realised-mixture warnings it gave."""
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        list(p)
    return [str(w.message) for w in record if "realised mixture" in str(w.message)]


def _packed(ws, **opts) -> Pipeline:
    return (Pipeline(ws).options(num_workers=0, **opts).tokenize(**TOK))


def test_drops_that_skew_the_mixture_are_named_with_their_cause():
    p = (_packed(_source(), mixture_window=40)
         .pack_flat(max_length=32, algorithm="best_fit", num_bins=2, pad_token_id=0,
                    oversized="drop")
         .batch(microbatch_size=2))
    said = _mixture_warnings(p)
    assert len(said) == 1, said                       # once per run
    assert "'long' made 0.000" in said[0] and "target of 0.500" in said[0]
    assert "pack_flat counted" in said[0] and "'oversized'" in said[0]


def test_no_warning_when_every_document_is_delivered():
    p = (_packed(_source(), mixture_window=40)
         .pack_flat(max_length=32, algorithm="best_fit", num_bins=2, pad_token_id=0)
         .batch(microbatch_size=2))
    assert _mixture_warnings(p) == []
    snap = p.metrics_snapshot()["datasets"]
    assert snap["short"]["records"] == snap["long"]["records"] == 120


@pytest.mark.parametrize("how", ["option", "environment"])
def test_a_zero_tolerance_turns_the_check_off(how, monkeypatch):
    opts = {"mixture_window": 40}
    if how == "option":
        opts["mixture_tolerance"] = 0
    else:
        monkeypatch.setenv("ZEPHON_MIXTURE_TOLERANCE", "0")
    p = (_packed(_source(), **opts)
         .pack_flat(max_length=32, algorithm="best_fit", num_bins=2, pad_token_id=0,
                    oversized="drop")
         .batch(microbatch_size=2))
    assert _mixture_warnings(p) == []


@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.slow)])
def test_ensure_mixture_warn_tolerance_names_the_dataset(workers):
    # a target the input cannot give: 90% 'short' from a stream that is half 'long', with a
    # buffer too small to hold the surplus, so records leave off target
    p = (Pipeline(_source()).options(num_workers=workers, mixture_window=60).tokenize(**TOK)
         .ensure_mixture(max_buffer_size=8, mixture={"short": 0.9, "long": 0.1},
                         warn_tolerance=0.1)
         .batch(microbatch_size=4))
    said = _mixture_warnings(p)
    assert len(said) == 1, said
    assert "tokens against a target of" in said[0] and "tolerance 0.1" in said[0]
    assert "ensure_mixture's buffer (max_buffer_size=8)" in said[0]


def test_the_check_judges_whole_windows_in_the_mixture_unit():
    causes = []
    check = MixtureCheck(["a", "b"], {0: 3, 1: 1}, "tokens", 0.05, 100,
                         lambda d, have, want: causes.append((d, have, want)) or "cause.",
                         min_records=1)  # windows of a record or two, as they come
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check.add(np.array([1, 1]), np.array([75, 20]))   # 95 tokens: no window judged yet
        check.add(None, np.array([0, 5]))                  # 0.75 / 0.25 over 100: on target
        check.add(np.array([9, 9]), None)                  # records do not count for tokens
        check.add(np.array([1, 1]), np.array([30, 40]))   # partial window: not judged
    assert check.windows == 1 and causes == []
    # 60 / 40 over 100: both are 0.15 off (0.075 over the two windows); the one short of its
    # target is named
    with pytest.warns(RuntimeWarning, match="'a' made 0.600 .* target of 0.750"):
        check.add(np.array([1, 1]), np.array([30, 0]))
    assert causes == [(0, 0.6, 0.75)] and check.warned
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check.add(np.array([0, 1]), np.array([0, 500]))   # said once per run


def test_strict_ensure_mixture_counts_what_it_drops():
    p = (Pipeline(_source()).options(num_workers=0, mixture_tolerance=0).tokenize(**TOK)
         .ensure_mixture(max_buffer_size=None, mixture={"short": 0.9, "long": 0.1})
         .batch(microbatch_size=1, drop_last=False))
    with pytest.warns(RuntimeWarning, match="ensure_mixture counted .*'off_target'"):
        delivered = len(list(p))
    losses = p.metrics_snapshot()["losses"]
    assert losses["records"] > 0 and delivered + losses["records"] == 240
    assert list(losses["by_dataset"]) == ["long"]
    assert losses["by_dataset"]["long"]["off_target"]["tokens"] > 0


def _stream(check: MixtureCheck, tokens: int, b_stops_at: int | None = None) -> None:
    """Batches of 32 records drawn at random: 'a' of 10 tokens, 'b' of 500-1,500 (token
    shares 0.8 / 0.2 on average); 'b' stops being delivered at ``b_stops_at`` tokens."""
    rng = np.random.default_rng(4)
    done = 0
    while done < tokens:
        is_b = rng.random(32) < 0.0025
        if b_stops_at is not None and done >= b_stops_at:
            is_b[:] = False
        tb = int(rng.integers(500, 1500, is_b.sum()).sum())
        ta = 10 * int((~is_b).sum())
        check.add(np.array([(~is_b).sum(), is_b.sum()]), np.array([ta, tb]))
        done += ta + tb


def test_a_few_long_records_swinging_a_window_are_not_called_off_target():
    # 20k-token windows hold two of b's records on average: their shares swing by tens of
    # points from one window to the next, with nothing wrong
    check = MixtureCheck(["a", "b"], {0: 0.8, 1: 0.2}, "tokens", 0.05, 20_000,
                         lambda d, have, want: "cause.")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _stream(check, 4_000_000)
    assert check.windows >= 10  # judged all along, over windows stretched to hold b's records
    # the unstretched windows, one by one, would have been far off
    raw = MixtureCheck(["a", "b"], {0: 0.8, 1: 0.2}, "tokens", 0.05, 20_000,
                       lambda d, have, want: "cause.", min_records=0)
    with pytest.warns(RuntimeWarning, match="realised mixture off target"):
        _stream(raw, 4_000_000)


def test_a_dataset_that_stops_coming_is_said_in_the_next_stretched_window():
    causes = []
    check = MixtureCheck(["a", "b"], {0: 0.8, 1: 0.2}, "tokens", 0.05, 20_000,
                         lambda d, have, want: causes.append((d, have, want)) or "cause.")
    with pytest.warns(RuntimeWarning, match="'b' made 0.0"):
        _stream(check, 3_000_000, b_stops_at=1_500_000)
    assert causes and causes[0][0] == 1
