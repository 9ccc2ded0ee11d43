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
    shuffle_buffer: int = 8192       # W2/W3 shuffle buffer, in documents
    w3_batches: int = 50             # W3: batches delivered before the checkpoint
    # W3 sweep: checkpoint size/time at these chunk sizes after these many (cheap) batches
    ckpt_chunk_sizes: tuple[int, ...] = (1024, 65_536)
    ckpt_batches: tuple[int, ...] = (1000, 100_000)
    ckpt_max_length: int = 64        # the sweep's pack_flat length: cheap batches
    chunk_size: int = 16_384         # WorkSource chunk size, both Zephons (the reference's default)
    ref_timeout_s: float = 600.0
    formats: tuple[str, ...] = ("jsonl", "parquet")   # W1 runs over both
    w2_format: str = "jsonl"
    extra: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)


FULL = BenchParams()

# --quick: < 5 minutes on 2 shared cores. The shuffle buffer shrinks because W2 must fill it
# (tokenizing buffer_size documents) before its first batch, for every system alike.
QUICK = BenchParams(docs=20_000, shards=8, repeats=3, seconds=1.5, shuffle_buffer=1024,
                    w3_batches=20, ckpt_batches=(1000, 100_000))

# The runner's own test: every workload and system once, in well under a minute. The
# reference refuses a dataset smaller than its per-chunk quota, hence the small chunk size.
TINY = BenchParams(docs=1200, shards=4, repeats=1, seconds=0.3, shuffle_buffer=64, w3_batches=3,
                   chunk_size=1024, ckpt_chunk_sizes=(256,), ckpt_batches=(20,),
                   ref_timeout_s=120.0)


def preset(name: str) -> BenchParams:
    return {"full": FULL, "quick": QUICK, "tiny": TINY}[name]


def with_overrides(p: BenchParams, **kw) -> BenchParams:
    """``p`` with the given fields replaced, ignoring those left as None."""
    return replace(p, **{k: v for k, v in kw.items() if v is not None})
