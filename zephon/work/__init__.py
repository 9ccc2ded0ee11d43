"""The curriculum: which samples are read, in which order, by which lane.

``StaticMixtureWorkSource`` mixes datasets in fixed proportions (``MixtureSpec``), optionally in
token units (``TokenEstimation``), and hands out ``WorkChunk``s of sample pointers. Every chunk
is a pure function of the configuration and its index, so lanes, checkpoints and restores never
replay history.
"""

from zephon.work.base import SampleId, WorkChunk, WorkSource
from zephon.work.mixture import MixtureSpec
from zephon.work.read_config import ComponentOrder, MixtureReadConfig, MixtureReadMode
from zephon.work.static_mixture import StaticMixtureWorkSource
from zephon.work.token_estimation import TokenEstimation

__all__ = [
    "ComponentOrder",
    "MixtureReadConfig",
    "MixtureReadMode",
    "MixtureSpec",
    "SampleId",
    "StaticMixtureWorkSource",
    "TokenEstimation",
    "WorkChunk",
    "WorkSource",
]
