"""Token estimates that say how precise they are, and are: small datasets measured whole, the
tokenized sample free to grow within the scanned clusters, Student quantiles for few clusters,
and a sample that depends on what the data is, not where it lies.

(The guide's pipeline once realised 47.9% of tokens for a dataset weighted 50%: its estimate
came from four clusters of 32 records, claimed ±0.9% and was 4.6% off.)
"""

from __future__ import annotations

import json
import os
import shutil
from collections import deque
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_priming import true_tokens_per_record

from zephon import Pipeline, synthetic
from zephon.engine.priming import token_ratios as priming
from zephon.engine.priming import token_sampling
from zephon.io import Dataset
from zephon.work import StaticMixtureWorkSource, TokenEstimation
from zephon.work import calibration as cal


def prime(root, tokenizer, name, te=None):
    ws = StaticMixtureWorkSource([Dataset.from_path(name, Path(root) / name)],
                                 mixture={name: 1.0}, seed=3,
                                 token_estimation=te or TokenEstimation())
    p = Pipeline(ws).tokenize(tokenizer=tokenizer, field="text").batch(microbatch_size=4)
    _, report = priming.prime(p._spec())
    return report["datasets"][name]


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ZEPHON_CACHE_DIR", str(tmp_path / "node-cache"))


def heavy_docs(n: int, seed: int) -> list[str]:
    """Documents where 5% are thirty copies of one joined by spaces: long, and with more
    tokens per byte than the rest (a straight line through lengths does not fit them)."""
    docs = synthetic.documents(n, seed=seed, mean_words=40)
    rng = np.random.default_rng(seed)
    for i in rng.choice(n, size=n // 20, replace=False):
        docs[i] = " ".join([docs[i]] * 30)
    return docs


def test_student_quantiles_match_the_table():
    table = {1: 12.706, 2: 4.303, 3: 3.182, 5: 2.571, 10: 2.228, 30: 2.042}
    for df, t in table.items():
        assert cal.t_of(0.95, df) == pytest.approx(t, rel=0.01)
    assert cal.t_of(0.95, 10_000) == pytest.approx(cal.z_of(0.95), rel=1e-3)


def test_few_clusters_do_not_make_an_estimate_look_precise():
    rng = np.random.default_rng(1)
    x = rng.lognormal(6, 0.9, 4096)
    t = 2 + x / 4 * rng.normal(1, 0.05, len(x))
    sample = cal.Sample(population=100_000, x_mean=float(x.mean()))
    for i in range(4):  # four clusters: three degrees of freedom
        sample.x_b.append(x[i * 32:(i + 1) * 32])
        sample.t_b.append(t[i * 32:(i + 1) * 32])
    est = cal.estimate(sample, 0.95, with_lengths=True)
    spread = np.sqrt(est.var_a + est.var_b)
    assert est.rel_half_width == pytest.approx(cal.t_of(0.95, 3) * spread)
    assert est.rel_half_width > 1.5 * cal.z_of(0.95) * spread


def test_the_tokenized_sample_takes_turns_over_the_scanned_clusters():
    rows = np.arange(2 * 512, dtype=np.float64)
    pending = deque([[rows[:512], None, [64, 0, 448, 32]], [rows[512:], None, [96, 480]]])
    got = token_sampling._take_for_tokens(pending, 4 * cal.CLUSTER_ROWS + 5)
    starts = [int(x[0]) for x, _ in got]
    assert starts == [32, 512 + 480, 448, 512 + 96, 0]  # one from each in turn, then on
    # whole sub-clusters, the last one cut to the records asked for
    assert [len(x) for x, _ in got] == [cal.CLUSTER_ROWS] * 4 + [5]
    assert [p[2] for p in pending] == [[64]]  # what is left to take next round


def test_a_small_mixed_format_dataset_is_measured_whole_and_exactly(tmp_path, tokenizer_path):
    docs = heavy_docs(1200, seed=11)
    (tmp_path / "web").mkdir()
    pq.write_table(pa.table({"text": docs[:600]}), tmp_path / "web" / "a.parquet",
                   row_group_size=128)
    with open(tmp_path / "web" / "b.jsonl", "w") as f:
        for d in docs[600:]:
            f.write(json.dumps({"text": d}) + "\n")
    info = prime(tmp_path, tokenizer_path, "web")
    truth = true_tokens_per_record(Dataset.from_path("web", tmp_path / "web"), tokenizer_path)
    assert info["tokenized"] == 1200 and info["precision"] == 0.0
    assert info["tokens_per_record"] == pytest.approx(truth, rel=1e-12)


@pytest.mark.slow
def test_heavy_tailed_estimates_are_near_the_truth_over_many_samples(tmp_path, tokenizer_path,
                                                                     monkeypatch):
    docs = heavy_docs(4000, seed=7)
    (tmp_path / "web").mkdir()
    for s in range(4):
        pq.write_table(pa.table({"text": docs[s::4]}), tmp_path / "web" / f"p{s}.parquet",
                       row_group_size=128)
    truth = true_tokens_per_record(Dataset.from_path("web", tmp_path / "web"), tokenizer_path)
    errors, covered = [], 0
    for seed in range(12):  # twelve calibration samples of one dataset
        monkeypatch.setattr(token_sampling, "_seed", lambda ds, s=seed: 1000 + s)
        monkeypatch.setenv("ZEPHON_CACHE_DIR", str(tmp_path / f"cache-{seed}"))
        info = prime(tmp_path, tokenizer_path, "web")
        assert info["tokenized"] <= 2048  # sampled (calibration_samples), not measured whole
        err = abs(info["tokens_per_record"] / truth - 1)
        errors.append(err)
        covered += err <= info["precision"]
    assert np.median(errors) < 0.006, errors
    assert covered >= 9, (covered, errors)  # the stated precision holds for most samples


def test_the_same_data_elsewhere_is_sampled_alike(tmp_path, tokenizer_path):
    synthetic.write_dataset(tmp_path / "a", "web", 3000, n_shards=6, fmt="parquet", seed=2,
                            mean_words=120)
    # copied without its times: another location, other versions, the same records
    shutil.copytree(tmp_path / "a" / "web", tmp_path / "b" / "web", copy_function=shutil.copy)
    os.utime(next((tmp_path / "b" / "web").glob("*.parquet")), (1, 1))
    first = prime(tmp_path / "a", tokenizer_path, "web")
    second = prime(tmp_path / "b", tokenizer_path, "web")
    assert first["source"] == second["source"] == "measured"  # not one from the other's cache
    assert first["tokenized"] < 3000
    assert second["tokens_per_record"] == first["tokens_per_record"]


@pytest.mark.parametrize("cap", [20, 64, 100])
def test_calibration_samples_caps_the_tokenized_records_from_the_first_round(tmp_path,
                                                                             tokenizer_path,
                                                                             cap):
    synthetic.write_dataset(tmp_path, "web", 3000, n_shards=6, fmt="parquet", seed=2,
                            mean_words=120)
    with pytest.warns(UserWarning, match="'web' (is within ±|has no known precision)"):
        info = prime(tmp_path, tokenizer_path, "web",
                     te=TokenEstimation(calibration_samples=cap, max_scanned=cap * 4))
    assert 0 < info["tokenized"] <= cap
    assert info["scanned"] <= cap * 4 + 512  # whole clusters of 512, the last one too


def test_long_documents_are_measured_from_a_few_of_them(tmp_path, tokenizer_path):
    """Clusters hold about 64 KB of text: a dataset of 40 KB documents is sampled a document or
    so at a time, not 32 (which tokenized 9M tokens of books to learn one figure)."""
    base = synthetic.documents(64, seed=1, mean_words=300)
    rng = np.random.default_rng(0)  # 300 documents of ~40 KB: 12 MB, too much to measure whole
    docs = [" ".join(base[j] for j in rng.integers(0, 64, 20)) for _ in range(300)]
    (tmp_path / "books").mkdir()
    with open(tmp_path / "books" / "a.jsonl", "w") as f:
        for d in docs:
            f.write(json.dumps({"text": d}) + "\n")
    info = prime(tmp_path, tokenizer_path, "books")
    assert cal.cluster_rows(40_000) == (1, 16)
    assert info["tokenized"] <= 64 and info["precision"] <= 0.01
    truth = true_tokens_per_record(Dataset.from_path("books", tmp_path / "books"),
                                   tokenizer_path)
    assert abs(info["tokens_per_record"] / truth - 1) <= max(info["precision"], 0.002)
