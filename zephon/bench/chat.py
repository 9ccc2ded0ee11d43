"""W5, supervised fine-tuning: conversations -> chat template + assistant mask -> pack 2049 ->
batches of 8 rows, in tokens/s.

Systems: Zephon (``tokenize_chat`` -> ``pack_flat(best_fit)`` -> ``batch``); TRL's data path
as ``SFTTrainer(assistant_only_loss=True, packing=True)`` prepares it (``datasets.map`` with
``apply_chat_template(return_assistant_tokens_mask=True)``, labels, ``trl.pack_dataset`` BFD,
TRL's padding-free collator), end to end since it prepares the whole dataset before its first
batch; a hand-written torch DataLoader (transformers' ``apply_chat_template`` in the workers, a
best-fit packer, labels); and the limit: the tokenizer's fastest batch API alone over the
conversations already rendered (rendering not timed).

The corpus: conversations built from the benchmark's documents (a system prompt half the time,
one to four exchanges), in JSONL shards, and the benchmark tokenizer with the ChatML tokens
added and a ChatML template with ``{% generation %}`` tags, all cached beside the corpus.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

import numpy as np

from zephon import synthetic
from zephon.bench.corpus import Corpus
from zephon.bench.meter import Meter
from zephon.bench.params import BenchParams

MAX_LENGTH = 2049
ROWS = 8
SHARDS = 4
TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message.role == 'assistant' %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- generation %}{{- message.content + '<|im_end|>' }}{%- endgeneration %}"
    "{{- '\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")


def chat_dir(corpus: Corpus) -> Path:
    return corpus.root / "chat"


def ensure_chat(corpus: Corpus) -> Path:
    """The conversations and the chat tokenizer directory (made once per corpus)."""
    root = chat_dir(corpus)
    if (root / "READY").exists():
        return root
    from tokenizers import AddedToken, Tokenizer

    tok = Tokenizer.from_file(corpus.tokenizer_path)
    tok.add_special_tokens([AddedToken(t, special=True) for t in ("<|im_start|>", "<|im_end|>")])
    (root / "tokenizer").mkdir(parents=True, exist_ok=True)
    tok.save(str(root / "tokenizer" / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|im_end|>",
              "pad_token": "<pad>", "bos_token": None, "chat_template": TEMPLATE,
              "model_max_length": 1 << 20}
    (root / "tokenizer" / "tokenizer_config.json").write_text(json.dumps(config))
    n = max(200, corpus.spec.docs // 4)
    rng = random.Random(corpus.spec.seed + 5)
    asks = synthetic.documents(n, seed=corpus.spec.seed + 6, mean_words=60)
    answers = synthetic.documents(n, seed=corpus.spec.seed + 7, mean_words=150)
    out = root / "conversations"
    out.mkdir(exist_ok=True)
    for s, idx in enumerate(np.array_split(np.arange(n), SHARDS)):
        lines = []
        for _ in idx.tolist():
            messages = [{"role": "system", "content": "You answer briefly."}] \
                if rng.random() < 0.5 else []
            for _ in range(rng.randint(1, 4)):
                messages.append({"role": "user", "content": asks[rng.randrange(n)]})
                messages.append({"role": "assistant", "content": answers[rng.randrange(n)]})
            lines.append(json.dumps({"messages": messages}) + "\n")
        (out / f"shard-{s:05d}.jsonl").write_text("".join(lines))
    (root / "READY").write_text("1")
    return root


def _conversations(corpus: Corpus) -> list[list[dict]]:
    root = ensure_chat(corpus)
    out = []
    for f in sorted((root / "conversations").glob("*.jsonl")):
        out.extend(json.loads(line)["messages"] for line in f.read_text().splitlines())
    return out


def build_ours(corpus: Corpus, workers: int, params: BenchParams, *, microbatch: int = ROWS,
               max_length: int = MAX_LENGTH, chunk_size: int | None = None, **_: Any) -> Any:
    from zephon import Pipeline
    from zephon.io import Dataset
    from zephon.work import StaticMixtureWorkSource

    root = ensure_chat(corpus)
    ds = Dataset.from_path("chat", str(root / "conversations"))
    ws = StaticMixtureWorkSource([ds], {"chat": 1.0}, seed=42, exhausted_policy="repeat",
                                 chunk_size=chunk_size or params.chunk_size)
    # a conversation is ~8 W2 documents of tokens: blocks of 128 keep bursts short enough for
    # the meter's window (1,024 made one block take longer than a whole run)
    return (Pipeline(ws).options(num_workers=workers, micro_batch_size=128)
            .tokenize_chat(str(root / "tokenizer"), max_length=max_length, oversized="truncate")
            .pack_flat(max_length=max_length, algorithm="best_fit", num_bins=64, pad_token_id=0)
            .batch(microbatch_size=microbatch))


def tokenizer_alone(corpus: Corpus, params: BenchParams) -> dict:
    """Tokens/s of ``encode_batch_fast`` over the rendered conversations (rendered first, not
    timed); ``offsets_tokens_per_s``: the same with ``encode_batch``, which also computes the
    character offsets that an assistant mask of a rendered conversation needs (alternated)."""
    from tokenizers import Tokenizer

    from zephon.chat.template import ChatTemplate

    template = ChatTemplate(TEMPLATE)
    texts = [template.render(m)[0] for m in _conversations(corpus)]
    tok = Tokenizer.from_file(str(chat_dir(corpus) / "tokenizer" / "tokenizer.json"))
    fast = getattr(tok, "encode_batch_fast", tok.encode_batch)
    tokens = records = 0
    spent = {fast: 0.0, tok.encode_batch: 0.0}
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 2 * params.seconds_for("W5"):
        i = records % len(texts)
        part = texts[i:i + 256]
        for encode in spent:
            t = time.perf_counter()
            n = sum(len(e) for e in encode(part, add_special_tokens=False))
            spent[encode] += time.perf_counter() - t
        tokens += n
        records += len(part)
    return {"records": records, "tokens": tokens, "seconds": spent[fast],
            "offsets_tokens_per_s": tokens / spent[tok.encode_batch]}


def _hf(corpus: Corpus) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(chat_dir(corpus) / "tokenizer"))


def run_trl(corpus: Corpus, workers: int, params: BenchParams) -> dict:
    """TRL's SFT data path over a share of the corpus once, end to end (it prepares everything
    before the first batch): tokens of the batches over the seconds from start to last."""
    import datasets
    from trl.data_utils import pack_dataset
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    files = sorted(str(f) for f in (ensure_chat(corpus) / "conversations").glob("*.jsonl"))
    tok = _hf(corpus)
    proc = workers or None
    t0 = time.perf_counter()
    datasets.disable_progress_bars()
    ds = datasets.load_dataset("json", data_files=files, split="train",
                               cache_dir=str(chat_dir(corpus) / "hf-cache"))
    # one pass over a share of the corpus: it prepares everything before its first batch
    ds = ds.select(range(min(len(ds), max(200, params.docs // 16))))

    def tokenize(example: dict) -> dict:
        out = tok.apply_chat_template(example["messages"], tokenize=True, return_dict=True,
                                      return_assistant_tokens_mask=True)
        return {"input_ids": out["input_ids"], "labels": [
            t if m else -100 for t, m in zip(out["input_ids"], out["assistant_masks"])]}

    ds = ds.map(tokenize, remove_columns=ds.column_names, num_proc=proc,
                load_from_cache_file=False)
    ds = pack_dataset(ds, MAX_LENGTH, strategy="bfd",
                      map_kwargs={"num_proc": proc, "load_from_cache_file": False})
    collate = DataCollatorForLanguageModeling(pad_token_id=tok.pad_token_id, padding_free=True)
    tokens = batches = 0
    first = None
    for i in range(0, len(ds), ROWS):
        batch = collate([ds[j] for j in range(i, min(i + ROWS, len(ds)))])
        tokens += int(batch["input_ids"].numel())
        batches += 1
        first = first or time.perf_counter() - t0
    secs = time.perf_counter() - t0
    return {"records": len(ds), "tokens": tokens, "padding": 0, "batches": batches,
            "seconds": secs, "first_batch_s": first, "note": "end to end, one pass"}


def _hand_dataset(files: list[str], tokenizer_dir: str) -> Any:
    import torch.utils.data as tud

    from zephon.bench.torch_baseline import BestFitPacker

    class Conversations(tud.IterableDataset):
        def __iter__(self):
            from transformers import AutoTokenizer

            info = tud.get_worker_info()
            mine = files if info is None else files[info.id::info.num_workers]
            tok = AutoTokenizer.from_pretrained(tokenizer_dir)
            packer, rows = BestFitPacker(MAX_LENGTH), []
            while True:  # the corpus repeats, as Zephon's does
                for f in mine:
                    for line in open(f, encoding="utf-8"):
                        out = tok.apply_chat_template(
                            json.loads(line)["messages"], tokenize=True, return_dict=True,
                            return_assistant_tokens_mask=True)
                        doc = list(zip(out["input_ids"], out["assistant_masks"]))
                        for pieces in packer.add(doc[:MAX_LENGTH]):
                            rows.append(_row(pieces))
                            if len(rows) == ROWS:
                                yield {k: np.stack([r[k] for r in rows]) for k in rows[0]}
                                rows = []

    return Conversations()


def _row(pieces: list) -> dict:
    """Input ids, labels (-100 off the assistant and across documents), positions, padding."""
    ids = np.zeros(MAX_LENGTH, np.int64)
    labels = np.full(MAX_LENGTH, -100, np.int64)
    pos = np.zeros(MAX_LENGTH, np.int64)
    at = 0
    for piece in pieces:
        arr = np.asarray(piece, dtype=np.int64).reshape(-1, 2)
        n = len(arr)
        ids[at:at + n] = arr[:, 0]
        labels[at:at + n - 1] = np.where(arr[1:, 1] == 1, arr[1:, 0], -100)
        pos[at:at + n] = np.arange(n)
        at += n
    return {"input_ids": ids, "labels": labels, "positions": pos,
            "padding": np.int64(MAX_LENGTH - at)}


def run_hand(corpus: Corpus, workers: int, params: BenchParams) -> dict:
    """A hand-written DataLoader: transformers + a best-fit packer + labels, in the workers."""
    import torch.utils.data as tud

    root = ensure_chat(corpus)
    files = sorted(str(f) for f in (root / "conversations").glob("*.jsonl"))
    meter = Meter("tokens", params.seconds_for("W5"))
    loader = tud.DataLoader(_hand_dataset(files, str(root / "tokenizer")), batch_size=None,
                            num_workers=workers)
    for b in loader:
        pad = int(b["padding"].sum())
        if meter.add(len(b["input_ids"]), b["input_ids"].numel() - pad, pad):
            break
    del loader
    return meter.result()
