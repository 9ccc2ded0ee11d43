"""A pipeline as its checkpoints see it (``zephon.state.view.PipelineView``).

The one place that reads a ``PipelineSpec`` for the checkpoint code: its operators, the serial
stage of its compiled plan, the read order of its chunks and the lanes of this rank.
"""

from __future__ import annotations

from zephon.engine.plan.stages import compile_plan
from zephon.engine.plan.topology import Topology, resolve_topology
from zephon.engine.spec import PipelineSpec
from zephon.state.fingerprint import fingerprint as _fingerprint
from zephon.state.view import PipelineView


def view_of(spec: PipelineSpec, topology: Topology | None = None) -> PipelineView:
    """The view of ``spec``; ``topology`` when the caller resolved it already."""
    from zephon.work.read_config import coerce

    topo = topology if topology is not None else resolve_topology(spec.options)
    read = coerce(spec.options.get("mixture_config"))
    return PipelineView(
        work_source=spec.work_source, ops=tuple(spec.ops),
        serial_ops=tuple(compile_plan(spec.all_ops).serial_ops),
        read_order=read.describe() if read is not None and not read.is_default else None,
        canonical_replicas=topo.canonical_replicas, owned_lanes=tuple(topo.owned_lanes))


def fingerprint(spec: PipelineSpec) -> dict:
    """The fingerprint a checkpoint of ``spec`` carries."""
    return _fingerprint(view_of(spec))
