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

from collections.abc import Callable, Iterator
from typing import Any

from zephon.errors import ConfigError, EngineError

try:
    import torch.utils.data as _tud
except ImportError as e:  # pragma: no cover - exercised only without torch
    raise EngineError("to_torch_dataset() needs torch: pip install 'zephon[torch]'") from e


class PipelineIterableDataset(_tud.IterableDataset):
    def __init__(self, pipeline: Any, stateful: bool = True, *,
                 as_loader_worker: Callable[[int, int], None]) -> None:
        super().__init__()
        self.pipeline = pipeline
        self.stateful = stateful
        # makes the pipeline a DataLoader worker's share (``Pipeline._as_loader_worker``)
        self._as_loader_worker = as_loader_worker
        self._pending: dict | None = None

    def in_loader_worker(self, worker: int, workers: int) -> None:
        """Make this dataset's pipeline DataLoader worker ``worker``'s share of ``workers``:
        its lanes, read in this process (warns when it has none)."""
        self._as_loader_worker(worker, workers)

    def __iter__(self) -> Iterator[Any]:
        info = _tud.get_worker_info()
        if info is not None:  # this object is the worker's own copy: adapting it is local
            self.in_loader_worker(info.id, info.num_workers)
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
            raise ConfigError("not a Zephon dataset state: missing 'engine'")
        self._pending = dict(state["engine"])  # applied when iteration starts (in the worker)
