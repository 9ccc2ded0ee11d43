"""Row-group ownership: which worker process fetches which pointers of a micro-batch.

Parquet decodes a whole row group at a time. A micro-batch of an interleaved mixture reads a few
hundred rows from the current row group of each dataset, and the next micro-batch reads on in the
same row groups; handed whole to alternating workers, every row group was decoded in every
worker (W1 Parquet, 2 workers: 7.4 µs of worker CPU per delivered row, against 3.9 for one
dataset read in order). A large row group spans many micro-batches, and every worker that got
one of them decoded it whole (one dataset in 5000-row groups, 2 workers: 0.38-0.44 of pyarrow's
read, against 0.68-0.91 inline). So each row group gets one owner, and the coordinator cuts a
micro-batch into one part per owner: a worker decodes only its own row groups, once, and the
parts come back together in pointer order (``merge``) before the serial stage sees them.

Owners are given out as row groups are first seen in the pointer stream, each to the worker
that owns the fewest rows so far: consecutive row groups of a shard read in order alternate, and
so do the first row groups of the shards a lane moves to. The coordinator looks ahead in the
pointer stream (``LaneScheduler.seen``) and tells each owner of a new row group at once
(``claim``), so that the worker decodes it on its read-ahead thread while the current one is
still being served: without that, a worker whose next row group lay beyond the issue window sat
idle while the other served the many micro-batches of a large one.

It applies when (``for_plan``):

- there are several worker processes (the threads runner shares one row-group cache already);
- every worker-stage operator works record by record: it keeps record order and does not care
  how records are grouped into calls (``OpTraits``; ``validate()`` holds user operators to it),
  so a part gives the same records as the whole would;
- per shard, the file is local Parquet (row groups read from its footer; a remote shard once
  it is in the node cache, looked up again every ``ASK_AGAIN`` blocks until then: learning a
  remote footer would cost a request).

Pointers without an owner (JSONL, memory, remote shards) join the smallest part. A micro-batch
all of whose pointers have one owner is not cut at all, only sent to that owner. Datasets with
different columns stop the cutting (``same_columns``): their parts would join the columns in
another order than the whole micro-batch lists them. Owners only decide where records are read;
the stream is the same whoever reads them.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from zephon.block import Block
from zephon.ops.fetch import FetchOp, shard_runs

# a shard whose row groups are unknown (remote, not in the node cache yet) is looked up again
# every this many blocks that read it: once a worker has downloaded it, its row groups get owners
ASK_AGAIN = 8
# row groups whose owner is remembered; past that the least recently seen are forgotten (one
# seen again gets an owner anew, which may cost its decode in a second worker)
TRACKED_GROUPS = 1 << 16
CLAIMED_BLOCKS = 1024  # blocks seen ahead of their sending whose owners are kept for it


class Ownership:
    def __init__(self, datasets: Sequence, workers: int) -> None:
        self.datasets = list(datasets)
        self.workers = int(workers)
        self._starts: dict[tuple[int, int], np.ndarray | None] = {}  # (dataset, shard) -> rows
        self._asked: dict[tuple[int, int], int] = {}  # blocks that met a shard of unknown layout
        self._owner: OrderedDict[tuple[int, int, int], int] = OrderedDict()  # (d, s, group)
        self._load = np.zeros(self.workers, dtype=np.int64)  # rows owned so far, per worker
        # whether the workers may return the parts of a split block in shard order
        # (``FetchOp.restore_order``): ``merge`` sorts them, so only operators that see each
        # record alone may run there
        self.any_order = False
        # set once parts came back with different columns (``same_columns``): split no more
        self.whole_only = False
        # owners computed when a block was first seen (``claim``), for its ``split`` when it
        # is sent: {id(block): (block, owners)}, the blocks seen and not sent yet
        self._claimed: OrderedDict[int, tuple[Block, np.ndarray]] = OrderedDict()

    @staticmethod
    def why_not(worker_ops: Sequence, workers: int) -> str | None:
        """Why row groups get no owners with these worker-stage operators (None: they do)."""
        if workers < 2:
            return "fewer than 2 worker processes"
        if not worker_ops or not hasattr(worker_ops[0], "datasets"):
            return "no fetch in the worker stage"
        for op in worker_ops:
            traits = op.traits()
            if not traits.preserves_cursor_order or traits.batch_shape_sensitive:
                return f"{op.op_name} needs its micro-batches whole"
        return None

    @classmethod
    def for_plan(cls, lane_plan, workers: int) -> Ownership | None:
        """The plan's ownership, or None where it does not apply."""
        ops = lane_plan.plan.worker_ops
        if cls.why_not(ops, workers) is not None:
            return None
        if not any(_has_row_groups(ds) for ds in ops[0].datasets):
            return None  # JSONL and the like: nothing to own, only pointers to sort per block
        own = cls(ops[0].datasets, workers)
        own.any_order = isinstance(ops[0], FetchOp) and all(
            op.traits().record_by_record for op in ops[1:])
        return own

    def _row_groups(self, d: int, s: int) -> np.ndarray | None:
        key = (d, s)
        if key in self._starts:
            return self._starts[key]
        asked = self._asked[key] = self._asked.get(key, 0) + 1
        if asked % ASK_AGAIN != 1:  # unknown so far (a remote shard not downloaded yet)
            return None
        starts = None
        if 0 <= d < len(self.datasets):
            starts = getattr(self.datasets[d], "row_group_starts", lambda _: None)(s)
        if starts is None:  # not known here yet: asked again later
            return None
        if len(starts) < 2:  # no row groups at all
            starts = None
        self._starts[key] = starts
        return starts

    def _owners(self, block: Block, new: dict[int, list] | None) -> np.ndarray:
        """Each pointer's owner (-1: none); row groups seen for the first time get one now,
        and are listed in ``new`` under it."""
        m = block.meta
        owner = np.full(len(block), -1, dtype=np.int64)
        order, bounds = shard_runs(block)
        for a, b in zip(bounds[:-1], bounds[1:]):
            idx = order[a:b]
            d, s = int(m["dataset_id"][idx[0]]), int(m["shard_id"][idx[0]])
            starts = self._row_groups(d, s)
            if starts is None:
                continue
            rows = m["sample_idx"][idx]
            if int(rows.max()) >= int(starts[-1]):
                # past the file's rows (a shard that changed since discovery): no owners, so
                # the read reports it, naming the shard, as every runner does
                continue
            group = np.searchsorted(starts, rows, side="right") - 1
            groups, inverse = np.unique(group, return_inverse=True)
            mine = np.empty(len(groups), dtype=np.int64)
            for i, g in enumerate(groups.tolist()):
                mine[i] = self._owner_of(d, s, g, starts, new)
            owner[idx] = mine[inverse]
        return owner

    def _owner_of(self, d: int, s: int, g: int, starts: np.ndarray, new) -> int:
        key = (d, s, g)
        w = self._owner.get(key)
        if w is not None:
            self._owner.move_to_end(key)
            return w
        w = int(np.argmin(self._load))  # fewest rows so far; the lowest index on ties
        self._load[w] += int(starts[g + 1] - starts[g])
        self._owner[key] = w
        if len(self._owner) > TRACKED_GROUPS:
            self._owner.popitem(last=False)
        if new is not None:
            new.setdefault(w, []).append(key)
        return w

    def owners(self, block: Block) -> np.ndarray:
        """Each pointer's owner (a worker index), or -1 for none."""
        return self._owners(block, None)

    def claim(self, block: Block) -> dict[int, list[tuple[int, int, int]]]:
        """Give owners to the row groups that ``block`` (a pointer block not sent yet) is the
        first to read: {worker: [(dataset, shard, row group), ...]}, what each worker should
        start decoding."""
        new: dict[int, list] = {}
        if len(block):
            self._claimed[id(block)] = (block, self._owners(block, new))
            if len(self._claimed) > CLAIMED_BLOCKS:  # seen and never sent (a closed stream)
                self._claimed.popitem(last=False)
        return new

    def split(self, block: Block) -> list[tuple[int | None, Block]]:
        """``(worker or None for any, part)`` pairs whose parts hold the block's pointers."""
        claimed = self._claimed.pop(id(block), None)
        # the owners it was given when seen (its row groups' hints went to them), else now
        owner = claimed[1].copy() if claimed is not None and claimed[0] is block \
            else self.owners(block)
        counts = np.bincount(owner[owner >= 0], minlength=self.workers)
        if not counts.any():
            return [(None, block)]
        loose = owner < 0
        if loose.any():  # unowned pointers: with the smallest part, to even the load
            owner[loose] = int(np.argmin(np.where(counts > 0, counts, np.iinfo(np.int64).max)))
        used = np.flatnonzero(np.bincount(owner, minlength=self.workers))
        if len(used) == 1:
            return [(int(used[0]), block)]
        return [(int(w), block.take(np.flatnonzero(owner == w))) for w in used.tolist()]


def _has_row_groups(ds) -> bool:
    """Whether some shard of ``ds`` is in a format that decodes in row groups."""
    formats = getattr(ds, "formats", None)
    registry = getattr(ds, "_formats", None)
    if formats is None or registry is None:
        return True  # cannot tell: let ``row_group_starts`` say, shard by shard
    try:
        return any(registry[name].capabilities.row_groups for name in formats())
    except (KeyError, AttributeError):
        return True


def same_columns(parts: list[Block | None]) -> bool:
    """Whether the parts' results have the same columns in the same order. Only then do they
    join as the whole micro-batch would: tables join with the columns of the first one first,
    and the whole micro-batch lists the columns of its first shard first."""
    names = {tuple(p.column_names()) if p.columnar else None for p in parts if p is not None}
    return len(names) <= 1


def merge(parts: list[Block | None]) -> Block | None:
    """The worker-stage results of a micro-batch's parts as one block in pointer order (records
    sort by chunk offset; a record's children, from one part, keep their order)."""
    blocks = [p for p in parts if p is not None]
    if not blocks:
        return None
    whole = blocks[0] if len(blocks) == 1 else Block.concat(blocks)
    offsets = whole.meta["chunk_offset"]
    if len(offsets) < 2 or bool((offsets[1:] >= offsets[:-1]).all()):
        return whole
    return whole.take(np.argsort(offsets, kind="stable"))
