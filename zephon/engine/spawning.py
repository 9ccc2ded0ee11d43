"""Starting zephon's processes without running the user's main module again.

``multiprocessing`` (spawn and forkserver alike) tells every child to import the parent's
``__main__`` before it runs its target, so that functions pickled by reference to ``__main__``
can be found. A training script without ``if __name__ == "__main__":`` then builds and iterates
its pipeline a second time inside our coordinator, which starts processes while bootstrapping
and dies. Zephon does not need the user's main module in its processes: operators, work sources
and user functions travel as cloudpickle blobs, which carry ``__main__`` functions and classes
by value. So our children are started without that instruction, and a pipeline that truly
refers to ``__main__`` by name (something cloudpickle could not carry by value) fails with a
message that says so (``user_blob_loads``).

The training process's environment at the time a pipeline starts is handed to the children
too (``environment`` / ``adopt_environment``): a fork server keeps the environment of its own
start, so credentials exported between two pipelines would otherwise never reach the workers.
"""

from __future__ import annotations

import os
import threading
from multiprocessing import spawn

import cloudpickle

from zephon.ops.errors import ZephonError

# what ``spawn.get_preparation_data`` adds so that the child imports the parent's main module
_MAIN_KEYS = ("init_main_from_name", "init_main_from_path", "main_path")
_lock = threading.Lock()  # the patch below is process-wide: one start at a time


def start(proc) -> None:
    """``proc.start()``, with the child told not to import the parent's ``__main__``."""
    with _lock:
        original = spawn.get_preparation_data

        def without_main(name):
            data = original(name)
            for key in _MAIN_KEYS:
                data.pop(key, None)
            return data

        spawn.get_preparation_data = without_main
        try:
            proc.start()
        finally:
            spawn.get_preparation_data = original


def user_blob_loads(blob: bytes, what: str):
    """``cloudpickle.loads`` of user objects shipped to a child, with a clear error when they
    refer to the parent's main module by name."""
    try:
        return cloudpickle.loads(blob)
    except (AttributeError, ImportError) as e:
        if "__main__" not in str(e) and "__mp_main__" not in str(e):
            raise
        raise ZephonError(
            f"zephon could not rebuild the {what} in its worker processes: {e}. Something it "
            "refers to lives in your main script and cannot travel by value; zephon's "
            "processes do not import your main script. Move it into an importable module, "
            "or run the pipeline in this process with options(num_workers=0) or "
            "options(runner='threads')") from e


def environment() -> dict[str, str]:
    """The environment a pipeline's processes should run with: this process's, now."""
    return dict(os.environ)


def adopt_environment(env: dict[str, str] | None) -> None:
    """Make this (child) process's environment the training process's, before it starts its
    own children or opens any storage."""
    if env is None:
        return
    for key in [k for k in os.environ if k not in env]:
        del os.environ[key]
    os.environ.update(env)
