"""PyTorch adapter: ``pipeline.to_torch_dataset()`` for frameworks that insist on a DataLoader.

Use ``DataLoader(ds, batch_size=None, num_workers=0)``: the pipeline already batches and runs
its own workers. With ``stateful=True`` the dataset follows torchdata's Stateful protocol
(``state_dict`` / ``load_state_dict``), so ``StatefulDataLoader`` checkpoints it.
"""

from __future__ import annotations

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
        if info is not None and info.num_workers > 1:
            raise RuntimeError(
                "use DataLoader(..., num_workers=0): the pipeline runs its own workers, and "
                "DataLoader workers would each replay the whole stream")
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

