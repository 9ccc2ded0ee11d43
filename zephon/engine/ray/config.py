"""The Ray runner's settings, checked and resolved without importing Ray.

``options(runner="ray", ray_address=..., ray_workers=N, ray_resources={...},
ray_runtime_env={...})``. ``ray_resources`` are the actor options Ray schedules by (CPUs, GPUs,
memory, custom resources, a scheduling strategy); by default one CPU per actor, spread over the
nodes. ``ray_workers`` unset means one actor per ``num_cpus`` of the cluster's CPUs, counted when
the pipeline starts.

Storage settings reach the actors in two ways: ``options(io_options=...)`` travel with the
datasets inside the operators (pickled), and the driver's ``ZEPHON_*`` environment variables
(``ZEPHON_CACHE_DIR``, ``ZEPHON_CACHE_LIMIT``, ``ZEPHON_RG_CACHE_BYTES``, ...) are handed to them
through the actors' ``runtime_env``, so a node's shard cache is where the driver said (each node
has its own). A ``ray_runtime_env`` of the user's is merged over that, its ``env_vars`` winning.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from zephon.options import check_ray_resources, check_ray_runtime_env

DEFAULT_ACTOR_OPTIONS: dict[str, Any] = {"num_cpus": 1, "scheduling_strategy": "SPREAD"}
# driver variables that choose the runner itself: meaningless (or recursive) in an actor
NOT_FORWARDED = frozenset({"ZEPHON_RUNNER", "ZEPHON_RAY_ADDRESS", "ZEPHON_RAY_WORKERS"})


def forwarded_environment(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The driver's ``ZEPHON_*`` settings that the actors should run with."""
    environ = os.environ if environ is None else environ
    return {k: v for k, v in environ.items()
            if k.startswith("ZEPHON_") and k not in NOT_FORWARDED}


@dataclass(frozen=True)
class RayConfig:
    address: str | None  # None: Ray's own rule (RAY_ADDRESS, a local cluster, or a new one)
    workers: int | None  # None: the cluster's CPUs over the CPUs each actor asks for
    actor_options: dict[str, Any]
    runtime_env: dict[str, Any] | None
    inflight: int  # blocks sent to one actor and not returned yet, at most (backpressure)
    max_retries: int  # deaths of actors holding one micro-batch before the run fails
    deterministic: bool

    @classmethod
    def from_options(cls, options) -> RayConfig:
        get = options.get
        actor = {**DEFAULT_ACTOR_OPTIONS, **check_ray_resources(get("ray_resources") or {})}
        user_env = check_ray_runtime_env(get("ray_runtime_env") or {})
        env_vars = {**forwarded_environment(), **user_env.get("env_vars", {})}
        runtime_env = {**user_env, "env_vars": env_vars} if env_vars else (user_env or None)
        workers = get("ray_workers")
        address = get("ray_address")
        return cls(address=str(address) if address else None,
                   workers=int(workers) if workers is not None else None,
                   actor_options=actor, runtime_env=runtime_env,
                   inflight=max(1, int(get("shm_slots"))),
                   max_retries=int(get("max_worker_retries")),
                   deterministic=bool(get("deterministic")))

    @property
    def cpus_per_actor(self) -> float:
        return float(self.actor_options.get("num_cpus") or 0)

    def threads_per_actor(self) -> int:
        """Threads a library may start per actor (tokenizers' pool): the CPUs it was given."""
        return max(1, int(self.cpus_per_actor))

    def describe(self) -> str:
        workers = self.workers if self.workers is not None else "auto (cluster CPUs)"
        return (f"address={self.address or 'auto'} actors={workers} "
                f"per_actor={self.actor_options} inflight_per_actor={self.inflight}")
