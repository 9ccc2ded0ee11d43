"""Each built-in accumulator's checkpoint state against its operator's configuration.

A state is first given its declared shape (``checkpoint_schema``), then its parts are held
against each other and against the pointers its cursors name: the kernels that load these
states trust them (``zephon/_ext``), so nothing reaches them that this configuration could not
have produced. An operator names its check in ``StatefulOp.check_state`` (one of the functions
at the end of this module); the operator is read, never imported, so this module sits below
``zephon.ops``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from zephon._ext.packing_algorithms import POOLED, WHOLE_RECORDS
from zephon.state import checkpoint_schema as S
from zephon.state.checkpoint_checks import Held, LaneView, array, fail, first_bad, ids, int_rows

Check = Callable[[Any, Any, "LaneView", str], None]


def _batch(op: Any, st: dict, held: Held, field: str) -> None:
    pass  # cursors and the discard count are all it has (both checked by now)


def _shuffle(op: Any, st: dict, held: Held, field: str) -> None:
    sh = st["shuffler"]
    f = f"{field}.shuffler"
    buffer, arrivals = sh["buffer"], sh["arrivals"]
    if sh["algorithm"] != op.algorithm:
        fail(f"{f}.algorithm", f"{sh['algorithm']!r}, but this shuffle is {op.algorithm!r}")
    if len(buffer) > op.buffer_size or sh["window"] > op.buffer_size:
        fail(f"{f}.buffer", f"more than buffer_size={op.buffer_size} records")
    if sh["emitted"] + len(buffer) != arrivals:
        fail(f"{f}.arrivals", f"{arrivals} arrivals, but {sh['emitted']} emitted and "
                              f"{len(buffer)} buffered")
    hid = ids(st["held_ids"], f"{field}.held_ids", len(held), arrivals)
    if len(buffer) != len(held):
        fail(f"{f}.buffer", f"{len(buffer)} buffered records, {len(held)} held cursors")
    buf = int_rows(buffer, 2, f"{f}.buffer", S.SHUFFLE_BUFFER)
    order = np.argsort(buf[:, 0], kind="stable")
    if not np.array_equal(buf[order, 0], hid):
        fail(f"{f}.buffer", "buffered arrival numbers are not the held records' ids")
    if len(held) and not held.recipes and held.view.random_access:
        from zephon.tokens.shuffler import record_keys

        ds, shard, sample = held.pointers()
        keys = record_keys(ds, shard, sample, held.lineage).view(np.int64)
        bad = np.zeros(len(buf), dtype=bool)
        bad[order] = keys != buf[order, 1]
        first_bad(f"{f}.buffer", bad, "identity key differs from the record its cursor names")


def _mixture(op: Any, st: dict, held: Held, field: str) -> None:
    from zephon.tokens.mixer import MAX_WEIGHT, SHARE_SCALE, _target_list, quantize_shares

    b = st["balancer"]
    f = f"{field}.balancer"
    # a target followed chunk by chunk is the one of the chunk the lane had reached
    target = _target_list(op.target) if op.target is not None else b["target"]
    if b["target"] != target:
        fail(f"{f}.target", f"{b['target']}, but this ensure_mixture targets {target}")
    shares = b["shares"]
    n = len(shares)
    for name in ("deficit", "emitted_weight", "buffers"):
        if len(b[name]) != n:
            fail(f"{f}.{name}", f"{len(b[name])} components, shares has {n}")
    want = quantize_shares(target).tolist()
    if n < len(want) or shares != want + [0] * (n - len(want)):
        fail(f"{f}.shares", "not the shares of this operator's target")
    deficit = np.asarray(b["deficit"], dtype=np.int64)
    first_bad(f"{f}.deficit", (np.asarray(shares) == 0) & (deficit != 0),
              "a component outside the target has a deficit")
    first_bad(f"{f}.deficit", np.abs(deficit) > (1 << 62), "out of range")
    if b["obsolete_credit"] > SHARE_SCALE:
        fail(f"{f}.obsolete_credit", f"above {SHARE_SCALE}")
    entries = [(c, i, e) for c, buf in enumerate(b["buffers"]) for i, e in enumerate(buf)]
    if op.max_buffer_size is not None and len(entries) > op.max_buffer_size:
        fail(f"{f}.buffers", f"more than max_buffer_size={op.max_buffer_size} records")
    hid = ids(st["held_ids"], f"{field}.held_ids", len(held), st["next_id"])
    if len(entries) != len(held):
        fail(f"{f}.buffers", f"{len(entries)} buffered records, {len(held)} held cursors")
    for c, i, (_rid, w, seq) in entries:
        if w >= MAX_WEIGHT or seq >= b["seq"]:
            fail(f"{f}.buffers[{c}][{i}]", "weight or arrival number out of range")
        if i and seq <= b["buffers"][c][i - 1][2]:
            fail(f"{f}.buffers[{c}][{i}]", "arrival numbers of a component must increase")
    rids = np.asarray([e[2][0] for e in entries], dtype=np.int64)
    comps = np.asarray([e[0] for e in entries], dtype=np.int64)
    order = np.argsort(rids, kind="stable")
    if not np.array_equal(rids[order], hid):
        fail(f"{f}.buffers", "buffered record ids are not the held records' ids")
    if len(held) and not held.recipes and held.view.random_access:
        ds = held.pointers()[0]
        bad = np.zeros(len(entries), dtype=bool)
        bad[order] = ds != comps[order]
        first_bad(f"{f}.buffers", bad, "a record is buffered under another dataset's component")


def _pack(op: Any, st: dict, held: Held, field: str) -> None:
    conf = op.packer_config
    hid = ids(st["held_ids"], f"{field}.held_ids", len(held), st["next_id"])
    consumed = array(st["consumed"], f"{field}.consumed", "<i8", 1)
    if len(consumed) != len(held):
        fail(f"{field}.consumed.shape", f"{len(consumed)} values for {len(held)} held records")
    first_bad(f"{field}.consumed", consumed < 0, "negative")
    valid_groups = set(np.unique(op.group_map).tolist())
    limit = conf["num_bins"] if conf["algorithm"] in WHOLE_RECORDS else 1
    rids, groups = [], []
    for g, p in st["packers"].items():
        f = f"{field}.packers[{g}]"
        if int(g) not in valid_groups:
            fail(f, f"no packing group {g} in this operator")
        if p["algorithm"] != conf["algorithm"]:
            fail(f"{f}.algorithm", f"{p['algorithm']!r}, but this packer is "
                                   f"{conf['algorithm']!r}")
        if len(p["bins"]) > limit:
            fail(f"{f}.bins", f"{len(p['bins'])} open bins, at most {limit}")
        if p["pool"] and conf["algorithm"] not in POOLED:
            fail(f"{f}.pool", f"only {' and '.join(POOLED)} keep(s) a candidate pool")
        for i, b in enumerate(p["bins"]):
            if not b or sum(s[2] for s in b) > conf["max_length"]:
                fail(f"{f}.bins[{i}]", f"empty or longer than max_length={conf['max_length']}")
        segs = [s[0] for b in p["bins"] for s in b]
        where = [f"[{i}][{j}]" for i, b in enumerate(p["bins"]) for j in range(len(b))]
        _held(np.asarray(segs, dtype=np.int64), hid, f"{f}.bins", where)
        empty = [k for k, s in enumerate(s for b in p["bins"] for s in b) if s[2] < 1]
        if empty:
            fail(f"{f}.bins{where[empty[0]]}", "an empty segment")
        pool = np.asarray(p["pool"], dtype=np.int64).reshape(-1, 4)
        _held(pool[:, 0], hid, f"{f}.pool", [f"[{i}]" for i in range(len(pool))])
        first_bad(f"{f}.pool", pool[:, 2] < 1, "an empty segment")
        first_bad(f"{f}.pool", pool[:, 3] >= p["arrivals"], "arrival not below arrivals")
        rids += [*segs, *pool[:, 0].tolist()]
        groups += [int(g)] * (len(segs) + len(pool))
    if rids and len(held) and not held.recipes and held.view.random_access:
        rows = np.searchsorted(hid, np.asarray(rids, dtype=np.int64))
        packed_in = op.group_map[held.pointers()[0][rows]]
        first_bad(f"{field}.packers", packed_in != np.asarray(groups),
                  "a record is packed in another dataset's group")


def _held(rids: np.ndarray, hid: np.ndarray, field: str, where: list[str]) -> None:
    """Segments name records this operator holds (their token ranges are checked on rebuild)."""
    rows = np.minimum(np.searchsorted(hid, rids), max(len(hid) - 1, 0))
    bad = np.flatnonzero((hid[rows] != rids) if len(hid) else np.ones(len(rids), dtype=bool))
    if len(bad):
        fail(f"{field}{where[int(bad[0])]}", f"names record {int(rids[bad[0]])}, which this "
                                             "operator does not hold")


def _record(op: Any, st: dict, held: Held, field: str) -> None:
    sizes = st.get("batch_sizes")
    if sizes is not None and sum(sizes) != len(held):
        fail(f"{field}.batch_sizes", f"add up to {sum(sizes)}, {len(held)} records held")


def _stateful(op: Any, st: dict, held: Held, field: str) -> None:
    pass  # the held records are the whole state; ``live`` is a flag


def _checked(model: Any, check: Callable[[Any, dict, Held, str], None]) -> Check:
    def run(op: Any, state: Any, view: LaneView, field: str) -> None:
        """``state`` (an entry of a lane's ``base.ops``) as ``op`` could have written it."""
        parsed = S.parse(model, state, field)
        check(op, parsed, Held(view, parsed["held"], f"{field}.held"), field)
    return run


batch_state = _checked(S.BATCH, _batch)
shuffle_state = _checked(S.SHUFFLE, _shuffle)
mixture_state = _checked(S.MIXTURE, _mixture)
pack_state = _checked(S.PACK, _pack)
record_state = _checked(S.RECORD, _record)
stateful_state = _checked(S.STATEFUL, _stateful)


def other_state(op: Any, state: Any, view: LaneView, field: str) -> None:
    """A third-party accumulator's state: its held cursors, the rest is its own."""
    parsed = S.parse(S.OTHER, state, field)
    Held(view, parsed.get("held"), f"{field}.held")
