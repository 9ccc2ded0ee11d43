"""``tokenize``, ``pack_flat`` and ``pack_sequences`` spell out their parameters with the spec's
names and defaults (spec 5.6, 5.10), and every keyword their operators take still works."""

from __future__ import annotations

import inspect

import pytest

from zephon import Pipeline
from zephon.io import Dataset
from zephon.ops.pack import PackOp
from zephon.ops.tokenize import TokenizeOp
from zephon.work import StaticMixtureWorkSource

_ = inspect.Parameter.empty
SPEC = {
    "tokenize": {"tokenizer": None, "tokenizer_id": None, "field": _, "max_length": None,
                 "truncation": False, "split_long_samples": False, "special_tokens": "bos_eos",
                 "bos_token_id": None, "eos_token_id": None, "preserve_upstream_payload": False,
                 "missing_field": "error", "add_attention_mask": True, "padding": False,
                 "return_tensors": None},
    "pack_flat": {"max_length": _, "num_bins": None, "algorithm": "first_fit",
                  "tokens_field": "auto", "drop_oversized": None, "min_sequence_length": 1,
                  "shuffle_strategy": None, "shuffle_seed": None, "flush_strategy": "fifo",
                  "candidate_pool_size": None, "max_candidate_age": None, "homogeneity": "none",
                  "groups": None, "emit_positions": True, "pad_token_id": None,
                  "placement": "auto", "parallelism": None},
    "pack_sequences": {"max_length": _, "num_bins": None, "algorithm": "first_fit",
                       "tokens_field": "auto", "drop_oversized": None,
                       "min_sequence_length": 1, "shuffle_strategy": None, "shuffle_seed": None,
                       "flush_strategy": "fifo", "candidate_pool_size": None,
                       "max_candidate_age": None, "homogeneity": "none", "groups": None,
                       "pack_payloads": "keep_list", "placement": "auto", "parallelism": None},
}
OPS = {"tokenize": TokenizeOp, "pack_flat": PackOp, "pack_sequences": PackOp}


@pytest.mark.parametrize("method", sorted(SPEC))
def test_parameters_are_explicit_with_the_spec_defaults(method):
    params = inspect.signature(getattr(Pipeline, method)).parameters
    assert not any(p.kind is p.VAR_KEYWORD for p in params.values()), f"{method} hides **kw"
    for name, default in SPEC[method].items():
        assert name in params, f"{method} lacks {name}"
        assert params[name].default == default, (method, name, params[name].default)


@pytest.mark.parametrize("method", sorted(SPEC))
def test_every_keyword_of_the_operator_is_a_parameter(method):
    """What ``**kw`` passed on before is still taken (the keywords are the operator's)."""
    mine = inspect.signature(getattr(Pipeline, method)).parameters
    theirs = inspect.signature(OPS[method].__init__).parameters
    taken = {n for n, p in theirs.items() if p.kind is p.KEYWORD_ONLY or n in (
        "tokenizer", "tokenizer_id", "max_length")} - {"flat", "work_source"}
    assert taken <= set(mine), sorted(taken - set(mine))


def test_builders_pass_each_keyword_on():
    ws = StaticMixtureWorkSource([Dataset.from_dict("d", {0: [{"text": "a b"}] * 4})],
                                 {"d": 1.0}, seed=0)
    p = (Pipeline(ws).tokenize(tokenizer_id="__fallback__", field="text", max_length=7,
                               truncation=True, pad_token_id=3, missing_field="empty")
         .pack_flat(11, algorithm="best_fit", num_bins=3, pad_token_id=5, emit_positions=False,
                    flush_strategy="fullest", min_sequence_length=2, oversized="drop"))
    tok, pack = p._ops
    assert (tok.max_length, tok.truncation, tok.pad_token_id, tok.missing_field) == \
        (7, True, 3, "empty")
    assert (pack.max_length, pack.algorithm, pack.pad_token_id, pack.emit_positions) == \
        (11, "best_fit", 5, False)
    assert pack.packer_config["num_bins"] == 3 and pack.oversized == "drop"
    assert pack.packer_config["flush_strategy"] == "fullest"
    assert pack.packer_config["min_sequence_length"] == 2
    seq = Pipeline(ws).tokenize(tokenizer_id="__fallback__", field="text").pack_sequences(
        9, algorithm="wrap", pack_payloads="numpy_array")._ops[-1]
    assert (seq.flat, seq.pack_payloads, seq.algorithm) == (False, "numpy_array", "wrap")
