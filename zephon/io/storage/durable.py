"""Files that survive a crash whole or not at all: temporary file, fsync, atomic rename.

A rename without an fsync before it can leave, after a power cut, the new name pointing at a
file whose data never reached the disk (zero-length or cut short): the cache would then hold a
truncated entry under a finished name. Syncing the directory after the rename makes the new
name itself durable.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

__all__ = ["fsync_path", "write_durably"]


def fsync_path(path: Path | str) -> None:
    """Flush a file's data, or a directory's entries, to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as e:  # a filesystem that cannot sync directories: nothing more to do
        if not os.path.isdir(path) or e.errno not in (errno.EINVAL, errno.EOPNOTSUPP):
            raise
    finally:
        os.close(fd)


def write_durably(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """Replace ``path`` with what ``write(file)`` writes, atomically and durably."""
    tmp = path.with_name(f"{path.name}.part-{os.getpid()}-{threading.get_ident()}")
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
