"""to_training_arrays against a slow per-row reference, plus the spec's rules and errors."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zephon.tokens import convert, finalize, rename_and_exclude, to_training_arrays

BOS, EOS = 1, 2
HAS_TORCH = importlib.util.find_spec("torch") is not None


def slow_reference(tokens, pad, loss_mask, positions, *, ignore, eos, flatten, boundary=True):
    """Spec 6.2 read literally, one row and one position at a time."""
    out = {"input_ids": [], "labels": [], "loss_mask": [], "positions": [], "padding_mask": [],
           "cu_seqlens": [], "max_seqlen": []}
    S = len(tokens[0]) if tokens else 0
    W = max(S - 1, 0)
    flat_cu, offset = [], 0
    for b, row in enumerate(tokens):
        inputs, labels = list(row[:-1]), list(row[1:])
        for j in range(W):
            if j >= S - 1 - pad[b]:
                labels[j] = ignore
            if loss_mask is not None and loss_mask[b][j + 1] == 0:
                labels[j] = ignore
            if eos is not None and inputs[j] == eos:
                labels[j] = ignore
            if boundary and positions[b][j + 1] == 0:   # the next token opens another document
                labels[j] = ignore
        pos = list(positions[b][:W])
        starts = [j for j in range(W) if pos[j] == 0]
        bounds = starts + [W]
        out["input_ids"].append(inputs)
        out["labels"].append(labels)
        out["loss_mask"].append([1.0 if v != ignore else 0.0 for v in labels])
        out["positions"].append(pos)
        out["padding_mask"].append([j >= S - pad[b] for j in range(W)])
        out["cu_seqlens"].append(bounds)
        out["max_seqlen"].append(max([bounds[i + 1] - bounds[i] for i in range(len(starts))] or [0]))
        flat_cu += [s + offset for s in starts]
        offset += W
    if flatten:
        for k in ("input_ids", "labels", "loss_mask", "positions", "padding_mask"):
            out[k] = [v for row in out[k] for v in row]
        flat_cu.append(offset)
        out["cu_seqlens"] = flat_cu
        out["max_seqlen"] = max([flat_cu[i + 1] - flat_cu[i] for i in range(len(flat_cu) - 1)]
                                or [0])
    else:
        K = max((len(c) for c in out["cu_seqlens"]), default=0)
        out["cu_seqlens"] = [c + [W] * (K - len(c)) for c in out["cu_seqlens"]]
    out["num_valid_tokens"] = sum(v for row in out["loss_mask"] for v in
                                  (row if isinstance(row, list) else [row]))
    return out


@st.composite
def packed_batch(draw):
    """Rows of documents (BOS ... EOS) plus a pad tail, with per-document positions."""
    B = draw(st.integers(1, 4))
    S = draw(st.integers(2, 14))
    tokens, positions, pads, masks = [], [], [], []
    for _ in range(B):
        row, pos = [], []
        while len(row) < S:
            n = draw(st.integers(1, S - len(row)))
            if draw(st.booleans()) or len(row) + n == S:
                doc = [BOS] + [draw(st.integers(3, 9)) for _ in range(n - 2)] + [EOS]
                doc = doc[:n]
            else:
                break
            row += doc
            pos += list(range(n))
        pad = S - len(row)
        row += [0] * pad
        pos += list(range(pad))
        pos[0] = 0
        tokens.append(row)
        positions.append(pos)
        pads.append(pad)
        masks.append([draw(st.integers(0, 1)) for _ in range(S)])
    return tokens, positions, pads, masks


@settings(max_examples=150, deadline=None)
@given(batch=packed_batch(), use_mask=st.booleans(), eos_mask=st.booleans(),
       flatten=st.booleans(), ignore=st.sampled_from([-100, -1]), boundary=st.booleans())
def test_matches_slow_reference(batch, use_mask, eos_mask, flatten, ignore, boundary):
    tokens, positions, pads, masks = batch
    got = to_training_arrays(
        np.array(tokens), padding_length=np.array(pads), positions=np.array(positions),
        loss_mask=np.array(masks) if use_mask else None, return_labels=True, ignore_index=ignore,
        return_loss_mask=True, return_num_valid_tokens=True, return_cu_seqlens=True,
        return_padding_mask=True, eos_mask_loss=eos_mask, eos_token_id=EOS, flatten=flatten,
        boundary_mask_loss=boundary)
    want = slow_reference(tokens, pads, masks if use_mask else None, positions, ignore=ignore,
                          eos=EOS if eos_mask else None, flatten=flatten, boundary=boundary)
    for key, value in want.items():
        g = got[key]
        assert (g.tolist() if isinstance(g, np.ndarray) else g) == value, key
    assert got["labels"].dtype == np.int64 and got["loss_mask"].dtype == np.float32
    assert got["cu_seqlens"].dtype == np.int32 and got["padding_mask"].dtype == np.bool_


def test_worked_example():
    a1, a2, b1, b2 = 11, 12, 21, 22
    rec = [BOS, a1, a2, EOS, BOS, b1, b2, EOS]
    pos = [0, 1, 2, 3, 0, 1, 2, 3]
    out = to_training_arrays(np.array([rec]), positions=np.array([pos]), return_labels=True,
                             return_cu_seqlens=True)
    assert out["input_ids"].tolist() == [rec[:-1]]
    # the label of the last token of a document (EOS predicting the next BOS) is masked by
    # default, where the next document starts (the reference keeps it)
    assert out["labels"].tolist() == [[a1, a2, EOS, -100, b1, b2, EOS]]
    kept = to_training_arrays(np.array([rec]), positions=np.array([pos]), return_labels=True,
                              boundary_mask_loss=False)
    assert kept["labels"].tolist() == [rec[1:]]
    assert out["positions"].tolist() == [[0, 1, 2, 3, 0, 1, 2]]
    assert out["cu_seqlens"].tolist() == [[0, 4, 7]] and out["max_seqlen"].tolist() == [4]
    masked = to_training_arrays(np.array([rec]), positions=np.array([pos]), return_labels=True,
                                eos_mask_loss=True, eos_token_id=EOS, position_mode="sequence",
                                return_cu_seqlens=True, flatten=True, boundary_mask_loss=False)
    assert masked["labels"].tolist() == [a1, a2, EOS, -100, b1, b2, EOS]
    assert masked["positions"].tolist() == list(range(7))
    assert masked["cu_seqlens"].tolist() == [0, 4, 7] and masked["max_seqlen"] == 4


def test_without_labels_and_extra_fields():
    toks = np.arange(12).reshape(2, 6)
    lm = np.ones((2, 6), np.int8)
    extra = {"weights": np.full((2, 6), 0.5), "doc_count": np.array([1, 2])}
    out = to_training_arrays(toks, loss_mask=lm, extra_fields=extra, return_padding_mask=True,
                             padding_length=[0, 2])
    assert out["input_ids"].shape == (2, 6) and out["loss_mask"].dtype == np.float32
    assert out["padding_mask"].tolist()[1] == [False] * 4 + [True] * 2
    assert out["doc_count"].tolist() == [1, 2]
    out = to_training_arrays(toks, return_labels=True, extra_fields=extra, flatten=True)
    assert out["weights"].shape == (10,) and out["doc_count"].shape == (2,)
    assert not np.shares_memory(out["input_ids"], toks)


def test_ragged_and_list_inputs_and_empty_batch():
    ragged = (np.array([0, 3, 6]), np.array([1, 5, 2, 1, 6, 2], np.int32))
    out = to_training_arrays(ragged, return_labels=True)
    assert out["labels"].tolist() == [[5, 2], [6, 2]]
    assert to_training_arrays([[1, 2], [3, 4]])["input_ids"].tolist() == [[1, 2], [3, 4]]
    with pytest.raises(ValueError, match="differ in length"):
        to_training_arrays([[1, 2], [3]])
    empty = np.zeros((0, 0), np.int64)
    for flatten, cu, mx in ((False, [], []), (True, [0], 0)):
        out = to_training_arrays(empty, positions=empty, return_labels=True, flatten=flatten,
                                 return_loss_mask=True, return_num_valid_tokens=True,
                                 return_cu_seqlens=True)
        assert out["num_valid_tokens"] == 0 and out["loss_mask"].tolist() == []
        assert out["cu_seqlens"].tolist() == cu
        assert (out["max_seqlen"].tolist() if flatten is False else out["max_seqlen"]) == mx


@pytest.mark.parametrize("kwargs, match", [
    ({"return_loss_mask": True}, "return_labels"),
    ({"return_num_valid_tokens": True}, "return_labels"),
    ({"eos_mask_loss": True, "eos_token_id": 2}, "return_labels"),
    ({"return_labels": True, "eos_mask_loss": True}, "eos_token_id"),
    ({"return_cu_seqlens": True}, "positions"),
    ({"position_mode": "absolute"}, "position_mode"),
    ({"extra_fields": {"cu_seqlens": np.zeros((1, 4))}}, "collides"),
    ({"return_labels": True, "extra_fields": {"labels": np.zeros((1, 4))}}, "labels"),
    ({"return_labels": True, "extra_fields": {"loss_mask": np.zeros((1, 4))}}, "loss_mask"),
    ({"positions": [[0, 1, 2, 3]], "extra_fields": {"positions": np.zeros((1, 4))}}, "collides"),
    ({"padding_length": [5]}, "padding_length"),
    ({"loss_mask": [[1, 1]]}, "loss_mask"),
    ({"positions": [[1, 0, 1, 2]], "return_cu_seqlens": True}, "start at 0"),
])
def test_conflicts_raise_value_error(kwargs, match):
    with pytest.raises(ValueError, match=match):
        to_training_arrays(np.array([[1, 2, 3, 4]]), **kwargs)


def test_rename_and_exclude_rules():
    out = {"input_ids": 1, "labels": 2, "loss_mask": 3}
    assert rename_and_exclude(out, {"input_ids": "tokens"}) == {"tokens": 1, "labels": 2,
                                                                "loss_mask": 3}
    assert rename_and_exclude(out, {"input_ids": "labels", "labels": "input_ids"}) == \
        {"labels": 1, "input_ids": 2, "loss_mask": 3}
    assert rename_and_exclude(out, None, ["loss_mask", "absent"]) == {"input_ids": 1, "labels": 2}
    with pytest.raises(ValueError, match="unknown"):
        rename_and_exclude(out, {"nope": "x"})
    assert rename_and_exclude({}, {"nope": "x"}, empty=True) == {}
    with pytest.raises(ValueError, match="several"):
        rename_and_exclude(out, {"input_ids": "x", "labels": "x"})
    with pytest.raises(ValueError, match="collide"):
        rename_and_exclude(out, {"input_ids": "labels"})
    with pytest.raises(TypeError):
        rename_and_exclude(out, None, "labels")


def test_convert_to_numpy_and_lists():
    out = to_training_arrays(np.array([[1, 2, 3, 0]]), padding_length=[1],
                             positions=[[0, 1, 2, 0]], return_labels=True, return_loss_mask=True,
                             return_num_valid_tokens=True, return_cu_seqlens=True)
    lists = convert(out, None)
    assert lists["labels"] == [[2, 3, -100]] and lists["loss_mask"] == [[1.0, 1.0, 0.0]]
    assert lists["cu_seqlens"] == [[0, 3]] and isinstance(lists["num_valid_tokens"], int)
    arrs = convert(out, np.int32)
    assert arrs["input_ids"].dtype == np.int32 and arrs["loss_mask"].dtype == np.float32
    assert arrs["cu_seqlens"].dtype == np.int32
    assert convert(out, "numpy")["labels"].dtype == np.int64
    with pytest.raises(ValueError, match="dtype"):
        convert(out, object())


@pytest.mark.skipif(not HAS_TORCH, reason="torch not installed")
def test_convert_to_torch():
    import torch

    out = to_training_arrays(np.array([[1, 2, 3, 0]]), padding_length=[1],
                             positions=[[0, 1, 2, 0]], return_labels=True, return_loss_mask=True,
                             return_cu_seqlens=True, return_padding_mask=True)
    t = finalize(out, dtype="auto", rename_fields={"input_ids": "tokens"},
                 exclude_fields=["positions"])
    assert t["tokens"].dtype == torch.int64 and t["labels"].tolist() == [[2, 3, -100]]
    assert t["loss_mask"].dtype == torch.float32 and t["cu_seqlens"].dtype == torch.int32
    assert t["padding_mask"].dtype == torch.bool and "positions" not in t
    assert convert(out, torch.int32)["input_ids"].dtype == torch.int32
