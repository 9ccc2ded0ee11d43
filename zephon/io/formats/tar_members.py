"""The member index of a WebDataset tar shard: which bytes of the file make which record.

Built once per shard from the tar headers (the data is seeked over, never read) and kept in the
node cache next to line indexes (``lineidx/<key>.npy``, removed with the shard's cache entry),
so opening a shard again, in any process of the node, reads one small file. Records follow
``webdataset``'s own reader exactly (``tariterators.tar_file_iterator`` + ``group_by_keys``):
regular files only; ``__*__`` metadata members skipped; a member ``dir/name.ext1.ext2`` has key
``dir/name`` and field ``ext1.ext2`` (lower-cased); consecutive members of one key make one
record; a field given twice in one record is an error (there, a ``DataError`` naming the row).
"""

from __future__ import annotations

import os
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from zephon.io.errors import DataError
from zephon.io.formats.jsonl_lines import load_index, save_index
from zephon.io.storage.cache import entry_key
from zephon.io.storage.local_copy import Resources
from zephon.io.storage.shard_ref import ShardRef

__all__ = ["MemberIndex", "member_index", "scan_members"]

_META = re.compile(r"__[^/]*__($|/)")
_BASE_EXT = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")


@dataclass
class MemberIndex:
    """Members that make records, in file order (so each record's members are consecutive)."""

    offsets: np.ndarray  # int64: where each member's data starts in the file
    sizes: np.ndarray  # int64: its bytes
    record_of: np.ndarray  # int64: the record (row) it belongs to
    field_of: np.ndarray  # int64: its field, a position in ``fields``
    fields: list[str]  # field names (extensions) in order of first appearance
    keys: list[str]  # each record's ``__key__``

    @property
    def rows(self) -> int:
        return len(self.keys)

    def encode(self) -> np.ndarray:
        """One int64 array (the cache's ``.npy`` form): counts, the columns, the names."""
        blob = "\n".join(self.fields + self.keys).encode()
        blob += b"\0" * (-len(blob) % 8)
        head = np.array([len(self.offsets), len(self.keys), len(self.fields), len(blob)],
                        dtype=np.int64)
        return np.concatenate([head, self.offsets, self.sizes, self.record_of, self.field_of,
                               np.frombuffer(blob, dtype=np.int64)])

    @classmethod
    def decode(cls, arr: np.ndarray) -> MemberIndex:
        m, r, f, nblob = (int(x) for x in arr[:4])
        cols = [arr[4 + i * m:4 + (i + 1) * m] for i in range(4)]
        blob = arr[4 + 4 * m:].tobytes()[:nblob].rstrip(b"\0").decode()
        names = blob.split("\n") if f + r else []
        if len(names) != f + r or any(len(c) != m for c in cols):
            raise ValueError("member index does not add up")
        return cls(*cols, names[:f], names[f:])


def scan_members(path: str, *, dataset: str, shard: str) -> MemberIndex:
    """Read the headers of a tar file (seeking over the data)."""
    offsets, sizes, record_of, field_of = [], [], [], []
    fields: dict[str, int] = {}
    keys: list[str] = []
    seen: set[str] = set()  # fields of the current record
    size = os.path.getsize(path)
    try:
        with tarfile.open(path, "r:") as tar:
            for info in tar:
                name = info.name
                if not info.isreg() or not name:
                    continue
                if "/" not in name and name.startswith("__") and name.endswith("__"):
                    continue
                if _META.match(name):
                    continue
                m = _BASE_EXT.match(name)
                if m is None:
                    continue
                key, ext = m.group(1), m.group(2).lower()
                if not keys or key != keys[-1]:
                    keys.append(key)
                    seen = set()
                if ext in seen:
                    raise DataError(f"member {name!r}: field {ext!r} given twice for key "
                                    f"{key!r}", dataset=dataset, shard=shard, row=len(keys))
                seen.add(ext)
                if info.offset_data + info.size > size:
                    raise DataError(f"member {name!r} ends past the end of the file (truncated "
                                    "tar?)", dataset=dataset, shard=shard, row=len(keys))
                offsets.append(info.offset_data)
                sizes.append(info.size)
                record_of.append(len(keys) - 1)
                field_of.append(fields.setdefault(ext, len(fields)))
            end = tar.offset  # past the last member tarfile took; what follows must be padding
        if end < size and _has_data(path, end, size):
            raise DataError(f"{size - end} bytes after record {len(keys)} are no complete tar "
                            "member (truncated or corrupt tar?)", dataset=dataset, shard=shard,
                            row=len(keys) + 1)
        if size - end < tarfile.BLOCKSIZE:
            # tarfile takes a clean end of file for the end of the archive: a shard cut at a
            # member boundary would read as a shorter one. Every tar writer ends the archive
            # with zero blocks; without them, members after ``end`` may be lost.
            raise DataError(f"the file ends after record {len(keys)} ({size} bytes) without "
                            "the tar's end-of-archive blocks (truncated tar?)",
                            dataset=dataset, shard=shard, row=len(keys) + 1)
    except tarfile.TarError as e:
        raise DataError(f"not a readable tar file after {len(keys)} record(s): {e}",
                        dataset=dataset, shard=shard, row=len(keys) + 1) from e

    def col(values: list[int]) -> np.ndarray:
        return np.asarray(values, dtype=np.int64)

    return MemberIndex(col(offsets), col(sizes), col(record_of), col(field_of), list(fields),
                       keys)


def _has_data(path: str, start: int, end: int) -> bool:
    """Whether bytes ``start:end`` of the file hold anything but the zero blocks that end a tar."""
    with open(path, "rb") as f:
        f.seek(start)
        while start < end:
            chunk = f.read(min(1 << 20, end - start))
            if not chunk:
                return False
            if chunk.count(0) != len(chunk):
                return True
            start += len(chunk)
    return False


def member_index(ref: ShardRef, path: str, res: Resources) -> MemberIndex:
    """The shard's member index from the node cache, or scanned and stored there. ``path`` is
    the local (decoded) tar file; the entry is keyed on it and on the shard's identity."""
    st = os.stat(path)
    if ref.location.is_local:
        key = entry_key("tar-members", os.path.abspath(path), str(st.st_size),
                        str(st.st_mtime_ns))
    else:
        key = ref.remote_key
    where: Path = res.cache.lineidx / f"{key}.npy"
    found, _ = load_index(where)
    if found is not None:
        try:
            ix = MemberIndex.decode(found)
            if not len(ix.offsets) or int((ix.offsets + ix.sizes).max()) <= st.st_size:
                return ix
        except (ValueError, UnicodeDecodeError):
            pass  # a damaged entry: scanned again and replaced
    ix = scan_members(path, dataset=ref.dataset, shard=ref.display)
    save_index(where, ix.encode())
    return ix
