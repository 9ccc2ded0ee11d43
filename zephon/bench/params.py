"""How much work each benchmark run does: the presets behind ``--quick``, the default and the
tiny corpus of the runner's own test.

Every run measures about ``seconds`` of steady state (see ``meter.py``), the same rule for every
system, so a slow system costs seconds rather than minutes.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace


@dataclass(frozen=True)
class BenchParams:
    docs: int = 100_000              # documents in the generated corpus (25% code, 75% web)
    shards: int = 20
    repeats: int = 5
    seconds: float = 4.0             # steady state measured by one run
    w2_seconds: float = 8.0          # W2's (and W5's): long, irregular bursts with workers
    shuffle_buffer: int = 8192       # W2/W3 shuffle buffer, in documents
    w3_batches: int = 50             # W3: batches delivered before the checkpoint
    first_workers_only: tuple[str, ...] = ()  # workloads run at the first worker count only
    # W3 sweep: checkpoint size/time at (chunk size, after this many cheap batches)
    ckpt_points: tuple[tuple[int, int], ...] = ((1024, 1000), (65_536, 1000), (1024, 100_000),
                                                (65_536, 100_000))
    ckpt_max_length: int = 256       # the sweep's pack_flat length and batch size: cheap
    ckpt_microbatch: int = 1         # batches (about 0.1 ms each inline)
    padding_batches: int = 1000      # W4 batches (of 8 rows) per packer for the padding table
    chunk_size: int = 16_384         # WorkSource chunk size, both Zephons (the reference's default)
    ref_timeout_s: float = 600.0
    formats: tuple[str, ...] = ("jsonl", "parquet")   # W1 runs over both
    w2_format: str = "jsonl"
    extra: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)

    def seconds_for(self, workload: str) -> float:
        return self.w2_seconds if workload in ("W2", "W3", "W5") else self.seconds


FULL = BenchParams()

# --quick: < 5 minutes on 2 shared cores, corpus generation (~30 s) included. The shuffle buffer
# shrinks because W2 must fill it (tokenizing buffer_size documents) before its first batch, for
# every system alike; W3 and W4 run at the first worker count only (inline: W4's per-core
# figure), and the sweep skips 100k batches at the large chunk size (about 15 s).
QUICK = BenchParams(docs=20_000, shards=8, repeats=3, seconds=0.5, w2_seconds=1.5,
                    shuffle_buffer=256, w3_batches=20, first_workers_only=("W3", "W4"),
                    padding_batches=250,
                    ckpt_points=((1024, 1000), (65_536, 1000), (1024, 100_000)))

# The runner's own test: every workload and system once, in well under a minute. The
# reference refuses a dataset smaller than its per-chunk quota, hence the small chunk size.
TINY = BenchParams(docs=1200, shards=4, repeats=1, seconds=0.3, w2_seconds=0.3,
                   shuffle_buffer=64, w3_batches=3, padding_batches=10,
                   chunk_size=1024, ckpt_points=((256, 20),),
                   ref_timeout_s=120.0)


def preset(name: str) -> BenchParams:
    return {"full": FULL, "quick": QUICK, "tiny": TINY}[name]


def with_overrides(p: BenchParams, **kw) -> BenchParams:
    """``p`` with the given fields replaced, ignoring those left as None."""
    return replace(p, **{k: v for k, v in kw.items() if v is not None})
