"""``PipelineSpec``: a pipeline frozen for the engine, the one thing the engine reads of it.

``Pipeline`` is a builder: its methods record operators and options. When it is iterated,
checkpointed, explained or validated it hands the engine a ``PipelineSpec`` built at that moment
(``zephon.pipeline.spec_of``): the work source, the operator chain with the fetch operator the
pipeline implies, a copy of the options, the prefetch settings, the checkpoint waiting to be
restored and the observability settings. The engine reads nothing else of the pipeline and
writes nothing back: what a run learns (token ratios, its position) is returned to the caller.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from zephon.ops.base import Operator
from zephon.ops.fetch import FetchOp
from zephon.options import RuntimeOptions


@dataclass(frozen=True)
class PipelineSpec:
    """What one run of a pipeline is made of (immutable; build a new one to change it).

    Args:
        work_source: Where the pointers come from.
        ops: The operator chain after fetch, in the order the builder recorded it.
        fetch: The fetch operator over the work source's datasets (storage options applied).
        options: The execution options, a copy taken when the spec was built.
        prefetch: ``prefetch()``'s settings (``buffer_size``, ``parallelism``), or None.
        pending_restore: A checked checkpoint to resume from, or None.
        tracking: ``enable_observability``'s mode: "off", "stages" or "nodes".
        sink: Where periodic metric snapshots go, or None.
        fetch_max_batch: ``fetch(max_batch=)`` where the user gave it (it sets the block size).
    """

    work_source: Any
    ops: tuple[Operator, ...]
    fetch: FetchOp
    options: RuntimeOptions
    prefetch: Mapping[str, Any] | None = None
    pending_restore: Mapping[str, Any] | None = None
    tracking: str = "off"
    sink: Any = None
    fetch_max_batch: int | None = None

    @property
    def all_ops(self) -> tuple[Operator, ...]:
        """Fetch, then the chain: what the plan compiles."""
        return (self.fetch, *self.ops)

    @property
    def micro_batch_size(self) -> int:
        """Pointers per block: ``fetch(max_batch=)`` where given, else the option."""
        return int(self.fetch_max_batch or self.options.get("micro_batch_size"))

    def with_work_source(self, work_source: Any) -> PipelineSpec:
        """The same spec over another work source (priming's primed copy)."""
        return dataclasses.replace(self, work_source=work_source)

    def with_fetch(self, fetch: FetchOp) -> PipelineSpec:
        """The same spec with another fetch operator (the memory plan's row-group cache)."""
        return dataclasses.replace(self, fetch=fetch)


def datasets_of(work_source: Any) -> list:
    """The work source's datasets in dataset-id order."""
    datasets = work_source.datasets_by_id
    if isinstance(datasets, Mapping):
        return [datasets[i] for i in sorted(datasets)]
    return list(datasets)
