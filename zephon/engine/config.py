"""The process engine's settings, resolved once from options and environment, and the
``multiprocessing`` context its processes start from."""

from __future__ import annotations

import multiprocessing
import warnings
from dataclasses import dataclass

# The coordinator's output slots start at most this large: a frame too big for one is split
# (and a single unit grows its slot), whereas 8 slots of a worker's 8 MiB were 64 MiB of mapped memory, half of
# W2's shared memory, for frames of batches that rarely pass 2 MiB.
OUTPUT_SLOT_BYTES = 2 << 20


@dataclass(frozen=True)
class EngineConfig:
    workers: int
    deterministic: bool
    # finished frames the coordinator may have ready ahead of the training loop; 0: none, each
    # frame is computed when the loop asks for it (``options(prefetch_batches=0)``)
    prefetch: int
    slots: int  # slots per worker
    slot_bytes: int
    start_method: str
    log_level: str
    max_retries: int
    prefix: str = ""
    parent: tuple[int, float] = (0, 0.0)
    environment: dict | None = None  # the training process's, when the pipeline started
    tempdir: str | None = None  # the coordinator's multiprocessing temp dir (spawning.py)

    @property
    def window(self) -> int:
        """Blocks issued and not yet taken by their lane. One slot of every worker stays out of
        it: a worker holds a result in its slot until the serial stage has dropped it, and the
        block the serial stage is on holds one, so with a slot per block in flight the pool
        copied results out of their slots to free one (``WorkerPool.hold_limit``)."""
        return self.workers * max(1, self.slots - 1)

    @property
    def output_slots(self) -> int:
        """Slots of the output ring: one at least, which ``prefetch=0`` fills on demand only."""
        return max(1, self.prefetch)

    @classmethod
    def from_options(cls, options, workers: int, **kw) -> EngineConfig:
        get = options.get
        values = {"workers": int(workers), "prefetch": int(get("prefetch_batches")),
                  "slots": int(get("shm_slots")), "slot_bytes": int(get("shm_slot_bytes")),
                  "max_retries": int(get("max_worker_retries"))}
        values["prefetch"] = max(0, values["prefetch"])  # the reference: < 0 acts as 0
        lowest = {"max_retries": 0, "prefetch": 0}
        for name, v in values.items():
            if v < lowest.get(name, 1):
                raise ValueError(f"{name} must be >= {lowest.get(name, 1)}, got {v}")
        return cls(deterministic=bool(get("deterministic")),
                   start_method=start_method(get("start_method")),
                   log_level=str(get("log_level")).upper(), **values, **kw)


def start_method(requested) -> str:
    method = str(requested or "forkserver").lower()
    if method == "fork":
        warnings.warn("start_method='fork' is unsafe once threads exist (Arrow, torch and "
                      "tokenizers start some); using 'forkserver'", RuntimeWarning, stacklevel=4)
        method = "forkserver"
    available = multiprocessing.get_all_start_methods()
    if method not in ("forkserver", "spawn"):
        raise ValueError(f"start_method must be 'forkserver' or 'spawn', got {requested!r}")
    return method if method in available else "spawn"


def mp_context(method: str, *preload: str):
    ctx = multiprocessing.get_context(method)
    if method == "forkserver":
        ctx.set_forkserver_preload(list(preload))  # children fork from a server that imported it
    return ctx
