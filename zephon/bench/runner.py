"""``python -m zephon bench``: the workloads side by side, medians, ratios, JSON and a chart.

Every system runs the same workload on the same generated corpus in one invocation, repeated;
the table reports medians and each system's ratio to Zephon and to the machine's limit. Systems:
Zephon (this checkout), the reference Zephon 0.2.0 (its own virtualenv, made on first use), a
plain torch DataLoader doing the same work with the same number of workers, and the machine's
limits (pyarrow's raw read, the tokenizer alone, memcpy). Workloads: W1 fetch + batch(32);
W2 tokenize -> shuffle -> pack_flat(2049, best_fit) -> batch(8); W3 checkpoint and restore of
W2 (plus a sweep of checkpoint size over chunk sizes and training lengths); W4 pack + batch(8)
over pre-tokenized Parquet (plus the padding fraction of each packer); W5 supervised
fine-tuning: tokenize_chat (assistant-only loss) -> pack 2049 -> batch(8), against TRL's data
path, a hand-written DataLoader and the tokenizer alone (``zephon/bench/chat.py``); feed: W2's
pipeline feeding a simulated training step that holds its core T ms per batch, with default
options and fixed worker counts (``zephon/bench/feed.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import sys
import time
from pathlib import Path

from zephon.bench import reference, report, suite
from zephon.bench.corpus import CorpusSpec, ensure_corpus
from zephon.bench.params import preset, with_overrides


def _csv(s: str) -> list[str]:
    return [x.strip() for x in s.split(",") if x.strip()]


def parse_args(argv: list[str] | None):
    ap = argparse.ArgumentParser(prog="python -m zephon bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    size = ap.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true",
                      help="20k documents, 3 repeats, short runs (< 5 minutes on 2 cores)")
    size.add_argument("--tiny", action="store_true", help="a smoke test: seconds, not figures")
    ap.add_argument("--workloads", default=",".join([*suite.WORKLOADS, "feed"]),
                    help="comma-separated subset of %(default)s")
    ap.add_argument("--systems", default=",".join(suite.SYSTEMS),
                    help="comma-separated subset of %(default)s")
    ap.add_argument("--workers", default="0,2",
                    help="worker counts to sweep (0 = inline), e.g. 0,1,2,4 (default 0,2)")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--docs", type=int, default=None, help="documents in the corpus")
    ap.add_argument("--seconds", type=float, default=None,
                    help="steady-state seconds measured by one run (W1, W4)")
    ap.add_argument("--w2-seconds", type=float, default=None, help="the same for W2")
    ap.add_argument("--formats", default=None, help="W1's formats (default jsonl,parquet)")
    ap.add_argument("--feed-step-ms", default="20,70,200",
                    help="feed: the simulated training step's time on its core, ms")
    ap.add_argument("--feed-rows", type=int, default=8, help="feed: rows of 2,048 tokens a batch")
    ap.add_argument("--feed-workers", default=None,
                    help="feed: settings besides the default, e.g. 0,1 (default: --workers "
                    "and one worker per core but one)")
    ap.add_argument("--no-sweep", action="store_true", help="skip W3's checkpoint-size sweep")
    ap.add_argument("--no-install", action="store_true",
                    help="do not create the reference's virtualenv if it is missing")
    ap.add_argument("--out", default="bench-results", help="folder for bench.{json,md,png}")
    ap.add_argument("--corpus-dir", default=None, help="where corpora are cached "
                    "(default $ZEPHON_BENCH_DIR or ~/.cache/zephon/bench)")
    return ap.parse_args(argv)


def _meta(argv: list[str] | None, elapsed: float) -> dict:
    import numpy
    import pyarrow

    versions = {"python": platform.python_version(), "numpy": numpy.__version__,
                "pyarrow": pyarrow.__version__}
    for mod in ("tokenizers", "torch"):
        try:
            versions[mod] = __import__(mod).__version__
        except ImportError:
            versions[mod] = None
    args = sys.argv[1:] if argv is None else argv
    cmd = "python -m zephon bench " + " ".join(shlex.quote(a) for a in args if a != "bench")
    return {"time": time.strftime("%Y-%m-%d %H:%M"), "cpus": os.cpu_count(), **_commit(),
            "arrow_pool": pyarrow.default_memory_pool().backend_name,
            "platform": f"{platform.system()} {platform.machine()}",
            "load_avg": os.getloadavg() if hasattr(os, "getloadavg") else None,
            "versions": versions, "command": cmd.strip(), "elapsed_s": elapsed}


def _commit() -> dict:
    """The commit of this checkout that was measured, and whether ``zephon/`` differed from it
    (uncommitted changes); nothing outside a git checkout."""
    import subprocess

    root = Path(__file__).resolve().parents[2]

    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", "-C", str(root), *args], capture_output=True,
                                 text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return {}
    return {"commit": commit, "dirty": bool(git("status", "--porcelain", "--", "zephon"))}


def _same_allocator_for_all() -> None:
    """Zephon decodes on jemalloc (``zephon/arrow_memory.py``); give every system the same
    Arrow allocator: this process's pyarrow now, and the DataLoader workers and the reference's
    process through Arrow's own environment variable."""
    from zephon.arrow_memory import use_decode_pool

    backend = use_decode_pool()
    if backend:
        os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", backend)


def main(argv: list[str] | None = None) -> int:
    t_start = time.perf_counter()
    args = parse_args(argv)
    params = with_overrides(preset("quick" if args.quick else "tiny" if args.tiny else "full"),
                            repeats=args.repeats, docs=args.docs, seconds=args.seconds,
                            w2_seconds=args.w2_seconds,
                            formats=tuple(_csv(args.formats)) if args.formats else None)
    wl, systems = _csv(args.workloads), _csv(args.systems)
    _same_allocator_for_all()
    bad = sorted(set(wl) - {*suite.WORKLOADS, "feed"}) + sorted(set(systems) - set(suite.SYSTEMS))
    if bad:
        print(f"unknown workload/system: {bad}", file=sys.stderr)
        return 2
    workers = [int(w) for w in _csv(args.workers)]
    reference.INSTALL = not args.no_install
    spec = CorpusSpec(docs=params.docs, shards=params.shards)
    corpus = ensure_corpus(spec, Path(args.corpus_dir) if args.corpus_dir else None)
    print(f"corpus {corpus.root}; workers {workers}; {params.repeats} repeats", flush=True)

    def log(msg: str) -> None:
        print(msg, flush=True)

    from zephon.io.formats.row_group_cache import row_group_cache

    # the runs hold the process's row-group cache small (pipelines.RG_CACHE_BYTES); give an
    # in-process caller (the tests) its cache back as it was
    saved_limit = row_group_cache().limit_bytes
    try:
        results = suite.collect(corpus, params, workers, [w for w in wl if w != "feed"],
                                systems, log)
        payload: dict = {"params": params.as_dict(), "corpus": spec.__dict__,
                         "results": results}
        if "feed" in wl and "zephon" in systems:
            from zephon.bench import feed
            from zephon.engine.autotune import default_workers

            fixed = [int(w) for w in _csv(args.feed_workers or "")] or sorted(
                {*workers, default_workers()})
            log("feed: a training step holding its core T ms per batch ...")
            payload["feed"] = feed.collect(corpus, params, ["auto", *fixed],
                                           [float(t) for t in _csv(args.feed_step_ms)],
                                           args.feed_rows, log)
        if "W3" in wl and not args.no_sweep:
            log("W3 checkpoint sweep ...")
            payload["checkpoints"] = suite.checkpoint_sweeps(corpus, params, systems, log)
        if "W4" in wl:
            log("W4 padding ...")
            payload["padding"] = suite.padding_comparison(corpus, params, systems, log)
    finally:
        row_group_cache().clear()
        row_group_cache().limit_bytes = saved_limit
    payload["meta"] = _meta(argv, time.perf_counter() - t_start)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(json.dumps(payload, indent=1, default=str) + "\n")
    md = report.markdown(payload)
    (out / "bench.md").write_text(md)
    print("\n" + md)
    try:
        if results:  # the feed alone has no chart
            report.draw_chart(results, out / "bench.png")
    except ImportError:
        print("matplotlib is not installed: no chart", file=sys.stderr)
    print(f"wrote {out / 'bench.json'}, bench.md, bench.png in "
          f"{time.perf_counter() - t_start:.0f} s")
    return 0
