"""What a running pipeline is doing: ``metrics_snapshot()`` and the live progress display.

Operator counters come from every process of the pipeline (see ``metrics``); delivery counts
(records and tokens per dataset against the target mixture) are taken here, in the training
process, from the batches actually handed to the caller, and feed the realised-mixture check
(``mixture_check``).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from zephon import accounting
from zephon.block import TOKEN_FIELDS, Block, RowsOf, ragged_column
from zephon.engine.observe import metrics
from zephon.io import fetch_timing


def _tokens_per_dataset(block: Block, n_datasets: int, field: str | None) -> np.ndarray | None:
    """Tokens of ``block`` per dataset: from ``comp_tokens`` (packed rows), else from the
    ragged token column ``field`` (None: the payload has none)."""
    comp = block.meta.get("comp_tokens")
    if comp is not None:
        out = np.zeros(n_datasets, dtype=np.int64)
        k = min(n_datasets, comp.shape[1])
        out[:k] = comp[:, :k].sum(axis=0)
        return out
    if field is None:
        return None
    offsets, _ = ragged_column(block.payload, field)
    return np.bincount(block.meta["dataset_id"], weights=np.diff(offsets),
                       minlength=n_datasets).astype(np.int64)[:n_datasets]


def _token_field_of(block: Block) -> str | None:
    if not block.columnar:
        return None
    names = block.payload.schema.names
    return next((f for f in TOKEN_FIELDS if f in names), None)


class Tally:
    """Per batch of a run: records (k x datasets) and tokens (k x datasets, None when the
    payload has no token column) per dataset, and records per batch."""

    __slots__ = ("records", "tokens", "rows")

    def __init__(self, records: np.ndarray, tokens: np.ndarray | None, rows: np.ndarray) -> None:
        self.records = records
        self.tokens = tokens
        self.rows = rows


def count_run(parent: Block, start: int, sizes: Sequence[int]) -> Tally:
    """The tally of consecutive batches of ``sizes`` rows cut from ``parent`` at ``start``."""
    sizes = np.asarray(sizes, dtype=np.int64)
    k = len(sizes)
    stop = start + int(sizes.sum())
    cuts = np.zeros(k + 1, dtype=np.int64)
    np.cumsum(sizes, out=cuts[1:])
    meta = parent.meta
    comp = meta.get("comp_samples")
    if comp is not None:  # packed rows: what each row holds of each dataset
        records = np.add.reduceat(comp[start:stop], cuts[:-1], axis=0) if stop > start \
            else np.zeros((k, comp.shape[1]), dtype=np.int64)
        records[sizes == 0] = 0  # reduceat gives an empty batch its next row
        ctok = meta.get("comp_tokens")
        tokens = None
        if ctok is not None:
            tokens = np.add.reduceat(ctok[start:stop], cuts[:-1], axis=0) if stop > start \
                else np.zeros((k, ctok.shape[1]), dtype=np.int64)
            tokens[sizes == 0] = 0
        return Tally(records.astype(np.int64), tokens, sizes)
    ds = meta["dataset_id"][start:stop]
    n = int(ds.max()) + 1 if len(ds) else 1
    which = np.repeat(np.arange(k, dtype=np.int64), sizes)
    key = which * n + ds
    records = np.bincount(key, minlength=k * n).reshape(k, n)
    tokens = None
    field = _token_field_of(parent)
    if field is not None:
        offsets, _ = ragged_column(parent.payload, field)
        lengths = np.diff(offsets[start:stop + 1])
        tokens = np.bincount(key, weights=lengths, minlength=k * n).reshape(k, n).astype(np.int64)
    return Tally(records, tokens, sizes)


class Observer:
    """Counts deliveries, aggregates operator counters, renders snapshots and progress."""

    def __init__(self, names: list[str], target: dict[str, float], progress: bool) -> None:
        self.names = names
        self.target = target
        self.registry = metrics.Registry()
        # counters are per process: start from zero (pipelines iterated at the same time in
        # one process share them, so their operator figures add up)
        metrics.LOCAL.take_delta()
        self.ledger = accounting.Ledger(names)
        fetch_timing.LOCAL.take_delta()  # like the operator counters: from zero
        self.fetch_timing = fetch_timing.Counters()
        self._records = np.zeros(len(names), dtype=np.int64)
        self._tokens = np.zeros(len(names), dtype=np.int64)
        # the run of batches being delivered, cut from one block (``RowsOf``): that block, the
        # run's first row, the row after its last batch, its batches' sizes; counted at once
        # when the run ends (``_add_run``)
        self._parent: Block | None = None
        self._start = self._at = 0
        self._sizes: list[int] = []
        self.units = 0
        self.start = time.perf_counter()
        self.consumer_wait_ns = 0
        self.held: dict[str, int] = {}
        self.progress = _Progress(self) if progress else None
        self._schema = None  # the last payload schema seen, and its token column (or None)
        self._field: str | None = None
        self.mixture: Any = None  # a MixtureCheck, set by the session (None: no check)

    @property
    def records(self) -> np.ndarray:
        """Records delivered per dataset."""
        self._add_run()
        return self._records

    @property
    def tokens(self) -> np.ndarray:
        """Tokens delivered per dataset."""
        self._add_run()
        return self._tokens

    def delivered(self, unit: Any, wait_ns: int) -> None:
        """Count a unit handed to the caller. It runs once per batch in the training loop.
        Batches mostly come as runs cut from one block (``RowsOf``: a frame of the process
        engine, one push of the batch operator): such a batch only extends the run, which is
        counted in one ``bincount`` when it ends (``count_run``). Others cost a few numpy calls
        each (the token column is looked up once per schema, a single dataset needs no
        per-dataset count)."""
        self.consumer_wait_ns += wait_ns
        self.units += 1
        if self.progress is not None:
            self.progress.tick()
        block = getattr(unit, "_block", None)
        if type(block) is RowsOf:
            parent, start = block.origin
            if parent is not self._parent or start != self._at:
                self._add_run()
                self._parent, self._start = parent, start
            self._sizes.append(block._stop - start)
            self._at = block._stop
            return
        self._add_run()  # what came before is counted first: the mixture check sees the order
        block = getattr(unit, "block", None)
        if block is not None:
            n = len(self.names)
            comp = block.meta.get("comp_samples")
            n_recs = None  # their sum, when known without a numpy sum
            if comp is not None:
                k = min(n, comp.shape[1])
                recs = np.zeros(n, dtype=np.int64)
                recs[:k] = comp[:, :k].sum(axis=0)
            elif n == 1:
                recs = np.array([len(block)], dtype=np.int64)
            else:
                n_recs = len(block)
                recs = np.bincount(block.meta["dataset_id"], minlength=n)[:n]
            self._records += recs
            t = _tokens_per_dataset(block, n, self._token_field(block))
            if t is not None:
                self._tokens += t
            if self.mixture is not None:
                self.mixture.add(recs, t, n_recs)
        elif hasattr(unit, "meta"):
            d = unit.meta.sample_id[0]
            self._records[d] += 1
            if self.mixture is not None:
                self.mixture.add(np.bincount([d], minlength=len(self.names)), None)

    def _add_run(self) -> None:
        """Count the run of batches delivered since the last call."""
        parent, sizes = self._parent, self._sizes
        if parent is None:
            return
        self._parent, self._sizes = None, []
        run = count_run(parent, self._start, sizes)
        n = len(self.names)
        recs = _fit(run.records, n)
        toks = _fit(run.tokens, n) if run.tokens is not None else None
        self._records += recs.sum(axis=0)
        if toks is not None:
            self._tokens += toks.sum(axis=0)
        if self.mixture is not None:
            self.mixture.add_rows(recs, toks, run.rows)

    def _token_field(self, block: Block) -> str | None:
        if not block.columnar:
            return None
        schema = block.payload.schema
        if self._schema is None or not schema.equals(self._schema):
            names = schema.names
            self._schema = schema
            self._field = next((f for f in TOKEN_FIELDS if f in names), None)
        return self._field

    def merge(self, delta: dict) -> None:
        """Counters shipped from worker / coordinator processes."""
        self.registry.merge(delta)
        if "held" in delta:  # the coordinator's buffers, as of its last frame
            self.held = delta["held"]
        self.ledger.merge(accounting.LOCAL.take_delta())
        self.fetch_timing.merge(fetch_timing.LOCAL.take_delta())

    def merge_local(self) -> None:
        """Counters of this process (the inline engine's operators, the serial stage)."""
        self.merge(metrics.LOCAL.take_delta())

    def snapshot(self, extra: dict | None = None) -> dict[str, Any]:
        self.merge_local()
        elapsed = max(time.perf_counter() - self.start, 1e-9)
        ops = {}
        for name, s in self.registry.ops.items():
            ops[name] = {"records_in": s.records_in, "records_out": s.records_out,
                         "bytes_in": s.bytes_in, "bytes_out": s.bytes_out,
                         "busy_s": s.busy_ns / 1e9, "busy_fraction": s.busy_ns / 1e9 / elapsed,
                         "calls": s.calls, "held": self.held.get(name, 0)}
        tot_r, tot_t = int(self.records.sum()), int(self.tokens.sum())
        datasets = {n: {"records": int(self.records[i]), "tokens": int(self.tokens[i]),
                        "record_share": self.records[i] / tot_r if tot_r else 0.0,
                        "token_share": self.tokens[i] / tot_t if tot_t else 0.0,
                        "target": self.target.get(n)} for i, n in enumerate(self.names)}
        snap = {"elapsed_s": elapsed, "units_delivered": self.units,
                "records_delivered": tot_r, "tokens_delivered": tot_t,
                "records_per_s": tot_r / elapsed, "tokens_per_s": tot_t / elapsed,
                "operators": ops, "datasets": datasets, "losses": self.ledger.snapshot(),
                "serial_wait_s": self.registry.wait_ns / 1e9,
                "consumer_wait_s": self.consumer_wait_ns / 1e9,
                "bottleneck": bottleneck(ops), "rss_bytes": tree_rss(),
                "shm_bytes": shm_bytes()}
        if extra:
            snap.update(extra)
        return snap


def _fit(rows: np.ndarray, n: int) -> np.ndarray:
    """``rows`` (k x m) as k x n: cut, or padded with zeros."""
    if rows.shape[1] == n:
        return rows
    out = np.zeros((rows.shape[0], n), dtype=np.int64)
    k = min(n, rows.shape[1])
    out[:, :k] = rows[:, :k]
    return out


def bottleneck(ops: dict[str, dict]) -> str | None:
    if not ops:
        return None
    name, s = max(ops.items(), key=lambda kv: kv[1]["busy_fraction"])
    return name if s["busy_fraction"] > 0 else None


def tree_rss() -> int:
    try:
        import psutil

        me = psutil.Process()
        procs = [me, *me.children(recursive=True)]
        total = 0
        for p in procs:
            try:
                total += p.memory_info().rss
            except psutil.Error:
                pass
        return total
    except Exception:  # psutil missing or the process table is unreadable
        return 0


def shm_bytes() -> int:
    prefix = f"zephon_{os.getpid()}_"
    total = 0
    try:
        for n in os.listdir("/dev/shm"):
            if n.startswith(prefix):
                try:
                    total += os.stat(os.path.join("/dev/shm", n)).st_size
                except OSError:
                    pass
    except OSError:
        return 0
    return total


class _Progress:
    """A one-line live display (tqdm when installed), refreshed at most twice a second."""

    def __init__(self, obs: Observer) -> None:
        self.obs = obs
        self.last = 0.0
        try:
            from tqdm import tqdm

            self.bar = tqdm(unit="batch", dynamic_ncols=True, file=sys.stderr)
        except ImportError:
            self.bar = None

    def tick(self) -> None:
        now = time.perf_counter()
        if self.bar is not None:
            self.bar.update(1)
        if now - self.last < 0.5:
            return
        self.last = now
        text = self.line()
        if self.bar is not None:
            self.bar.set_postfix_str(text, refresh=True)
        else:
            print(f"\r{text}", end="", file=sys.stderr, flush=True)

    def line(self) -> str:
        snap = self.obs.snapshot()
        b = snap["bottleneck"]
        hint = ""
        if b is not None:
            frac = snap["operators"][b]["busy_fraction"]
            hint = f" | {b} is busy {frac:.0%} of the time" + (": add workers" if frac > 0.8 else "")
        return (f"{snap['records_per_s']:,.0f} rec/s {snap['tokens_per_s']:,.0f} tok/s{hint}")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        else:
            print(file=sys.stderr)
