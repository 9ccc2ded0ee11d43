"""Records of the MDS and litData reference fixtures in a comparable form: every value with
its type, arrays and tensors with their dtypes, images as their pixels (Streaming decodes them,
Zephon hands over the encoded bytes). Plain Python values only, so the expected records can
be stored beside the fixtures and read where Streaming and litData are not installed."""

from __future__ import annotations

import io
from typing import Any

import numpy as np

from tests_support.mds_streaming import IMAGES as IMAGE_FIELDS  # the MDS image columns


def canon(value: Any) -> Any:
    if type(value).__module__.startswith("torch"):
        return ("tensor", str(value.dtype), value.tolist())
    if type(value).__module__.startswith("PIL."):
        return canon(np.asarray(value))
    if isinstance(value, memoryview):
        return canon(bytes(value))
    if isinstance(value, dict):
        return {k: canon(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [type(value).__name__, *[canon(v) for v in value]]
    if isinstance(value, np.ndarray):
        return ("ndarray", str(value.dtype), list(value.shape), value.tolist())
    if isinstance(value, np.generic):
        return (type(value).__name__, value.item())
    return (type(value).__name__, value)


def decoded_images(record: Any) -> Any:
    """Zephon's MDS record with its image bytes decoded to pixels, as Streaming gives them."""
    if not isinstance(record, dict):
        return record
    from PIL import Image

    return {k: (np.asarray(Image.open(io.BytesIO(v))) if k in IMAGE_FIELDS else v)
            for k, v in record.items()}


def key_of(record: Any) -> int:
    """The record's id: the ``id`` field, or a tuple's first leaf."""
    return int(record[0] if isinstance(record, tuple) else record["id"])


def canon_key(c: Any) -> int:
    """The id of a record in its canonical form (``canon``'s output)."""
    return c["id"][1] if isinstance(c, dict) else c[1][1]
