"""Benchmark client run INSIDE the reference Zephon 0.2.0 virtualenv: ``python -I this_file CFG``.

It imports the reference package, never ours (``-I`` keeps our checkout off ``sys.path``),
builds each workload's pipeline with the reference's public API, runs it ``repeats`` times in
this one process (so interpreter start-up is paid once) and prints one JSON line: a list of
runs, each either measurements or ``{"error": ...}``. Runs are timed by our ``meter.py``,
loaded by file path, so both Zephons are measured by the same code.
"""

from __future__ import annotations

import json
import pickle
import time
import traceback
from collections.abc import Callable
from typing import Any

MAX_LENGTH = 2049


def build(cfg: dict, *, chunk_size: int | None = None, max_length: int = MAX_LENGTH,
          shuffle: bool = False, algorithm: str = "best_fit", microbatch: int = 8) -> Any:
    from zephon import Pipeline
    from zephon.io import Dataset
    from zephon.work import MixtureSpec, StaticMixtureWorkSource

    datasets = [Dataset.from_path(name, path) for name, path in cfg["datasets"]]
    ws = StaticMixtureWorkSource(datasets=datasets, mixture=MixtureSpec(cfg["mixture"]), seed=42,
                                 chunk_size=chunk_size or cfg["chunk_size"],
                                 exhausted_policy="repeat")
    workers = cfg["workers"]
    p = Pipeline(ws)
    # inline for 0 workers; otherwise process runners with that many workers per stage
    if workers == 0:
        p = p.options(runner="inline")
    else:
        p = p.options(runner="process", max_workers=workers).fetch(parallelism=workers)
    par = workers or None
    w = cfg["workload"]
    if w == "W1":
        return p.batch(microbatch_size=32)
    if w in ("W2", "W3"):
        from tokenizers import Tokenizer
        from transformers import PreTrainedTokenizerFast

        tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_file(cfg["tokenizer"]),
                                      bos_token="<s>", eos_token="</s>", pad_token="<pad>")
        return (p.tokenize(tokenizer=tok, field="text", parallelism=par)
                .shuffle(buffer_size=cfg["shuffle_buffer"], seed=1)
                .pack_flat(max_length=max_length, algorithm=algorithm, num_bins=64,
                           pad_token_id=0)
                .batch(microbatch_size=8))
    if w == "W4":
        if shuffle:
            p = p.shuffle(buffer_size=cfg["shuffle_buffer"], seed=1)
        return (p.pack_flat(max_length=max_length, algorithm=algorithm, num_bins=64,
                            pad_token_id=0, tokens_field="input_ids")
                .batch(microbatch_size=microbatch))
    raise ValueError(w)


def counts(batch: Any) -> tuple[int, int, int]:
    """(rows, real tokens, padding tokens), record by record: the reference has no columns."""
    recs = batch.records
    tokens = padding = 0
    for r in recs:
        ids = r.payload.get("input_ids") if isinstance(r.payload, dict) else None
        if ids is not None:
            pad = max(int(r.meta.padding_length or 0), 0)
            tokens += len(ids) - pad
            padding += pad
    return len(recs), tokens, padding


def _meter() -> Any:
    """Our ``meter.py``, loaded by path: it needs only the standard library."""
    import importlib.util
    import os

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "meter.py")
    spec = importlib.util.spec_from_file_location("zephon_bench_meter", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def measure(cfg: dict) -> dict:
    """One measured run; with cfg["checkpoint"] it ends with W3's checkpoint and restore."""
    unit = "records" if cfg["workload"] == "W1" else "tokens"
    meter = _meter().Meter(unit, cfg["seconds"])
    p = build(cfg)
    it = iter(p)
    for b in it:
        if meter.add(*counts(b)):
            break
    out = meter.result()
    if cfg.get("checkpoint"):
        try:
            out["w3"] = {"batches": len(meter.times), "run_s": out["seconds"],
                         **checkpoint_now(p, it, lambda: build(cfg))}
        except Exception as e:  # keep the W2 figures of this run
            out["w3"] = _error(e)
    else:
        _close(p)
    return out


def _close(p: Any) -> None:
    close = getattr(p, "close", None)
    if close is not None:
        close()


def _size(state: Any) -> tuple[int, str]:
    try:
        return len(json.dumps(state)), "json"
    except (TypeError, ValueError):
        return len(pickle.dumps(state)), "pickle"


def _first_batch_s(make: Callable[[], Any], state: Any) -> float:
    t0 = time.perf_counter()
    p = make()
    if state is not None:
        p.restore(state)
    next(iter(p))
    secs = time.perf_counter() - t0
    _close(p)
    return secs


def checkpoint_now(p: Any, it: Any, make: Callable[[], Any]) -> dict:
    t1 = time.perf_counter()
    state = p.checkpoint()
    ckpt_s = time.perf_counter() - t1
    size, fmt = _size(state)
    next(it)  # as ours does (it compares this batch with the restored one)
    _close(p)
    cold = _first_batch_s(make, None)
    restore = _first_batch_s(make, state)
    return {"checkpoint_bytes": size, "checkpoint_format": fmt, "checkpoint_s": ckpt_s,
            "cold_first_batch_s": cold, "restore_first_batch_s": restore}


def checkpoint_after(make: Callable[[], Any], batches: int) -> dict:
    p = make()
    t0 = time.perf_counter()
    it = iter(p)
    for _ in range(batches):
        next(it)
    run_s = time.perf_counter() - t0
    return {"batches": batches, "run_s": run_s, **checkpoint_now(p, it, make)}


def _error(e: BaseException) -> dict:
    return {"error": f"{type(e).__name__}: {e}".splitlines()[0][:300],
            "traceback": traceback.format_exc()[-2000:]}


def packed(make: Callable[[], Any], batches: int) -> dict:
    """Tokens and padding in the first ``batches`` batches of ``make()``."""
    p = make()
    tokens = padding = 0
    for i, b in enumerate(p):
        _, t, pad = counts(b)
        tokens, padding = tokens + t, padding + pad
        if i + 1 == batches:
            break
    _close(p)
    return {"tokens": tokens, "padding": padding}


def main(argv: list[str]) -> None:
    cfg = json.loads(argv[1])
    runs = []
    if cfg.get("padding"):
        for algorithm in cfg["padding"]:
            try:
                runs.append({"algorithm": algorithm, **packed(
                    lambda a=algorithm: build(cfg, algorithm=a), cfg["batches"])})
            except Exception as e:
                runs.append({"algorithm": algorithm, **_error(e)})
    elif cfg.get("sweep"):
        for chunk, batches in cfg["sweep"]:
            try:
                runs.append({"chunk_size": chunk, **checkpoint_after(
                    lambda c=chunk: build(cfg, chunk_size=c, max_length=cfg["max_length"],
                                          microbatch=cfg["microbatch"], shuffle=True),
                    batches)})
            except Exception as e:  # the reference has bugs: record them, go on
                runs.append({"chunk_size": chunk, "batches": batches, **_error(e)})
    else:
        for _ in range(cfg["repeats"]):
            try:
                if cfg["workload"] == "W3":
                    run = checkpoint_after(lambda: build(cfg), cfg["w3_batches"])
                    runs.append({**run, "seconds": run["restore_first_batch_s"]})
                else:
                    runs.append(measure(cfg))
            except Exception as e:
                runs.append(_error(e))
                break  # the same error would repeat
    print(json.dumps(runs))


if __name__ == "__main__":
    import sys

    main(sys.argv)
