"""Errors that cross a boundary: a result that is an error, and exceptions packed in one
process (a worker, the coordinator, a Ray actor) to be raised in another.

A worker-stage error is a ``Failure`` result: raised when its lane reaches it, not before, so the
stream ends exactly where the inline engine would raise. It travels packed (``pack_exception``:
the exception pickled, with its traceback as text) and is unpacked only where it is raised to
the user, with the remote traceback as its cause.
"""

from __future__ import annotations

import pickle
import traceback

import cloudpickle

from zephon.errors import EngineError, ZephonError


class Failure:
    """A result that is an error: raised when its lane reaches it, not before."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error



class RemoteTraceback(Exception):
    """The traceback of an exception raised in another process, shown as its cause."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return f'\n"""\n{self.text}"""'


class RemoteError(ZephonError):
    """An exception from another process, still packed: forwarded as is, unpacked only where
    it is raised to the user."""

    def __init__(self, packed: tuple[bytes, str]) -> None:
        super().__init__("exception in another zephon process")
        self.packed = packed


def pack_exception(e: BaseException) -> tuple[bytes, str]:
    text = "".join(traceback.format_exception(type(e), e, e.__traceback__))
    try:
        blob = cloudpickle.dumps(e)
        pickle.loads(blob)  # some exceptions pickle but cannot be rebuilt
    except Exception:
        blob = cloudpickle.dumps(EngineError(f"{type(e).__name__}: {e}"))
    return blob, text


def unpack_exception(packed: tuple[bytes, str]) -> BaseException:
    blob, text = packed
    e = pickle.loads(blob)
    e.__cause__ = RemoteTraceback(text)
    return e
