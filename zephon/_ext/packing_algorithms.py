"""The packing algorithms: one list, owned by the packing kernel.

The kernel (``packing.pyx``) and its numpy twin (``packing_np.py``) take an algorithm by name
and map it to their own codes; everything else (``tokens/packer.py``, the ``PackingAlgorithm``
type of ``pack_flat`` / ``pack_sequences``, the checkpoint checks) reads the names from here.
Adding an algorithm is: its name here, its branch in both kernels, its rules in
``tokens/packer.py``.
"""

from __future__ import annotations

from typing import Literal, get_args

PackingAlgorithm = Literal["first_fit", "best_fit", "wrap", "best_fit_wrap"]
"""The ``algorithm`` of ``pack_flat`` / ``pack_sequences``."""

ALGORITHMS: tuple[str, ...] = get_args(PackingAlgorithm)
# algorithms that never split a record and keep up to ``num_bins`` rows open; the others cut
# a token stream into rows (one open row)
WHOLE_RECORDS: tuple[str, ...] = ("first_fit", "best_fit")
# the one that keeps a candidate pool (``candidate_pool_size``, ``max_candidate_age``)
POOLED: tuple[str, ...] = ("best_fit_wrap",)


def code(name: str) -> int:
    """The kernel's number for an algorithm (its place in ``ALGORITHMS``).

    Raises:
        ValueError: Not an algorithm.
    """
    if name not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {ALGORITHMS}, got {name!r}")
    return ALGORITHMS.index(name)
