"""Runtime options: ``Pipeline.options(...)`` over ``ZEPHON_*`` environment variables over defaults.

Every setting here changes speed only, never the data (except the data-identity settings
``canonical_replicas`` and friends, which choose which lanes a rank owns). ``resolve`` reports
where each value came from so ``explain()`` can show it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Literal

from zephon.errors import ConfigError, ConfigTypeError
from zephon.option_values import check_int, parse_env_int, parse_size_bytes, parse_store_uri

IpcTransport = Literal["socketpair", "pipe"]

# name -> default; the reference's option names are all accepted.
KNOWN_OPTIONS: dict[str, Any] = {
    # engine shape
    "runner": None, "num_workers": None, "max_workers": None, "per_stage_runner": None,
    # where worker processes' serial stage runs: "auto", "process" (a coordinator process of
    # its own) or "training" (the training process: engine/process/engine.py DirectEngine)
    "coordinator": None,
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
    "run_id": "default_run_id", "aggregate_dir": None, "aggregate_store": None,
    "aggregate_timeout_s": 180.0,
    "aggregate_serializer": "json", "aggregate_compressor": "none",
    # misc reference options
    "mixture_config": None, "io_options": None, "allow_latency_flush_in_deterministic": True,
    "flush_every_k_chunks": None, "auto_validation": "strict", "mtp_mode": False,
    "mtp_buffer": None, "mtp_buffer_bytes": None, "mtp_prefetch": None,
    "mtp_auto_checkpoint": True, "execution_tracking": None, "metrics_sink_config": None,
    "emit_fetch_metrics": None, "emit_prefetch_metrics": None, "progress": None,
    "log_level": None,
    # the realised-mixture check (zephon/engine/observe/mixture_check.py): observes, never changes data
    "mixture_tolerance": None, "mixture_window": None,
    # sizes slots, buffers and caches to fit (zephon/engine/plan/memory.py)
    "memory_budget": None,
    # the Ray runner (engine/ray/config.py)
    "ray_address": None, "ray_workers": None, "ray_resources": None, "ray_runtime_env": None,
    # --- issue 30 ---
    # share of the records drawn that filters may remove (counted under "filtered") before a
    # warning, and before a DataError (None: never); engine/session.py checks them
    "filter_warn_ratio": 0.9, "filter_raise_ratio": None,
}

# Parameters that belong elsewhere, for the message of a name options() does not know.
ELSEWHERE = {
    "on_bad_record": "Dataset.from_path(..., on_bad_record=...)",
    "drop_last": "batch(..., drop_last=...)",
    "shuffle": "StaticMixtureWorkSource(...) or Pipeline.shuffle(...)",
    "seed": "StaticMixtureWorkSource(..., seed=...)",
    "exhausted_policy": "StaticMixtureWorkSource(..., exhausted_policy=...)",
    "chunk_size": "StaticMixtureWorkSource(..., chunk_size=...)",
}


def unknown_option(name: str) -> ConfigError:
    """The error for an option name ``options()`` does not know: where it belongs, or the
    nearest known names (a typo)."""
    import difflib

    if name in ELSEWHERE:
        return ConfigError(f"Pipeline.options: {name!r} is not an option of the pipeline; it "
                           f"is set in {ELSEWHERE[name]}")
    near = difflib.get_close_matches(name, list(KNOWN_OPTIONS), n=3, cutoff=0.6)
    hint = (f"; did you mean {' or '.join(repr(n) for n in near)}?" if near
            else "; Pipeline.options() lists them in its documentation")
    return ConfigError(f"Pipeline.options: unknown option {name!r}{hint}")

RUNNERS = ("process", "threads", "inline", "ray")
COORDINATORS = ("auto", "process", "training")


def _choice(text: str, values: tuple[str, ...]) -> str:
    value = text.strip().lower()
    if value not in values:
        raise ValueError(f"must be one of {', '.join(values)}")
    return value


def _runner(text: str) -> str:
    return _choice(text, RUNNERS)


# Options that are counts, with their smallest value (None: any int). ``options()`` takes ints;
# the environment, decimal digits (option_values.py).
INT_OPTIONS: dict[str, int | None] = {
    "num_workers": 0, "max_workers": 1, "micro_batch_size": 1, "prefetch_batches": None,
    "default_stage_prefetch": None, "op_queue_capacity": None, "shm_slots": 1,
    "max_worker_retries": 0, "canonical_replicas": 1, "dp_degree": 1, "dp_group_id": 0,
    "world_size": 1, "global_rank": 0, "flush_every_k_chunks": 0, "mtp_buffer": None,
    "mtp_prefetch": None, "ray_workers": 1,
}

# Options that are byte sizes: an int or a string like "1mb", in options() and the environment.
SIZE_OPTIONS = frozenset({
    "memory_budget",
    "shm_slot_bytes", "ipc_buffer_bytes", "shm_min_item_bytes", "shm_min_new_allocation_bytes",
    "shm_min_forward_bytes", "shm_compact_min_savings_bytes", "shm_max_coalesced_bytes",
    "shm_min_size", "mtp_buffer_bytes",
})


def _env_int(name: str) -> Any:
    return lambda text: parse_env_int(text, "value", INT_OPTIONS[name])


def _env_size(text: str) -> int:
    value = parse_size_bytes(text, "value")
    if value is None:
        raise ValueError("empty size")
    return value


def _workers(text: str) -> int | str:
    """``ZEPHON_NUM_WORKERS``: a count, or ``auto`` (zephon/engine/autotune.py)."""
    return "auto" if text.strip().lower() == "auto" else parse_env_int(text, "value", 0)


# option -> (environment variable, parser)
ENV_OPTIONS: dict[str, tuple[str, Any]] = {
    "runner": ("ZEPHON_RUNNER", _runner),
    "num_workers": ("ZEPHON_NUM_WORKERS", _workers),
    "coordinator": ("ZEPHON_COORDINATOR", lambda text: _choice(text, COORDINATORS)),
    "prefetch_batches": ("ZEPHON_PREFETCH_BATCHES", _env_int("prefetch_batches")),
    "start_method": ("ZEPHON_START_METHOD", str),
    "shm_slot_bytes": ("ZEPHON_SHM_SLOT_BYTES", _env_size),
    "shm_slots": ("ZEPHON_SHM_SLOTS", _env_int("shm_slots")),
    "log_level": ("ZEPHON_LOG_LEVEL", str),
    "micro_batch_size": ("ZEPHON_MICRO_BATCH", _env_int("micro_batch_size")),
    "ray_address": ("ZEPHON_RAY_ADDRESS", str),
    "ray_workers": ("ZEPHON_RAY_WORKERS", _env_int("ray_workers")),
    "progress": ("ZEPHON_PROGRESS", lambda s: s.strip().lower() not in ("", "0", "false", "no")),
    "mixture_tolerance": ("ZEPHON_MIXTURE_TOLERANCE", float),
    "mixture_window": ("ZEPHON_MIXTURE_WINDOW", int),
    "memory_budget": ("ZEPHON_MEMORY_BUDGET", _env_size),
}

# defaults for settings whose reference default is "None -> computed"; num_workers "auto":
# the runner and worker count are measured in the first seconds (zephon/engine/autotune.py)
COMPUTED_DEFAULTS: dict[str, Any] = {
    "num_workers": lambda: "auto",
    "coordinator": lambda: "auto",
    "prefetch_batches": lambda: 8,
    "start_method": lambda: "forkserver",
    "shm_slot_bytes": lambda: 4 << 20,  # a 1024-record block of 2 KB texts is ~2 MiB
    "shm_slots": lambda: 4,
    "log_level": lambda: "WARNING",
    "micro_batch_size": lambda: 1024,
    "progress": lambda: False,
}


@dataclass
class RuntimeOptions:
    """The options a user set explicitly (unset names resolve through env and defaults)."""

    explicit: dict[str, Any] = field(default_factory=dict)

    def update(self, **kw: Any) -> None:
        both = {**self.explicit, **kw}
        if both.get("aggregate_dir") is not None and both.get("aggregate_store") is not None:
            raise ValueError("set aggregate_dir or aggregate_store, not both")
        """Record options; each value is checked here, so a bad one is refused naming it
        (nothing of the call is applied then)."""
        checked: dict[str, Any] = {}
        for name, value in kw.items():
            if name not in KNOWN_OPTIONS:
                raise unknown_option(name)
            checked[name] = self._checked(name, value)
        for name, value in checked.items():
            if name == "mp_context":
                self.explicit["start_method"] = value
            self.explicit[name] = value

    def _checked(self, name: str, value: Any) -> Any:
        if name == "num_workers" and isinstance(value, str) and value.strip().lower() == "auto":
            return "auto"
        if name in INT_OPTIONS:
            return check_int(value, f"options({name}=...)", INT_OPTIONS[name])
        if name in SIZE_OPTIONS:
            return parse_size_bytes(value, f"options({name}=...)")
        if name in ("filter_warn_ratio", "filter_raise_ratio") and value is not None:
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not 0.0 <= float(value) <= 1.0:
                raise ConfigError(f"options({name}=...) must be a share between 0 and 1, or "
                                  f"None, got {value!r}")
            value = float(value)
        if name == "coordinator":
            value = str(value).strip().lower()
            if value not in COORDINATORS:
                raise ConfigError(f"options(coordinator=...) must be one of "
                                  f"{', '.join(COORDINATORS)}, got {value!r}")
        if name == "auto_validation":
            value = str(value).lower()
            if value not in ("strict", "warn", "off"):
                raise ValueError(f"auto_validation must be strict|warn|off, got {value!r}")
        if name == "io_options":
            from zephon.io import StoreOptions

            prev = self.explicit.get("io_options")
            value = (StoreOptions.coerce(prev).merged(value) if prev is not None
                     else StoreOptions.coerce(value))
        if name in ("ray_resources", "ray_runtime_env") and value is not None:
            check = check_ray_resources if name == "ray_resources" else check_ray_runtime_env
            value = check(value)
        if name == "mixture_config":
            from zephon.work.read_config import coerce

            value = coerce(value)  # a bad config fails here, not at the first batch
        if name == "aggregate_store" and value is not None:
            parse_store_uri(value)  # a bad URI fails here, not at the first checkpoint
        return value

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


# -- the Ray runner's options, checked here without importing Ray (engine/ray/config.py) ---

# what ``ray_resources`` may set: the actor options that say where an actor may run
ACTOR_OPTIONS = frozenset({"num_cpus", "num_gpus", "memory", "resources", "accelerator_type",
                           "scheduling_strategy", "label_selector"})


def check_ray_resources(value: Any) -> dict[str, Any]:
    """``options(ray_resources=...)``: a dict of the actor options Ray schedules by."""
    if not isinstance(value, dict):
        raise ConfigTypeError(f"options(ray_resources=...) must be a dict of Ray actor options, "
                              f"got {type(value).__name__}")
    unknown = sorted(set(value) - ACTOR_OPTIONS)
    if unknown:
        raise ConfigError(f"options(ray_resources=...): unknown key(s) {unknown}; "
                          f"known: {sorted(ACTOR_OPTIONS)}")
    for key in ("num_cpus", "num_gpus", "memory"):
        v = value.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0):
            raise ConfigError(f"options(ray_resources=...): {key} must be a number >= 0, "
                              f"got {v!r}")
    if "resources" in value and not isinstance(value["resources"], dict):
        raise ConfigTypeError("options(ray_resources=...): 'resources' must be a dict of custom "
                              "resource amounts")
    return dict(value)


def check_ray_runtime_env(value: Any) -> dict[str, Any]:
    """``options(ray_runtime_env=...)``: a dict whose ``env_vars`` map str to str."""
    if not isinstance(value, dict):
        raise ConfigTypeError(f"options(ray_runtime_env=...) must be a dict, got "
                              f"{type(value).__name__}")
    env = value.get("env_vars", {})
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                            for k, v in env.items()):
        raise ConfigTypeError("options(ray_runtime_env=...): 'env_vars' must map str to str")
    return dict(value)
