"""The checkpoint document's shape, declared once, checked whole at ``restore()``.

Why pydantic (v2), and its core: validation runs in compiled code, so the cursor arrays a
checkpoint carries (tens of thousands of integers for a large shuffle buffer) are checked in
milliseconds; strict mode refuses ``2.7``, ``"3"`` or ``True`` where an integer belongs instead
of coercing them; and each error carries its location as a tuple, which becomes the field path
a ``CheckpointError`` names. The schema is written with ``pydantic_core.core_schema`` (the
public builders pydantic's own types use) rather than ``BaseModel`` classes: building these
validators takes microseconds where model classes take ~0.4 s, a cost a restore would pay.
jsonschema walks arrays element by element in Python (too slow for cursor arrays at restore
time); msgspec reports locations only inside message text. Imported only by ``restore()``:
iteration never pays for it.

Shapes only: what needs the pipeline (lane counts, chunk lengths, which operator holds what)
is checked by ``checkpoint_checks`` and ``checkpoint_ops``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic_core import SchemaValidator, ValidationError
from pydantic_core import core_schema as cs

from zephon.errors import CheckpointError


def _int(ge: int, lt: int) -> cs.CoreSchema:
    return cs.int_schema(strict=True, ge=ge, lt=lt)


I64 = _int(-(1 << 63), 1 << 63)
COUNT = _int(0, 1 << 62)
POSITIVE = _int(1, 1 << 62)
DIGEST = cs.str_schema(strict=True, pattern=r"^[0-9a-f]{64}$")
INDEX_KEY = cs.str_schema(strict=True, pattern=r"^(0|[1-9][0-9]{0,8})$")  # "0", "17"; not "01"


def obj(required: dict[str, cs.CoreSchema], optional: dict[str, cs.CoreSchema] | None = None,
        extra: str = "forbid") -> cs.CoreSchema:
    """A JSON object with these keys (unknown keys refused unless ``extra="allow"``)."""
    fields = {k: cs.typed_dict_field(v, required=True) for k, v in required.items()}
    fields.update({k: cs.typed_dict_field(v, required=False) for k, v in (optional or {}).items()})
    return cs.typed_dict_schema(fields, extra_behavior=extra, strict=True)


def lst(item: cs.CoreSchema, lo: int | None = None, hi: int | None = None) -> cs.CoreSchema:
    return cs.list_schema(item, min_length=lo, max_length=hi, strict=True)


def opt(schema: cs.CoreSchema) -> cs.CoreSchema:
    return cs.nullable_schema(schema)


# ``refs.encode`` of an integer numpy array: dtype, shape, row-major values
ND = obj({"__nd__": cs.literal_schema(["<i8", "<i4"]), "shape": lst(COUNT, 1, 2),
          "data": lst(I64)})
# one segment of a packed row's recipe (``PackOp._recipe``)
PACK_SEGMENT = obj({"chunk_id": COUNT, "chunk_offset": COUNT, "lineage": lst(I64),
                    "start": COUNT, "len": POSITIVE}, {"inner": cs.any_schema()})
# a user operator's replay recipe (``zephon.state.recipes``): [chunk_id, chunk_offset, lineage, inner]
RECIPE_INPUT = cs.tuple_schema([COUNT, COUNT, lst(I64), cs.any_schema()], strict=False)
USER_RECIPE = obj({"k": cs.literal_schema(["g", "p", "pf", "f"]), "i": COUNT,
                   "in": lst(lst(cs.any_schema(), 4, 4))})
# cursors of held records (``zephon.state.refs``)
REFS = obj({"chunk_id": ND, "chunk_offset": ND, "lineage": ND},
           {"recipe": lst(cs.union_schema([cs.str_schema(strict=True), lst(cs.any_schema())])),
            "padding_length": ND})
# where a streaming user WorkSource resumes (zephon/engine/lanes/chunk_source.py); its own state is
# its own to check (load_state_dict)
SOURCE_POINT = obj({"chunk": COUNT, "state": cs.any_schema()})
LANE = obj({"base": obj({"position": lst(COUNT, 2, 2),
                         "ops": lst(opt(cs.dict_schema(cs.str_schema(strict=True))))},
                        {"source": SOURCE_POINT}),
            "skip": COUNT, "delivered": COUNT},
           {"digest": DIGEST})  # the digest is required from version 2 on (checked by caller)
DOCUMENT = obj({"format": cs.literal_schema(["zephon-checkpoint"]),
                "version": cs.literal_schema([1, 2]),
                "canonical_replicas": _int(1, (1 << 20) + 1),
                "fingerprint": cs.dict_schema(cs.str_schema(strict=True)),
                "token_ratios": opt(cs.dict_schema(
                    cs.str_schema(strict=True),
                    cs.float_schema(strict=True, gt=0, allow_inf_nan=False))),
                "lanes": cs.dict_schema(INDEX_KEY, opt(LANE))},
               {"digest": DIGEST})

# -- operator states (``LaneAccumulator.get_state`` of each built-in) --------------------------

BATCH = obj({"held": opt(REFS)},
            {"discard": COUNT})  # records already delivered in batches of another size (v2)
# a shuffle buffer holds a [arrival, identity key] row per record (up to buffer_size, often
# thousands): its rows are checked at numpy speed by ``checkpoint_checks.int_rows`` against
# SHUFFLE_BUFFER below (which names the first bad element when they are not right)
SHUFFLE_BUFFER = lst(lst(I64, 2, 2))
SHUFFLE = obj({"shuffler": obj({"version": cs.literal_schema([1]),
                                "algorithm": cs.str_schema(strict=True),
                                "buffer": lst(cs.any_schema()),
                                "window": COUNT, "emitted": COUNT, "arrivals": COUNT}),
               "held": opt(REFS), "held_ids": ND})
MIXTURE = obj({"balancer": obj({"version": cs.literal_schema([1]),
                                "target": lst(cs.float_schema(strict=True, ge=0,
                                                              allow_inf_nan=False)),
                                "shares": lst(COUNT), "deficit": lst(I64),
                                "emitted_weight": lst(COUNT),
                                "buffers": lst(lst(lst(COUNT, 3, 3))),
                                "obsolete_credit": COUNT, "seq": COUNT}),
               "held": opt(REFS), "held_ids": ND, "next_id": COUNT},
              {"chunk": _int(-1, 1 << 62)})
PACK = obj({"packers": cs.dict_schema(INDEX_KEY, obj({
                "version": cs.literal_schema([1]), "algorithm": cs.str_schema(strict=True),
                "bins": lst(lst(lst(COUNT, 3, 3))), "pool": lst(lst(COUNT, 4, 4)),
                "arrivals": COUNT})),
            "held": opt(REFS), "held_ids": ND, "consumed": ND, "next_id": COUNT})
RECORD = obj({"held": opt(REFS)}, {"batch_sizes": lst(POSITIVE)})
STATEFUL = obj({"held": opt(REFS), "live": cs.bool_schema(strict=True)})
# a third-party accumulator: only the cursors the engine itself reads are checked
OTHER = obj({}, {"held": opt(REFS)}, extra="allow")

_VALIDATORS: dict[int, SchemaValidator] = {}


def path_of(loc: Sequence[Any], prefix: str = "") -> str:
    """``("lanes", "3", "base", "ops", 2, "held", "chunk_offset", "data", 17)`` ->
    ``lanes[3].base.ops[2].held.chunk_offset[17]`` (lane keys and indices in brackets)."""
    out = prefix
    items = list(loc)
    for i, part in enumerate(items):
        if part == "data" and i + 1 < len(items) and isinstance(items[i + 1], int):
            continue  # an array's values: name the element, not the encoding
        if isinstance(part, int) or (i and items[i - 1] in ("lanes", "packers")):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def parse(schema: cs.CoreSchema, value: Any, prefix: str = "") -> Any:
    """``value`` checked against ``schema``; a ``CheckpointError`` naming the first bad field."""
    v = _VALIDATORS.get(id(schema))
    if v is None:
        v = _VALIDATORS[id(schema)] = SchemaValidator(schema)
    try:
        return v.validate_python(value)
    except ValidationError as e:
        err = e.errors(include_url=False)[0]
        raise CheckpointError(path_of(err["loc"], prefix),
                              f"{err['msg']} (got {_short(err.get('input'))})") from None
