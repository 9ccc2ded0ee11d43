"""What ``Pipeline``'s builder methods share: the operator list and how an operator joins it.

``Pipeline`` (``zephon.pipeline``) is assembled from this base, the record builders
(``zephon.record_builders``) and the token builders (``zephon.token_builders``), so that each
module stays readable; users see one class.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

from zephon.ops.base import Operator
from zephon.ops.batch import BatchOp
from zephon.ops.map_transform import MapBatchOp

if TYPE_CHECKING:
    from typing_extensions import Self


class PipelineBase:
    """The state every builder method reads or extends (set up by ``Pipeline.__init__``)."""

    work_source: Any
    _ops: list[Operator]
    _fetch_kw: dict[str, Any]
    _prefetch: dict[str, Any] | None
    _validated: bool
    _runtime: Any
    _primed: Any

    def _changed(self) -> None:
        if self._runtime is not None:
            self._runtime.close()
            self._runtime = None

    def _append(self, op: Operator) -> Self:
        if any(isinstance(o, BatchOp) for o in self._ops) and not isinstance(op, MapBatchOp):
            warnings.warn(f"{op.op_name} placed after batch: it will see SampleBatch items",
                          stacklevel=3)
        self._ops.append(op)
        self._validated = False
        self._primed = None  # token ratios are measured through the chain: again
        from zephon.work.token_estimation import forget_token_ratios

        forget_token_ratios(self.work_source)
        self._changed()
        return self
