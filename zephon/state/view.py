"""What the checkpoint code knows of a pipeline: handed to it, never read from ``Pipeline``.

The engine builds a ``PipelineView`` (``zephon.engine.plan.checkpoint_view``) from a pipeline and its
compiled plan; everything in ``zephon.state`` takes it as an argument, so the state package
needs nothing above it (no engine, no builder).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class PipelineView:
    """A pipeline as its checkpoints see it.

    Args:
        work_source: The work source (its ``state_dict`` goes into the fingerprint; restore
            checks cursors against its chunks).
        ops: The builder's operators in order, the implicit fetch excluded: the fingerprint's
            ``operators``.
        serial_ops: The compiled plan's serial stage: one entry of a lane's ``base.ops`` each.
        read_order: ``mixture_config.describe()`` when chunks are read in another order than
            the default (that order is data), else None.
        canonical_replicas: The run's lane count.
        owned_lanes: The lanes this rank owns.
    """

    work_source: Any
    ops: tuple
    serial_ops: tuple
    read_order: dict | None
    canonical_replicas: int
    owned_lanes: tuple[int, ...]

    def batch_op(self) -> tuple[int, Any] | None:
        """(place among ``ops``, operator) of the operator that forms batches, or None."""
        return next(((i, op) for i, op in enumerate(self.ops) if op.traits().forms_batches),
                    None)
