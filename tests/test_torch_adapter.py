"""to_torch_dataset: DataLoader(batch_size=None) and torchdata's StatefulDataLoader resume."""

from __future__ import annotations

import pytest

from zephon import Pipeline
from zephon.io import Dataset
from zephon.work import StaticMixtureWorkSource

torch = pytest.importorskip("torch")


def _pipeline(corpus_dir, tokenizer_path):
    ds = [Dataset.from_path("code", str(corpus_dir / "code")),
          Dataset.from_path("web", str(corpus_dir / "web"))]
    ws = StaticMixtureWorkSource(ds, {"code": 0.25, "web": 0.75}, seed=42, chunk_size=64)
    return (Pipeline(ws).options(num_workers=0, canonical_replicas=2)
            .tokenize(tokenizer=tokenizer_path, field="text").shuffle(buffer_size=32)
            .pack_flat(max_length=65, algorithm="best_fit", num_bins=4, pad_token_id=0)
            .batch(microbatch_size=2))


def test_stateful_dataloader_resumes_exactly(corpus_dir, tokenizer_path):
    sdl = pytest.importorskip("torchdata.stateful_dataloader")
    full = [b.ids for _, b in zip(range(30), _pipeline(corpus_dir, tokenizer_path))]
    loader = sdl.StatefulDataLoader(_pipeline(corpus_dir, tokenizer_path).to_torch_dataset(),
                                    batch_size=None, num_workers=0)
    head = []
    for b in loader:
        head.append(b.ids)
        if len(head) == 11:
            break
    state = loader.state_dict()
    resumed = sdl.StatefulDataLoader(_pipeline(corpus_dir, tokenizer_path).to_torch_dataset(),
                                     batch_size=None, num_workers=0)
    resumed.load_state_dict(state)
    tail = [b.ids for _, b in zip(range(19), resumed)]
    assert head + tail == full


def test_non_stateful_wrapper_has_no_state(corpus_dir, tokenizer_path):
    ds = _pipeline(corpus_dir, tokenizer_path).to_torch_dataset(stateful=False)
    with pytest.raises(AttributeError):
        ds.state_dict()
