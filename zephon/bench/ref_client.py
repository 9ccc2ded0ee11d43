"""Benchmark client run INSIDE the reference Zephon 0.2.0 virtualenv (python -I this_file CFG).

It imports the reference package, never ours, builds the workload's pipeline with the
reference's public API and prints one JSON line of measurements.
"""

import json
import sys
import time


def build(cfg):
    from zephon import Pipeline
    from zephon.io import Dataset
    from zephon.work import MixtureSpec, StaticMixtureWorkSource

    datasets = [Dataset.from_path(name, path) for name, path in cfg["datasets"]]
    ws = StaticMixtureWorkSource(datasets=datasets, mixture=MixtureSpec(cfg["mixture"]),
                                 seed=42, chunk_size=cfg.get("chunk_size", 16384))
    p = Pipeline(ws)
    w = cfg["workload"]
    if w == "W1":
        p = p.batch(microbatch_size=32)
    elif w in ("W2", "W3"):
        from tokenizers import Tokenizer
        from transformers import PreTrainedTokenizerFast  # noqa: F401  (reference needs HF API)

        tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_file(cfg["tokenizer"]),
                                      bos_token="<s>", eos_token="</s>", pad_token="<pad>")
        p = (p.tokenize(tokenizer=tok, field="text").shuffle(buffer_size=8192, seed=1)
             .pack_flat(max_length=2049, algorithm="best_fit", num_bins=64, pad_token_id=0)
             .batch(microbatch_size=8))
    elif w == "W4":
        p = (p.pack_flat(max_length=2049, algorithm="best_fit", num_bins=64, pad_token_id=0,
                         tokens_field="input_ids").batch(microbatch_size=8))
    return p


def count(batch):
    recs = batch.records
    n_tok = 0
    for r in recs:
        ids = r.payload.get("input_ids") if isinstance(r.payload, dict) else None
        if ids is not None:
            n_tok += len(ids) - int(r.meta.padding_length or 0)
    return len(recs), n_tok


def main():
    cfg = json.loads(sys.argv[1])
    t0 = time.perf_counter()
    p = build(cfg)
    it = iter(p)
    first = None
    records = tokens = batches = 0
    for b in it:
        if first is None:
            first = time.perf_counter() - t0
        r, t = count(b)
        records += r
        tokens += t
        batches += 1
        if records >= cfg["limit_records"]:
            break
    seconds = time.perf_counter() - t0
    out = {"records": records, "tokens": tokens, "batches": batches, "seconds": seconds,
           "first_batch_s": first}
    if cfg["workload"] == "W3":
        t1 = time.perf_counter()
        state = p.checkpoint()
        ck_s = time.perf_counter() - t1
        size = len(json.dumps(state, default=str))
        p2 = build(cfg)
        t2 = time.perf_counter()
        p2.restore(state)
        next(iter(p2))
        out.update({"checkpoint_bytes": size, "checkpoint_s": ck_s,
                    "restore_first_batch_s": time.perf_counter() - t2})
    print(json.dumps(out))


if __name__ == "__main__":
    main()
