"""Runtime options: ``Pipeline.options(...)`` over ``ZEPHON_*`` environment variables over defaults.

Every setting here changes speed only, never the data (except the data-identity settings
``canonical_replicas`` and friends, which choose which lanes a rank owns). ``resolve`` reports
where each value came from so ``explain()`` can show it.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field
from typing import Any, Literal

IpcTransport = Literal["socketpair", "pipe"]

# name -> default; the reference's option names are all accepted.
KNOWN_OPTIONS: dict[str, Any] = {
    # engine shape
    "runner": None, "num_workers": None, "max_workers": None, "per_stage_runner": None,
    "worker_allocation": "fit_to_ops", "mp_context": None, "start_method": None,
    "deterministic": True, "micro_batch_size": None,
    # queues and memory
    "prefetch_batches": None, "default_stage_prefetch": None, "per_stage_prefetch": None,
    "op_queue_capacity": None, "shm_slot_bytes": None, "shm_slots": None,
    "ipc_transport": "socketpair", "ipc_buffer_bytes": None,
    "shm_coalesce": None, "shm_min_item_bytes": None, "shm_min_new_allocation_bytes": None,
    "shm_min_forward_bytes": None, "shm_compact_above_ratio": None,
    "shm_compact_min_savings_bytes": None, "shm_max_coalesced_bytes": None,
    "coalesce_tensors": None, "shm_min_size": None,
    "max_worker_retries": 3, "shutdown_mode": "graceful",
    # data identity / topology
    "canonical_replicas": None, "dp_degree": None, "dp_group_id": None,
    "world_size": None, "global_rank": None, "mapping_strategy": None,
    # checkpoint aggregation
    "run_id": "default_run_id", "aggregate_dir": None, "aggregate_timeout_s": 180.0,
    "aggregate_serializer": "json", "aggregate_compressor": "none",
    # misc reference options
    "mixture_config": None, "io_options": None, "allow_latency_flush_in_deterministic": True,
    "flush_every_k_chunks": None, "auto_validation": "strict", "mtp_mode": False,
    "mtp_buffer": None, "mtp_buffer_bytes": None, "mtp_prefetch": None,
    "mtp_auto_checkpoint": True, "execution_tracking": None, "metrics_sink_config": None,
    "emit_fetch_metrics": None, "emit_prefetch_metrics": None, "progress": None,
    "log_level": None,
    # our additions
    "memory_budget": None,
}

RUNNERS = ("process", "threads", "inline")


def _runner(text: str) -> str:
    value = text.strip().lower()
    if value not in RUNNERS:
        raise ValueError(f"must be one of {', '.join(RUNNERS)}")
    return value


def _workers(text: str) -> int | str:
    value = text.strip().lower()
    return "auto" if value == "auto" else int(value)


# option -> (environment variable, parser)
ENV_OPTIONS: dict[str, tuple[str, Any]] = {
    "runner": ("ZEPHON_RUNNER", _runner),
    "num_workers": ("ZEPHON_NUM_WORKERS", _workers),
    "prefetch_batches": ("ZEPHON_PREFETCH_BATCHES", int),
    "start_method": ("ZEPHON_START_METHOD", str),
    "shm_slot_bytes": ("ZEPHON_SHM_SLOT_BYTES", lambda s: _parse_size(s)),
    "shm_slots": ("ZEPHON_SHM_SLOTS", int),
    "log_level": ("ZEPHON_LOG_LEVEL", str),
    "micro_batch_size": ("ZEPHON_MICRO_BATCH", int),
    "progress": ("ZEPHON_PROGRESS", lambda s: s.strip().lower() not in ("", "0", "false", "no")),
    "memory_budget": ("ZEPHON_MEMORY_BUDGET", lambda s: _parse_size(s)),
}

# defaults for settings whose reference default is "None -> computed"; num_workers "auto":
# the runner and worker count are measured in the first seconds (zephon/engine/autotune.py)
COMPUTED_DEFAULTS: dict[str, Any] = {
    "num_workers": lambda: "auto",
    "prefetch_batches": lambda: 8,
    "start_method": lambda: "forkserver",
    "shm_slot_bytes": lambda: 4 << 20,  # a 1024-record block of 2 KB texts is ~2 MiB
    "shm_slots": lambda: 4,
    "log_level": lambda: "WARNING",
    "micro_batch_size": lambda: 1024,
    "progress": lambda: False,
}


def _parse_size(text: str) -> int:
    s = str(text).strip().lower()
    units = {"tb": 1 << 40, "gb": 1 << 30, "mb": 1 << 20, "kb": 1 << 10, "b": 1}
    for suffix, mult in units.items():
        if s.endswith(suffix):
            return int(float(s[: -len(suffix)]) * mult)
    return int(s)


@dataclass
class RuntimeOptions:
    """The options a user set explicitly (unset names resolve through env and defaults)."""

    explicit: dict[str, Any] = field(default_factory=dict)

    def update(self, **kw: Any) -> None:
        for name, value in kw.items():
            if name not in KNOWN_OPTIONS:
                warnings.warn(f"Pipeline.options: unknown option {name!r} ignored", stacklevel=3)
                continue
            if name == "auto_validation":
                value = str(value).lower()
                if value not in ("strict", "warn", "off"):
                    raise ValueError(f"auto_validation must be strict|warn|off, got {value!r}")
            if name == "io_options":
                from zephon.io import StoreOptions

                prev = self.explicit.get("io_options")
                value = (StoreOptions.coerce(prev).merged(value) if prev is not None
                         else StoreOptions.coerce(value))
            if name == "mp_context":
                self.explicit["start_method"] = value
            self.explicit[name] = value

    def resolve(self, name: str) -> tuple[Any, str]:
        """(value, source) with source in {"options", "environment", "default"}."""
        if self.explicit.get(name) is not None:
            return self.explicit[name], "options"
        if name in ENV_OPTIONS:
            var, parse = ENV_OPTIONS[name]
            raw = os.environ.get(var)
            if raw not in (None, ""):
                try:
                    return parse(raw), "environment"
                except ValueError as e:
                    raise ValueError(f"environment variable {var}={raw!r} is invalid: {e}") from e
        if name in COMPUTED_DEFAULTS:
            return COMPUTED_DEFAULTS[name](), "default"
        return KNOWN_OPTIONS.get(name), "default"

    def get(self, name: str) -> Any:
        return self.resolve(name)[0]
