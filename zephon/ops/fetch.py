"""fetch: pointers in, payload records out (the implicit first operator of every pipeline).

A dataset built with ``on_bad_record="skip"`` gives fewer records than pointers when some of
its records cannot be decoded (``zephon/io/formats/bad_records.py``): their pointers leave the block
here, counted under ``("fetch", "bad_record")``, like records a filter removes."""

from __future__ import annotations

import copy
from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from zephon import accounting
from zephon.block import Block, NotColumnar, take_table
from zephon.errors import ConfigError
from zephon.io import fetch_timing
from zephon.io.formats.bad_records import read_skipping
from zephon.ops.base import OpTraits, StatelessOp
from zephon.payload_values import concat_marks
from zephon.state.fingerprint import settings

DEFAULT_FETCH_BATCH = 1024


class FetchOp(StatelessOp):
    """Groups a block's pointers per shard, reads each group in one call, restores pointer order.

    Reads go through ``Dataset.read_table`` (columnar, one call per shard and block); formats or
    payloads that Arrow cannot hold come back as Python payloads through ``read_payloads``.
    """

    name = "fetch"

    def __init__(self, datasets: Sequence, parallelism: int | None = None,
                 max_batch: int | None = None, *, timing: bool = False,
                 restore_order: bool = True) -> None:
        if parallelism is not None and parallelism < 1:
            raise ConfigError(f"fetch parallelism must be >= 1, got {parallelism}")
        if max_batch is not None and max_batch < 1:
            raise ConfigError(f"fetch max_batch must be >= 1, got {max_batch}")
        self.datasets = list(datasets)
        self.parallelism = parallelism
        self.max_batch = max_batch or DEFAULT_FETCH_BATCH
        # False: records come out grouped by shard (their meta in step), not in pointer order:
        # the stage that worker processes run when the coordinator puts results in order
        # anyway (engine/process/ownership.py), which saves a copy of every record
        self.restore_order = restore_order
        self.timing = timing  # per-shard read timing (enable_observability("nodes"))

    def traits(self) -> OpTraits:
        return OpTraits(preserves_cursor_order=True, parallelism=self.parallelism or 1,
                        cost="decode", keeps_count=True)

    def fingerprint(self) -> dict:
        # ``restore_order`` and ``timing`` change how records travel and what is measured,
        # never the data
        return settings(self, ("parallelism", "max_batch"))

    def with_datasets(self, datasets: Sequence) -> FetchOp:
        """This fetch over other datasets (the same ones with other storage settings)."""
        return self._copy(datasets=list(datasets))

    def in_shard_order(self) -> FetchOp:
        """This fetch leaving records grouped by shard (for a stage whose results are put in
        pointer order after it)."""
        return self._copy(restore_order=False)

    def _copy(self, **changes) -> FetchOp:
        out = copy.copy(self)
        out.__dict__.update(changes)
        return out

    def process_block(self, block: Block) -> Block:
        n = len(block)
        if n == 0:
            return block.with_table(pa.table({}))
        rows = block.meta["sample_idx"]
        order, bounds = shard_runs(block)
        key_d, key_s = block.meta["dataset_id"][order], block.meta["shard_id"][order]
        parts: list = []
        keeps: list = []  # per part: None (every row read) or the mask of rows read
        columnar = True
        for a, b in zip(bounds[:-1], bounds[1:]):
            ds = self.datasets[int(key_d[a])]
            sel = rows[order[a:b]]
            part = None
            with fetch_timing.group(int(key_d[a]), int(key_s[a]), b - a, self.timing):
                if columnar:
                    try:
                        part, keep = _read(ds, int(key_s[a]), sel, True)
                    except NotColumnar:
                        columnar = False
                        parts = [self._as_payloads(p) for p in parts]
                if part is None:
                    part, keep = _read(ds, int(key_s[a]), sel, False)
            parts.append(part)
            keeps.append(keep)
        if any(k is not None for k in keeps):
            block, order, parts = _drop_skipped(block, order, bounds, keeps, parts)
            n = len(block)
            if n == 0:
                return block.with_table(pa.table({}))
        inverse = np.empty(n, dtype=np.int64)
        inverse[order] = np.arange(n, dtype=np.int64)
        if columnar:
            sparse = frozenset().union(*(_sparse_of(p) for p in parts))
            names = [tuple(p.column_names) for p in parts]
            if any(x != names[0] for x in names):
                sparse |= {c for x in names for c in x if any(c not in y for y in names)}
            try:
                table = concat_marks(parts, pa.concat_tables(parts, promote_options="permissive")) \
                    if len(parts) > 1 else parts[0]
            except (pa.ArrowInvalid, pa.ArrowTypeError):
                payloads = [r for p in parts for r in self._as_payloads(p)]
                return Block(block.meta, [payloads[i] for i in inverse.tolist()], block.lineage)
            in_order = np.array_equal(order, np.arange(n))
            if not self.restore_order and not in_order:
                meta = {k: v[order] for k, v in block.meta.items()}
                return Block(meta, table, block.lineage[order], frozenset(sparse))
            if len(parts) > 1 or not in_order:
                table = take_table(table, inverse)
            return Block(block.meta, table, block.lineage, frozenset(sparse))
        payloads = [r for p in parts for r in p]
        return Block(block.meta, [payloads[i] for i in inverse.tolist()], block.lineage)

    def read_ahead(self, block: Block) -> None:
        """A hint that ``block`` is fetched next: each shard it reads may start decoding the
        rows it needs (``Dataset.read_ahead``). Called by the inline engine one block ahead;
        never changes the data."""
        if not len(block):
            return
        rows = block.meta["sample_idx"]
        order, bounds = shard_runs(block)
        for a, b in zip(bounds[:-1], bounds[1:]):
            i = order[a]
            hint = getattr(self.datasets[int(block.meta["dataset_id"][i])], "read_ahead", None)
            if hint is not None:  # datasets of other kinds need not take hints
                hint(int(block.meta["shard_id"][i]), rows[order[a:b]])

    def decode_ahead(self, groups: list[tuple[int, int, int]]) -> None:
        """Row groups, (dataset, shard, row group) each, that this worker process owns and will
        read (``engine/process/ownership.py``): start decoding them now. A hint: nothing is raised
        here, the read that needs a row group reports what is wrong with it."""
        for d, s, g in groups:
            try:
                ahead = getattr(self.datasets[d], "decode_ahead", None)
                if ahead is not None:  # datasets of other kinds need not take hints
                    ahead(s, g)
            except Exception:  # e.g. the shard is gone: its read raises, naming it
                continue

    @staticmethod
    def _as_payloads(part) -> list:
        if isinstance(part, pa.Table):
            return Block({"sample_idx": np.zeros(part.num_rows, np.int64)}, part,
                         sparse=_sparse_of(part)).payload_list()
        return list(part)


def _read(ds, shard: int, sel: np.ndarray, columnar: bool) -> tuple:
    """(part, keep) of one shard's rows under the dataset's ``on_bad_record`` policy."""
    if getattr(ds, "on_bad_record", "raise") == "skip":
        return read_skipping(ds, shard, sel, columnar=columnar)
    return (ds.read_table(shard, sel) if columnar else ds.read_payloads(shard, sel)), None


def _drop_skipped(block: Block, order: np.ndarray, bounds: list[int], keeps: list,
                  parts: list) -> tuple[Block, np.ndarray, list]:
    """The block without the pointers whose records were skipped (counted here), the read
    order of the rest in its positions, and the parts that still hold rows."""
    kept = np.concatenate([np.ones(b - a, dtype=bool) if k is None else k
                           for k, a, b in zip(keeps, bounds[:-1], bounds[1:])])
    accounting.count("fetch", "bad_record", block.meta["dataset_id"][order[~kept]], None)
    survivors = np.sort(order[kept])
    return (block.take(survivors), np.searchsorted(survivors, order[kept]),
            [p for p in parts if len(p)] or parts[:1])


def shard_runs(block: Block) -> tuple[np.ndarray, list[int]]:
    """(order, bounds): the block's pointers stably sorted by (dataset, shard), and where each
    (dataset, shard) run starts and ends in that order."""
    ds_ids, shards = block.meta["dataset_id"], block.meta["shard_id"]
    order = np.lexsort((shards, ds_ids))
    cut = np.flatnonzero((np.diff(ds_ids[order]) != 0) | (np.diff(shards[order]) != 0)) + 1
    return order, np.concatenate(([0], cut, [len(block)])).astype(np.int64).tolist()


def _sparse_of(table: pa.Table) -> frozenset[str]:
    """Columns a reader marked as 'absent where null' (schema metadata key b'zephon.sparse')."""
    md = table.schema.metadata or {}
    raw = md.get(b"zephon.sparse")
    if not raw:
        return frozenset()
    return frozenset(x for x in raw.decode().split(",") if x)
