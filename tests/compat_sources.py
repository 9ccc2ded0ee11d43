"""A user-written WorkSource in the reference library's streaming style (``next_chunk`` /
``clone_for_lane`` / ``state_dict``), importable by worker processes and test scripts."""

from __future__ import annotations

from typing import Any

from zephon.io import Dataset, InMemoryShard
from zephon.work import WorkChunk, WorkSource


def datasets() -> list[Dataset]:
    a = Dataset.from_dict("a", {0: InMemoryShard([{"text": f"a{i}", "n": i} for i in range(60)])})
    b = Dataset.from_dict("b", {0: InMemoryShard([{"text": f"b{i}", "n": 100 + i}
                                                  for i in range(30)]),
                                1: InMemoryShard([{"text": f"b{30 + i}", "n": 130 + i}
                                                  for i in range(30)])})
    return [a, b]


class AlternatingSource(WorkSource):
    """Global chunk g holds rows [4g, 4g+4) of ``a`` and of ``b`` (shard by shard); lane l of L
    keeps the chunks with g % L == l. ``stateful=False`` leaves out state_dict/load_state_dict
    (only the base class's, which hold no position)."""

    pulls = 0  # next_chunk calls in this process (tests count replays)

    def __init__(self, per_chunk: int = 4) -> None:
        super().__init__()
        self._datasets = dict(enumerate(datasets()))
        self.per_chunk = per_chunk
        self.pos = 0

    @property
    def datasets_by_id(self) -> dict[int, Any]:
        return self._datasets

    def component_ids(self) -> dict[str, int]:
        return {"a": 0, "b": 1}

    def _global(self, g: int) -> WorkChunk | None:
        start = g * self.per_chunk
        if start >= 60:
            return None
        rows = range(start, start + self.per_chunk)
        return WorkChunk(components={"a": [(0, 0, r) for r in rows],
                                     "b": [(1, r // 30, r % 30) for r in rows]}, seed=g)

    def next_chunk(self) -> WorkChunk | None:
        type(self).pulls += 1
        while True:
            g = self.pos
            chunk = self._global(g)
            if chunk is None:
                return None
            self.pos += 1
            if g % self.canonical_replicas == self.lane_id:
                return chunk


class StatefulSource(AlternatingSource):
    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "pos": self.pos}

    def load_state_dict(self, state) -> None:
        super().load_state_dict(state)
        self.pos = int(state["pos"])
