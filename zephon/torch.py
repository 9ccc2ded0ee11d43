"""PyTorch adapter: ``pipeline.to_torch_dataset()`` for frameworks that insist on a DataLoader.

Best: ``DataLoader(ds, batch_size=None, num_workers=0)``. The pipeline already batches and runs
its own worker processes; DataLoader workers add a copy per batch and start nothing faster.

``num_workers=n > 0`` works too, for frameworks that set it themselves: DataLoader worker ``i``
iterates lanes ``i, i+n, i+2n, ...`` of this rank's lanes (``canonical_replicas``), in its own
process and inline (a DataLoader worker is daemonic and may not start processes; the threads
runner, if chosen, is kept). Together the workers deliver exactly the pipeline's batches. The
DataLoader takes one batch from each worker in turn, skipping workers that have finished; while
every lane still runs and this rank's lane count is a multiple of ``n`` that is the pipeline's
own order (lane 0, 1, 2, ...), otherwise the same batches in that rotation. A worker left
without lanes (fewer lanes than workers) delivers nothing and says so. Token-aware sources are
primed by each worker, when it starts iterating.

Construction does no work: the pipeline is built, primed and started when iterated.

With ``stateful=True`` the dataset follows torchdata's Stateful protocol (``state_dict`` /
``load_state_dict``), so ``StatefulDataLoader`` checkpoints it; with DataLoader workers it keeps
one state per worker, each holding that worker's lanes, and resumes with the same ``num_workers``.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

try:
    import torch.utils.data as _tud
except ImportError as e:  # pragma: no cover - exercised only without torch
    raise RuntimeError("to_torch_dataset() needs torch: pip install 'zephon[torch]'") from e


class PipelineIterableDataset(_tud.IterableDataset):
    def __init__(self, pipeline: Any, stateful: bool = True) -> None:
        super().__init__()
        self.pipeline = pipeline
        self.stateful = stateful
        self._pending: dict | None = None

    def __iter__(self) -> Iterator[Any]:
        info = _tud.get_worker_info()
        if info is not None:  # this object is the worker's own copy: adapting it is local
            _in_loader_worker(self.pipeline, info.id, info.num_workers)
        if self._pending is not None:
            self.pipeline.restore(self._pending)
            self._pending = None
        return iter(self.pipeline)

    def state_dict(self) -> dict:
        if not self.stateful:
            raise AttributeError("state_dict needs to_torch_dataset(stateful=True)")
        if self._pending is not None:
            return {"engine": self._pending}
        return {"engine": self.pipeline.checkpoint()}

    def load_state_dict(self, state: dict) -> None:
        if not self.stateful:
            raise AttributeError("load_state_dict needs to_torch_dataset(stateful=True)")
        if "engine" not in state:
            raise ValueError("not a Zephon dataset state: missing 'engine'")
        self._pending = dict(state["engine"])  # applied when iteration starts (in the worker)


def _in_loader_worker(pipeline: Any, worker: int, workers: int) -> None:
    """Make ``pipeline`` DataLoader worker ``worker``'s share: its lanes, run in this process."""
    from zephon.engine.session import engine_kind
    from zephon.engine.topology import LOADER_SHARE, resolve_topology

    if workers > 1:
        pipeline._options.explicit[LOADER_SHARE] = (worker, workers)
    if engine_kind(pipeline)[0] == "process":
        pipeline.options(runner="inline")
    if workers > 1 and not resolve_topology(pipeline._options).owned_lanes:
        lanes = resolve_topology(_without_share(pipeline._options)).owned_lanes
        warnings.warn(f"zephon: DataLoader worker {worker} of {workers} has no lanes to read: "
                      f"this rank has {len(lanes)} (canonical_replicas); a lane count that is a "
                      "multiple of num_workers uses every worker", RuntimeWarning, stacklevel=3)


def _without_share(options: Any) -> Any:
    from zephon.engine.topology import LOADER_SHARE
    from zephon.options import RuntimeOptions

    return RuntimeOptions({k: v for k, v in options.explicit.items() if k != LOADER_SHARE})
