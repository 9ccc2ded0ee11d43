"""The Ray runner's remote side: an actor that runs the stateless stage on pointer blocks.

An actor is a process of its own on whichever node of the cluster Ray placed it. It sets the
worker-stage operators up once (fetch, decode, tokenize, maps, stateless user operators) and
then turns pointer blocks into finished blocks, one call per block. A finished block is returned
as it is: Ray pickles it with protocol 5, so its Arrow buffers and numpy meta columns travel out
of band through the object store (read in place on the driver's node; copied once between
nodes), not through the pickle stream.

Nothing here decides order or retries: the driver numbers blocks, puts results back in lane
order and redoes the work of an actor that died (``ray_runner.py``).
"""

from __future__ import annotations

import os
import socket
import time

from zephon.arrow_memory import use_decode_pool
from zephon.engine.failures import pack_exception
from zephon.engine.lanes.lane import apply_ops
from zephon.engine.observe import metrics
from zephon.engine.process import spawning
from zephon.io.ahead import read_ahead
from zephon.io.formats.jsonl_reader import release_parsed_pages
from zephon.ops.base import OpContext, StageInfo


class StageActor:
    def __init__(self, ops_blob: bytes, index: int, workers: int, threads: int) -> None:
        # like a worker process: the CPUs this actor was given, not a thread per core of the
        # node for every library that starts a pool (the tokenizers' Rust pool)
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false" if threads == 1 else "true")
        os.environ.setdefault("RAYON_NUM_THREADS", str(threads))
        read_ahead.disable()  # blocks of many lanes arrive in turn: the readers' guesses miss
        release_parsed_pages()  # as in a worker process: parsed shard pages are not kept
        self.index = index
        self.ops = None
        self.setup_error: tuple[bytes, str] | None = None
        try:
            use_decode_pool()
            ops = spawning.user_blob_loads(ops_blob, "operators")
            ctx = OpContext(StageInfo(0, "ray", 0), worker_id=index, runner="ray",
                            num_workers=workers)
            for op in ops:
                op.setup(ctx)
            self.ops = ops
        except Exception as e:  # reported by ``where``: retrying elsewhere will not help
            self.setup_error = pack_exception(e)

    def where(self) -> dict:
        """Where this actor runs, and whether its operators could be set up."""
        import ray

        return {"node_id": ray.get_runtime_context().get_node_id(),
                "ip": ray.util.get_node_ip_address(), "host": socket.gethostname(),
                "pid": os.getpid(), "setup_error": self.setup_error}

    def run(self, block) -> tuple:
        """("done", finished block or None) | ("fail", packed exception) | ("fatal", packed
        setup error), then the operator counters since the last call, and the wall and CPU
        time the call took (CPU below wall: the node's cores are shared with other work)."""
        if self.setup_error is not None:
            return ("fatal", self.setup_error, {}, 0, 0)
        t0, c0 = time.perf_counter_ns(), time.process_time_ns()
        try:
            out: tuple = ("done", apply_ops(self.ops, block))
        except Exception as e:
            out = ("fail", pack_exception(e))
        busy, cpu = time.perf_counter_ns() - t0, time.process_time_ns() - c0
        return (*out, metrics.LOCAL.take_delta(), busy, cpu)
