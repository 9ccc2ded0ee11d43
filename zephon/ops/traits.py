"""``zephon.ops.traits``: ``OpTraits`` under the reference library's module path (it lives in
``zephon.ops.base``), so operators written for it import unchanged."""

from zephon.ops.base import OpTraits

__all__ = ["OpTraits"]
