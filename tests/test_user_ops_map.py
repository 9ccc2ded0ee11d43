"""map_transform / map_batch: user functions (lambdas and closures included) run in the worker
processes, and the stream is the one of the inline engine."""

from __future__ import annotations

import pytest
from test_user_ops_helpers import make_pipeline, stream

from zephon.ops import UserFunctionError


def _map_pipeline(workers: int):
    offset = 7  # captured by the closure below: must travel to the workers by value

    def add_offset(p):
        return {**p, "n": p["n"] + offset}

    return (make_pipeline(workers)
            .map_transform(lambda p: None if p["n"] % 5 == 0 else p)
            .map_transform(add_offset)
            .map_transform(lambda p: {**p, "text": p["text"] * 2}, parallelism=2)
            .batch(4, drop_last=False)
            .map_batch(lambda b: b if len(b) == 4 else None))


def test_map_transform_and_map_batch_same_stream_with_0_and_2_workers():
    inline = stream(_map_pipeline(0))
    assert len(inline) > 20
    assert stream(_map_pipeline(2)) == inline
    texts = [t for *_, t in inline]
    assert all('"n": ' in t for t in texts)


def test_map_transform_order_kept_in_records_mode():
    seen = [u.payload["n"] for u in make_pipeline(0).map_transform(lambda p: p)]
    assert seen == [u.payload["n"] for u in make_pipeline(0)]


def test_map_transform_error_names_operator_and_sample():
    def boom(p):
        if p["text"] == "a9":
            raise ValueError("bad record")
        return p

    p = make_pipeline(0).map_transform(boom)
    with pytest.raises(UserFunctionError) as e:
        list(p)
    assert e.value.op_name == "map_transform[boom]"
    assert e.value.sample_id == (0, 0, 9)
    assert "map_transform[boom]" in str(e.value) and "(0, 0, 9)" in str(e.value)
