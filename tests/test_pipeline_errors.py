"""Bad input through a pipeline: clear errors naming dataset, file and line; nothing lost."""

from __future__ import annotations

import json

import pytest

from zephon import Pipeline
from zephon.io import Dataset
from zephon.work import MixtureSpec, StaticMixtureWorkSource


def _write(path, rows, bad_line=None):
    lines = [json.dumps(r) for r in rows]
    if bad_line is not None:
        lines[bad_line - 1] = '{"text": "broken'
    path.write_text("\n".join(lines) + "\n")


def _pipeline(root):
    ds = Dataset.from_path("docs", str(root))
    ws = StaticMixtureWorkSource([ds], {"docs": 1.0}, chunk_size=40, seed=0,
                                 shuffle_shards=False)
    return Pipeline(ws).options(num_workers=0, micro_batch_size=10).batch(microbatch_size=5)


def test_malformed_line_is_named_and_delivered_batches_survive(tmp_path):
    root = tmp_path / "docs"
    root.mkdir()
    rows = [{"text": f"doc {i}"} for i in range(100)]
    _write(root / "a.jsonl", rows[:50])
    _write(root / "b.jsonl", rows[50:], bad_line=23)
    p = _pipeline(root)
    got = []
    with pytest.raises(ValueError) as err:
        for b in p:
            got.append(b.ids)
    msg = str(err.value)
    assert "b.jsonl" in msg and "23" in msg and "docs" in msg
    assert len(got) >= 10  # everything before the bad block was delivered
    state = json.loads(json.dumps(p.checkpoint()))
    _write(root / "b.jsonl", rows[50:])  # repair the data, resume from the checkpoint
    rest = [b.ids for b in _pipeline(root).restore(state)]
    full = [b.ids for b in _pipeline(root)]
    assert got + rest == full


def test_mixture_and_dataset_errors_are_clear(tmp_path):
    root = tmp_path / "docs"
    root.mkdir()
    _write(root / "a.jsonl", [{"text": "x"}])
    ds = Dataset.from_path("docs", str(root))
    with pytest.raises(ValueError, match="web"):
        StaticMixtureWorkSource([ds], MixtureSpec({"docs": 0.5, "web": 0.5}))
    with pytest.raises(ValueError):
        MixtureSpec({"docs": 0.0})
    with pytest.raises(FileNotFoundError):
        Dataset.from_path("nope", str(tmp_path / "missing"))
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "e.jsonl").write_text("")
    with pytest.raises(ValueError, match="empty|no rows|no rec"):
        StaticMixtureWorkSource([Dataset.from_path("e", str(tmp_path / "empty"))], {"e": 1.0})


def test_a_line_that_is_not_an_object_is_named(tmp_path):
    root = tmp_path / "docs"
    root.mkdir()
    (root / "a.jsonl").write_text('{"text": "ok"}\n[1, 2]\n')
    with pytest.raises(ValueError, match=r"a\.jsonl.*2|2.*a\.jsonl"):
        list(_pipeline(root))
