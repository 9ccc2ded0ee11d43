"""Every operator gives the same stream inline and with worker processes; checkpoints taken
with workers restore exactly too."""

from __future__ import annotations

import json

import pytest
from test_checkpoint import MIXES, _make, _sig

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("mix", sorted(MIXES))
def test_two_workers_give_the_inline_stream(corpus_dir, tokenizer_path, mix):
    inline = [_sig(x) for _, x in zip(range(150), _make(corpus_dir, tokenizer_path, mix))]
    workers = _make(corpus_dir, tokenizer_path, mix)
    workers.options(num_workers=2)
    assert [_sig(x) for _, x in zip(range(150), workers)] == inline


@pytest.mark.parametrize("mix", ["split+shuffle+mixture+best_fit", "wrap"])
def test_checkpoint_with_workers_restores_exactly(corpus_dir, tokenizer_path, mix):
    full = [_sig(x) for _, x in zip(range(120), _make(corpus_dir, tokenizer_path, mix))]
    p = _make(corpus_dir, tokenizer_path, mix)
    p.options(num_workers=2)
    it = iter(p)
    head = [_sig(next(it)) for _ in range(37)]
    state = json.loads(json.dumps(p.checkpoint()))
    p.close()
    q = _make(corpus_dir, tokenizer_path, mix).restore(state)
    q.options(num_workers=2)
    tail = [_sig(x) for _, x in zip(range(120 - 37), q)]
    assert head + tail == full
