"""Benchmark corpora: two datasets (code 25%, web 75%) in JSONL and Parquet, ~2 KB documents
with log-normal lengths, and a BPE tokenizer trained on them. Cached by their parameters."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from zephon import synthetic


@dataclass(frozen=True)
class CorpusSpec:
    docs: int = 100_000
    shards: int = 20
    mean_words: float = 330.0  # ~2 KB of text per document
    vocab_size: int = 4096
    seed: int = 0

    @property
    def key(self) -> str:
        return f"d{self.docs}-s{self.shards}-w{int(self.mean_words)}-v{self.vocab_size}-r{self.seed}"


@dataclass
class Corpus:
    root: Path
    spec: CorpusSpec

    def dataset_dir(self, name: str, fmt: str) -> str:
        return str(self.root / fmt / name)

    @property
    def tokenizer_path(self) -> str:
        return str(self.root / "tokenizer.json")

    def datasets(self, fmt: str) -> list[tuple[str, str]]:
        return [("code", self.dataset_dir("code", fmt)), ("web", self.dataset_dir("web", fmt))]

    mixture = {"code": 0.25, "web": 0.75}


def default_root() -> Path:
    base = os.environ.get("ZEPHON_BENCH_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "zephon", "bench")
    return Path(base)


def ensure_corpus(spec: CorpusSpec, root: Path | None = None, log=print) -> Corpus:
    root = (root or default_root()) / spec.key
    done = root / "READY.json"
    if done.exists():
        return Corpus(root, spec)
    log(f"generating benchmark corpus in {root} ...")
    code_n = spec.docs // 4
    parts = {"code": code_n, "web": spec.docs - code_n}
    for i, (name, n) in enumerate(parts.items()):
        shards = max(1, spec.shards * n // spec.docs)
        for fmt in ("jsonl", "parquet"):
            synthetic.write_dataset(root / fmt, name, n, n_shards=shards, fmt=fmt,
                                    seed=spec.seed + i, mean_words=spec.mean_words)
    train = synthetic.documents(3000, seed=spec.seed + 99, mean_words=spec.mean_words)
    synthetic.train_tokenizer(train, spec.vocab_size, root / "tokenizer.json")
    done.write_text(json.dumps(asdict(spec)))
    return Corpus(root, spec)
