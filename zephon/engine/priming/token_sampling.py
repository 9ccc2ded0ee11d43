"""Measuring one dataset's tokens per record: reading calibration clusters through the
pipeline's own operators and tokenizing some of them (the statistics are in
``zephon/work/calibration.py``, the sources and the cache in ``priming.py``).
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from collections import deque

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from zephon.block import Block, ragged_column
from zephon.engine.lanes.lane import apply_ops
from zephon.work import calibration as cal
from zephon.work.token_estimation import mean_bytes_per_sample


def _seed(ds) -> int:
    """The calibration sample's seed: what the records are (format, shard names within the
    dataset, rows, bytes), not where they lie or when they were written, so that the same
    data copied elsewhere is sampled alike and gives the same stream."""
    ident = ds.identity() if ds.url is not None else ds.name
    if isinstance(ident, dict):
        ident = {k: v for k, v in ident.items() if k not in ("url", "versions")}
    text = json.dumps(ident, sort_keys=True, default=str)
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little")


def _n_shards(ds, te) -> int:
    """Heterogeneous shards (bytes per row that differ) are sampled more widely."""
    ids, counts, raw = np.asarray(ds.ids()), np.asarray(ds.counts()), ds.raw_bytes()
    n = te.calibration_shards_min
    if raw is not None and len(ids) > 1:
        per_row = np.asarray(raw, dtype=np.float64) / np.maximum(counts, 1)
        spread = per_row.std() / max(per_row.mean(), 1e-9)
        n = int(round(te.calibration_shards_min + spread * 4 *
                      (te.calibration_shards_max - te.calibration_shards_min)))
    return max(1, min(len(ids), te.calibration_shards_max, n))


def _pointer_block(d: int, clusters: list[cal.Cluster]) -> Block:
    shards = np.concatenate([np.full(c.rows, c.shard_id, np.int64) for c in clusters])
    rows = np.concatenate([np.arange(c.start, c.start + c.rows, dtype=np.int64)
                           for c in clusters])
    n = len(rows)
    meta = {"dataset_id": np.full(n, d, np.int64), "shard_id": shards, "sample_idx": rows,
            "lane_id": np.zeros(n, np.int64), "chunk_id": np.zeros(n, np.int64),
            "chunk_offset": np.arange(n, dtype=np.int64)}
    return Block(meta, None)


def _per_pointer(block: Block | None, n: int, values: np.ndarray | None) -> np.ndarray:
    """Values of the records an operator chain made of ``n`` pointers, summed per pointer (a
    split record's pieces add up; a dropped record counts zero, as it does when drawn)."""
    if block is None or values is None or not len(block):
        return np.zeros(n, np.float64)
    return np.bincount(block.meta["chunk_offset"], weights=values, minlength=n)[:n]


def _lengths(block: Block | None, field) -> np.ndarray | None:
    """UTF-8 bytes of the tokenized field per record (None: no text column to lean on);
    ``field`` may be the operator's own measure of them (tokenize_chat's ``text_bytes``)."""
    if block is None or not len(block):
        return np.zeros(0)
    if callable(field):
        return field(block)
    if field is None or not block.columnar or field not in block.payload.column_names:
        return None
    col = block.payload.column(field)
    if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
        return None
    return pc.fill_null(pc.binary_length(col), 0).to_numpy(zero_copy_only=False).astype(np.float64)


def _tokens(block: Block | None, te) -> np.ndarray | None:
    if block is None or not len(block):
        return None
    if te.measure is not None:
        return np.array([float(te.measure(p)) for p in block.payload_list()], np.float64)
    offsets, _ = ragged_column(block.payload, "input_ids")
    tokens = np.diff(offsets).astype(np.float64)
    pads = block.meta.get("padding_length")  # tokenize(padding=...): pads are not text
    return tokens - pads if pads is not None else tokens


def measure(ds, d: int, fetch, pre: list, tok, te, show: bool = False) -> cal.Estimate:
    """Rounds of cluster samples until the estimate is within ``te.precision``.

    Three designs (``zephon/work/calibration.py``): with a ``measure`` callable, the plain mean
    of measured records; where the reader knows every record's stored size (JSONL: its line),
    tokens per stored byte times the catalog's mean bytes per record; otherwise the lengths of
    many scanned records (phase A) and the tokens of a few of them (phase B)."""
    seed, taken = _seed(ds), set()
    ids, counts, n_shards = ds.ids(), ds.counts(), _n_shards(ds, te)
    field = (getattr(tok, "text_bytes", None) or getattr(tok, "field", None)) \
        if te.measure is None else None
    # JSONL only: a record's stored size (its line) adds up exactly to the catalog's decoded
    # bytes, so their mean over the whole dataset is known; other formats with record sizes
    # (tar members) leave headers and padding out of them, which would bias the ratio
    mean_bytes = mean_bytes_per_sample(ds)
    known = mean_bytes if field is not None and set(ds.formats()) == {"jsonl"} else None
    sample = cal.Sample(population=int(ds.total()), x_mean=known)
    two_phase = field is not None and known is None
    rows_b, rows_a = cal.cluster_rows(mean_bytes)
    scan_rows = rows_a if two_phase else rows_b
    # scanned clusters with sub-clusters not tokenized yet: [lengths, records, sub-cluster starts]
    pending: deque[list] = deque()
    order = np.random.default_rng(seed)  # which sub-clusters of a scanned cluster, in turn
    add_a = min(cal.FIRST_CLUSTERS * scan_rows, te.max_scanned)  # the caps hold from round one
    add_b = min(cal.FIRST_CLUSTERS * rows_b, te.calibration_samples)
    # no more records than a sample may tokenize, and little text: all of them, and the figure
    # is exact (a few long documents can hide from a sample of a small dataset, and its stated
    # precision with them)
    whole = (sample.population <= te.calibration_samples
             and (mean_bytes or 0) * sample.population <= cal.WHOLE_BYTES)
    if whole:
        n_shards = len(ids)
    est = None
    for _ in range(cal.MAX_ROUNDS):
        before = (len(sample.x_a), len(sample.t_b))
        need_b = sys.maxsize if whole else -(-add_b // rows_b)  # sub-clusters
        budget = sys.maxsize if whole else add_b  # records
        if whole:
            want = cal.free_slots(ids, counts, n_shards, taken, scan_rows)  # every record
        elif two_phase:  # enough scanned clusters for phase A, and for phase B to draw from
            short = need_b - sum(len(p[2]) for p in pending)
            want = max(-(-add_a // scan_rows), -(-short // (scan_rows // rows_b)))
        else:
            want = need_b - len(pending)
        if want > 0 and cal.free_slots(ids, counts, n_shards, taken, scan_rows) < want:
            # the shards sampled so far are used up: spread over more of the catalog
            n_shards = min(len(ids), max(2 * n_shards, n_shards + 1))
        for x, part in _scan(ds, d, fetch, pre, field, known, ids, counts, n_shards,
                             max(want, 0), seed, taken, scan_rows):
            if two_phase:
                sample.x_a.append(x)
            subs = np.arange(0, len(x), rows_b)
            pending.append([x, part, list(order.permutation(subs)) if two_phase else [0]])
        for x, part in _take_for_tokens(pending, budget, rows_b):
            tokened = part
            if tok is not None and part is not None and te.measure is None:
                tokened = apply_ops([tok], part, count=False)
            sample.t_b.append(_per_pointer(tokened, len(x), _tokens(tokened, te)))
            sample.x_b.append(x)
        if not sample.t_b or (len(sample.x_a), len(sample.t_b)) == before:
            break  # nothing left to read or tokenize: the estimate stands as it is
        est = cal.estimate(sample, te.confidence, with_lengths=field is not None)
        if show:
            print(f"\rzephon: estimating tokens per record of {ds.name!r}: "
                  f"{est.n_b} tokenized, {est.n_a} scanned, ±{est.rel_half_width:.1%}",
                  end="", file=sys.stderr, flush=True)
        add_a, add_b = cal.next_round(est, te.precision, te.confidence, sample.n_a, sample.n_b,
                                      te.max_scanned, te.calibration_samples)
        if not two_phase:
            add_a = 0
        if add_a <= 0 and add_b <= 0:
            break
    if show:
        print(file=sys.stderr)
    return est if est is not None else cal.Estimate(0.0, math.inf, 0, 0, math.inf, math.inf)


def _scan(ds, d, fetch, pre, field, known, ids, counts, n_shards, n_clusters, seed, taken, rows):
    """Read ``n_clusters`` new clusters through fetch and the operators before tokenize:
    per cluster, the lengths of its records (stored bytes where ``known``, else the text's
    UTF-8 bytes; zeros without a field) and its records."""
    clusters = cal.plan_clusters(ids, counts, n_shards, n_clusters, seed, taken, rows)
    if not clusters:
        return []
    ptrs = _pointer_block(d, clusters)
    block = apply_ops([fetch, *pre], ptrs, count=False)
    if field is None:
        x = np.zeros(len(ptrs))
    elif known is not None:
        x = np.concatenate([ds.record_bytes(c.shard_id, np.arange(c.start, c.start + c.rows))
                            for c in clusters]).astype(np.float64)
    else:
        x = _per_pointer(block, len(ptrs), _lengths(block, field))
    bounds = np.cumsum([0] + [c.rows for c in clusters])
    return [(x[lo:hi], _rows(block, lo, hi)) for lo, hi in zip(bounds[:-1], bounds[1:])]


def _take_for_tokens(pending: deque, budget: int, rows: int = cal.CLUSTER_ROWS) -> list:
    """Sub-clusters of at most ``rows`` records, ``budget`` records in all (the last
    one cut to fit: ``calibration_samples`` is a promise), round-robin over the scanned
    clusters (one from each in turn, at seeded positions), so that the tokenized phase is not
    held to one sub-cluster per scanned cluster: a dataset is tokenized as far as the
    precision asks."""
    out = []
    while pending and budget > 0:
        entry = pending.popleft()
        x, part, subs = entry
        lo = int(subs.pop())
        hi = min(lo + rows, len(x), lo + budget)
        budget -= hi - lo
        out.append((x[lo:hi], _rows(part, lo, hi)))
        if subs:
            pending.append(entry)
    return out


def _rows(block: Block | None, lo: int, hi: int) -> Block | None:
    """The records made of pointers ``lo:hi`` of a calibration block, renumbered from 0."""
    if block is None or not len(block):
        return None
    off = block.meta["chunk_offset"]
    keep = np.flatnonzero((off >= lo) & (off < hi))
    if not len(keep):
        return None
    part = block.take(keep)
    part.meta["chunk_offset"] = part.meta["chunk_offset"] - lo
    return part
