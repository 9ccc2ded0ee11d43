"""Recipes: how a checkpoint names rows that a stateful user operator built.

A checkpoint stores cursors, never data, and restore re-derives a held record by fetching its
pointer again and re-running the stateless operators in front of the accumulator that holds
it. A row that a stateful user operator *made* (a pair, a group result, anything its state
shaped) cannot be re-derived that way, so each such row carries a hidden ``__recipe`` column
(the same protocol ``pack_flat`` uses): a JSON text saying which input records to replay through
the operator and which of the replay's outputs the row is::

    {"k": "g", "i": 2, "in": [[chunk_id, chunk_offset, [lineage...], inner], ...]}

``k`` is the kind of replay (``g``: one ``process_many`` group; ``p`` / ``pf`` / ``f``: a
stateful push, a push followed by a flush, a flush), ``i`` the index among the outputs, and
``inner`` the recipe of an input that an upstream combining operator built itself (null
otherwise), so combining operators can be chained. The engine calls the operator's
``recipe_inputs`` / ``rebuild_rows`` (``zephon.state.restore``) with these. Whether rows need
recipes at all is the plan's decision (``zephon.engine.plan.stages``), handed to each lane.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pyarrow as pa

from zephon.block import Block
from zephon.state.refs import RECIPE_COLUMN

CursorKey = tuple[int, int, tuple[int, ...]]


def cursor_keys(block: Block) -> list[CursorKey]:
    m = block.meta
    return list(zip(m["chunk_id"].tolist(), m["chunk_offset"].tolist(), block.lineage_tuples()))


def key_index(block: Block) -> dict[CursorKey, int]:
    return {k: i for i, k in enumerate(cursor_keys(block))}


def _inner_texts(block: Block) -> list[str]:
    """Each row's own recipe as JSON text ("null" when it has none)."""
    if not block.columnar or RECIPE_COLUMN not in block.payload.column_names:
        return ["null"] * len(block)
    col = block.payload.column(RECIPE_COLUMN)
    values = col.to_pylist()
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        return ["null" if v is None else v for v in values]  # already JSON
    return [json.dumps(v, separators=(",", ":")) for v in values]


def fragments(block: Block) -> list[str]:
    """One ``[chunk, offset, [lineage], inner]`` JSON fragment per row."""
    inner = _inner_texts(block)
    return [f"[{c},{o},[{','.join(map(str, lin))}],{r}]"
            for (c, o, lin), r in zip(cursor_keys(block), inner)]


def make(kind: str, index: int, body: str) -> str:
    """A recipe text from a kind, an output index and the joined input fragments."""
    return f'{{"k":"{kind}","i":{index},"in":[{body}]}}'


def attach(block: Block | None, recipes: list[str]) -> Block | None:
    """``block`` with a recipe per row; non-columnar payloads cannot carry one (restore of a
    downstream buffer then says so)."""
    if block is None or not block.columnar or len(recipes) != len(block):
        return block
    table = block.payload
    if RECIPE_COLUMN in table.column_names:
        table = table.drop_columns([RECIPE_COLUMN])
    return block.with_table(table.append_column(RECIPE_COLUMN, pa.array(recipes, pa.string())))


def carry(src: Block, out: Block | None) -> Block | None:
    """Give the rows of a stateless operator's output the recipes of the input rows they came
    from (same cursor, or the parent of a split), so rows of an upstream combiner stay
    restorable after passing through it."""
    if (out is None or not len(out) or not src.columnar or not out.columnar
            or RECIPE_COLUMN not in src.payload.column_names):
        return out
    index = key_index(src)
    rows = []
    for c, o, lin in cursor_keys(out):
        row = -1
        for depth in range(len(lin), -1, -1):  # the record itself, then its ancestors
            row = index.get((c, o, lin[:depth]), -1)
            if row >= 0:
                break
        rows.append(row)
    idx = np.asarray(rows, dtype=np.int64)
    col = src.payload.column(RECIPE_COLUMN).take(pa.array(idx, mask=idx < 0))
    table = out.payload
    if RECIPE_COLUMN in table.column_names:
        table = table.drop_columns([RECIPE_COLUMN])
    return out.with_table(table.append_column(RECIPE_COLUMN, col))


def decode(recipe: Any) -> dict:
    if isinstance(recipe, str):
        recipe = json.loads(recipe)
    if not isinstance(recipe, dict) or "in" not in recipe:
        raise RuntimeError("restore: a held row's recipe was not made by a user operator "
                           "(operators that combine records must come in the same order)")
    return recipe


def encode(recipe: Any) -> str:
    return recipe if isinstance(recipe, str) else json.dumps(recipe, separators=(",", ":"))


def input_keys(recipe: dict) -> list[CursorKey]:
    return [(int(c), int(o), tuple(int(x) for x in lin)) for c, o, lin, _ in recipe["in"]]


def recipe_inputs(refs: dict) -> dict:
    """Cursors (and inner recipes) of every input the recipes in ``refs`` replay, once each."""
    inputs: dict[CursorKey, Any] = {}
    for rec in refs["recipe"]:
        r = decode(rec)
        for key, (_, _, _, inner) in zip(input_keys(r), r["in"]):
            inputs.setdefault(key, inner)
    keys = list(inputs)
    depth = max((len(k[2]) for k in keys), default=0)
    lineage = np.full((len(keys), depth), -1, dtype=np.int32)
    for i, k in enumerate(keys):
        lineage[i, : len(k[2])] = k[2]
    out: dict[str, Any] = {"chunk_id": np.array([k[0] for k in keys], dtype=np.int64),
                           "chunk_offset": np.array([k[1] for k in keys], dtype=np.int64),
                           "lineage": lineage}
    if any(v is not None for v in inputs.values()):
        out["recipe"] = list(inputs.values())
    return out


def rows_of(recipe: dict, index: dict[CursorKey, int]) -> list[int]:
    try:
        return [index[k] for k in input_keys(recipe)]
    except KeyError as e:
        raise RuntimeError(f"restore: input {e.args[0]} of a held row was not re-derived") from e
