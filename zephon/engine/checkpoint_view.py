"""A pipeline as its checkpoints see it (``zephon.state.view.PipelineView``).

The one place that reads a ``Pipeline`` for the checkpoint code: its operators, the serial
stage of its compiled plan, the read order of its chunks and the lanes of this rank.
"""

from __future__ import annotations

from typing import Any

from zephon.engine.plan import compile_plan
from zephon.engine.topology import Topology, resolve_topology
from zephon.state.fingerprint import fingerprint as _fingerprint
from zephon.state.view import PipelineView


def view_of(pipeline: Any, topology: Topology | None = None) -> PipelineView:
    """The view of ``pipeline``; ``topology`` when the caller resolved it already."""
    from zephon.work.read_config import coerce

    topo = topology if topology is not None else resolve_topology(pipeline._options)
    read = coerce(pipeline._options.get("mixture_config"))
    return PipelineView(
        work_source=pipeline.work_source, ops=tuple(pipeline._ops),
        serial_ops=tuple(compile_plan(pipeline._all_ops()).serial_ops),
        read_order=read.describe() if read is not None and not read.is_default else None,
        canonical_replicas=topo.canonical_replicas, owned_lanes=tuple(topo.owned_lanes))


def fingerprint(pipeline: Any) -> dict:
    """The fingerprint a checkpoint of ``pipeline`` carries."""
    return _fingerprint(view_of(pipeline))
