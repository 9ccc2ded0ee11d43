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


# -- DataLoader workers (num_workers > 0) -------------------------------------------------------


def _four_lanes(corpus_dir, **opts):
    ds = [Dataset.from_path("code", str(corpus_dir / "code")),
          Dataset.from_path("web", str(corpus_dir / "web"))]
    ws = StaticMixtureWorkSource(ds, {"code": 0.25, "web": 0.75}, seed=7, chunk_size=32)
    return (Pipeline(ws).options(canonical_replicas=4, **opts).shuffle(buffer_size=16)
            .batch(microbatch_size=8))


def _sig(b) -> tuple:
    return b.lane_ids[0], tuple(b.ids)


def _loader_order(stream: list, workers: int, lanes: int) -> list:
    """What a DataLoader over ``workers`` workers yields, from the pipeline's own stream: worker
    w reads lanes w, w+workers, ... (in the pipeline's order), and the loader takes one batch
    from each worker in turn, skipping those that have finished."""
    queues = [[s for s in stream if s[0] in range(w, lanes, workers)] for w in range(workers)]
    out, turn = [], list(range(workers))
    while turn:
        w = turn.pop(0)
        if queues[w]:
            out.append(queues[w].pop(0))
            turn.append(w)
    return out


def test_dataloader_workers_share_the_lanes(corpus_dir):
    """Each DataLoader worker iterates its share of the lanes (inline, in the worker): together
    they deliver exactly the pipeline's batches, in the loader's rotation over its workers."""
    stream = [_sig(b) for b in _four_lanes(corpus_dir, num_workers=2)]
    ds = _four_lanes(corpus_dir, num_workers=2).to_torch_dataset()
    got = [_sig(b) for b in torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)]
    assert sorted(got) == sorted(stream) and len(set(got)) == len(got)
    assert got == _loader_order(stream, 2, 4)
    # while every lane runs, that rotation is the pipeline's own order
    assert got[:40] == stream[:40]


def test_a_dataloader_worker_without_lanes_says_so(corpus_dir, tokenizer_path):
    p = _pipeline(corpus_dir, tokenizer_path)  # two lanes
    stream = [_sig(b) for _, b in zip(range(12), p)]
    loader = torch.utils.data.DataLoader(_pipeline(corpus_dir, tokenizer_path).to_torch_dataset(),
                                         batch_size=None, num_workers=3)
    with pytest.warns(RuntimeWarning, match="worker 2 of 3 has no lanes"):
        _pipeline(corpus_dir, tokenizer_path).to_torch_dataset().in_loader_worker(2, 3)
    got = [_sig(b) for _, b in zip(range(12), loader)]
    assert got == stream  # workers 0 and 1 read lanes 0 and 1; worker 2 has none


def test_stateful_dataloader_with_workers_resumes_exactly(corpus_dir):
    sdl = pytest.importorskip("torchdata.stateful_dataloader")

    def loader():
        ds = _four_lanes(corpus_dir).to_torch_dataset()
        return sdl.StatefulDataLoader(ds, batch_size=None, num_workers=2)

    full = [_sig(b) for b in loader()]
    first = loader()
    head = []
    for b in first:
        head.append(_sig(b))
        if len(head) == 23:
            break
    state = first.state_dict()
    del first
    resumed = loader()
    resumed.load_state_dict(state)
    assert head + [_sig(b) for b in resumed] == full


def test_to_torch_dataset_does_no_work_until_iterated(tmp_path, tokenizer_path):
    """A token-aware source is primed when the dataset is iterated, not when it is made."""
    from zephon import synthetic
    from zephon.work import TokenEstimation

    synthetic.write_dataset(tmp_path, "a", 300, n_shards=2, seed=1, mean_words=20)
    synthetic.write_dataset(tmp_path, "b", 300, n_shards=2, seed=2, mean_words=40)
    measured = []

    def count_words(payload) -> int:
        measured.append(1)
        return len(payload["text"].split())

    def pipeline():
        ds = [Dataset.from_path(n, str(tmp_path / n)) for n in ("a", "b")]
        te = TokenEstimation(measure=count_words, calibration_samples=64)
        ws = StaticMixtureWorkSource(ds, {"a": 0.5, "b": 0.5}, seed=3, chunk_size=32,
                                     token_estimation=te)
        return (Pipeline(ws).options(num_workers=0)
                .tokenize(tokenizer=tokenizer_path, field="text").batch(microbatch_size=8))

    want = [tuple(b.ids) for _, b in zip(range(10), pipeline())]
    measured.clear()
    ds = pipeline().to_torch_dataset()
    assert measured == []  # nothing read, nothing tokenized
    got = [tuple(b.ids) for _, b in zip(range(10), torch.utils.data.DataLoader(
        ds, batch_size=None, num_workers=0))]
    assert measured and got == want
