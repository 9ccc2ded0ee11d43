"""Shared-memory segments and slot pools: the memory that blocks travel through.

Names. Every segment of one pipeline instance is called ``<prefix><tag>`` with the prefix
``zephon_<training pid>_<uuid8>_``, so two pipelines (or two runs under pytest-xdist, or a
restarted job) can never collide, and a leak check is ``ls /dev/shm | grep zephon``.

Lifetime. The process that creates a segment maps it and announces its name over a pipe; the
one peer that reads it maps it and unlinks the name at once. From then on the memory lives
exactly as long as some mapping of it does, and nothing is left in /dev/shm whatever later
happens to either process (SIGKILL included). Only a name that was created but not yet mapped
by its reader can leak: each process remembers the names it created (``created``) and unlinks
them on its exit paths, and the training process and the coordinator ``sweep`` the whole prefix
when they close, which also catches the names of processes that were killed outright.

Why not ``multiprocessing.shared_memory``: before 3.13 every ``SharedMemory``, attached ones
too, registers with the resource tracker, which unlinks it a second time at exit and warns about
"leaked" segments; and ``SharedMemory.close()`` raises ``BufferError`` while numpy or Arrow
views exist, whereas handing the user views that may outlive the pipeline is the point. A raw
``mmap`` stays valid as long as any view of it and needs no close.

Space. Segments are reserved with ``posix_fallocate``, so a small /dev/shm (docker's default is
64 MiB) fails at start with a message that says what to change, instead of a SIGBUS mid-run.
"""

from __future__ import annotations

import errno
import mmap
import os
import weakref
from collections import defaultdict, deque

import numpy as np

from zephon.errors import ShmSpaceError

try:
    import _posixshmem
except ImportError:  # pragma: no cover - non-POSIX platforms
    _posixshmem = None

PAGE = mmap.PAGESIZE
SHM_DIR = "/dev/shm"

created: set[str] = set()  # names this process created and has not seen unlinked


def available() -> bool:
    return _posixshmem is not None


def round_up(n: int, to: int = PAGE) -> int:
    return max(to, (int(n) + to - 1) // to * to)


def _map(fd: int, size: int) -> mmap.mmap:
    # MAP_POPULATE maps every page now: the first block through a slot pays no page faults
    flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
    return mmap.mmap(fd, size, flags=flags, prot=mmap.PROT_READ | mmap.PROT_WRITE)


def create(name: str, size: int) -> mmap.mmap:
    """A new zero-filled segment of ``size`` bytes (rounded up to pages), mapped read-write."""
    size = round_up(size)
    fd = _posixshmem.shm_open("/" + name, os.O_CREAT | os.O_EXCL | os.O_RDWR, mode=0o600)
    created.add(name)
    try:
        os.ftruncate(fd, size)
        _reserve(fd, size, name)
        return _map(fd, size)
    except BaseException:
        unlink(name)
        raise
    finally:
        os.close(fd)


def _reserve(fd: int, size: int, name: str) -> None:
    if not hasattr(os, "posix_fallocate"):
        return
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.ENOMEM, errno.EFBIG):
            free = _free_bytes()
            raise ShmSpaceError(
                f"shared memory: cannot reserve {size / 2**20:.1f} MiB for {name} "
                f"({free / 2**20:.0f} MiB free in {SHM_DIR}); lower ZEPHON_SHM_SLOT_BYTES, "
                "ZEPHON_SHM_SLOTS, ZEPHON_PREFETCH_BATCHES or num_workers, or give the "
                "container more shared memory (docker run --shm-size=...)") from e
        if e.errno not in (errno.EINVAL, errno.EOPNOTSUPP):
            raise


def _free_bytes() -> int:
    try:
        st = os.statvfs(SHM_DIR)
        return st.f_bavail * st.f_frsize
    except OSError:
        return -1


def attach(name: str) -> mmap.mmap:
    """Map a peer's segment and unlink its name: from now on only the mappings keep it."""
    fd = _posixshmem.shm_open("/" + name, os.O_RDWR, mode=0o600)
    try:
        mm = _map(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)
    unlink(name)
    return mm


def unlink(name: str) -> None:
    created.discard(name)
    try:
        _posixshmem.shm_unlink("/" + name)
    except FileNotFoundError:  # the peer (or a sweep) got there first
        pass


def unlink_created() -> None:
    for name in list(created):
        unlink(name)


def sweep(prefix: str) -> list[str]:
    """Unlink every segment of one pipeline instance still named in /dev/shm."""
    try:
        names = [n for n in os.listdir(SHM_DIR) if n.startswith(prefix)]
    except OSError:  # no /dev/shm to list (macOS): the per-process ``created`` sets serve
        return []
    for n in names:
        unlink(n)
    return names


class SlotPool:
    """The slots a process writes into: one segment per slot, so one slot can grow alone.

    A slot grows (a fresh, larger segment under a new name replaces it) when a block does not
    fit; the reader learns the new name from the next descriptor of that slot.
    """

    def __init__(self, prefix: str, tag: str, count: int, slot_bytes: int) -> None:
        self.prefix = prefix
        self.tag = tag
        self.generation = 0
        self.maps: list[mmap.mmap] = []
        self.names: list[str] = []
        for i in range(count):
            self.names.append(self._name(i))
            self.maps.append(create(self.names[-1], slot_bytes))

    def _name(self, i: int) -> str:
        self.generation += 1
        return f"{self.prefix}{self.tag}s{i}g{self.generation}"

    def __len__(self) -> int:
        return len(self.maps)

    def view(self, i: int) -> memoryview:
        return memoryview(self.maps[i])

    def capacity(self, i: int) -> int:
        return len(self.maps[i])

    def grow(self, i: int, need: int) -> str:
        """Replace slot ``i`` by one of at least ``need`` bytes; returns the new name."""
        name = self._name(i)
        # doubling keeps a slowly growing record size from re-allocating on every block
        self.maps[i] = create(name, max(round_up(need), 2 * len(self.maps[i])))
        self.names[i] = name
        return name


class SlotViews:
    """The reading side of a peer's ``SlotPool``: one mapping per slot, remapped on growth."""

    def __init__(self) -> None:
        self.maps: dict[int, mmap.mmap] = {}

    def attach(self, i: int, name: str) -> None:
        # the old mapping is dropped, not closed: a view the user still holds keeps it alive
        self.maps[i] = attach(name)

    def attach_all(self, names: list[str]) -> None:
        for i, name in enumerate(names):
            self.attach(i, name)

    def map(self, i: int) -> mmap.mmap:
        return self.maps[i]


class PrivateBuffers:
    """Process-private copies of frames, in reused memory.

    When the coordinator copies a worker result out of its slot (because the worker's other
    slots are all held as views), fresh memory for every copy would cost a page fault and the
    kernel's zeroing per page — more than the copy itself. A buffer comes back here once the
    last view of its copy has died (the copy's root is a view over a ``memoryview`` of the
    buffer, so every view made from it keeps that root, and only it, alive; the next ``copy``
    collects the deaths), and sizes are rounded to powers of two to be found again.
    """

    def __init__(self, keep: int) -> None:
        self.keep = keep  # free buffers kept per size, beyond that they go back to the OS
        self.free: dict[int, list[np.ndarray]] = defaultdict(list)
        self._watch = _DeathWatch()  # copies lent out -> (size, buffer)

    def copy(self, src, n: int) -> np.ndarray:
        for cap, buf in self._watch.dead():
            if len(self.free[cap]) < self.keep:
                self.free[cap].append(buf)
        cap = 1 << max(12, (n - 1).bit_length())
        pool = self.free[cap]
        buf = pool.pop() if pool else np.empty(cap + 64, dtype=np.uint8)
        shift = (-buf.ctypes.data) % 64  # Arrow reads its buffers in place when aligned
        root = np.frombuffer(memoryview(buf)[shift : shift + n], dtype=np.uint8)
        root[:] = np.frombuffer(src, dtype=np.uint8, count=n)
        self._watch.add(root, (cap, buf))
        return root


class _DeathWatch:
    """Which watched objects have died, for whoever asks next.

    A plain ``weakref.ref`` whose callback is a C function (``deque.append``): when the object
    dies no Python code runs. A Python-level finalizer (``weakref.finalize``) runs bytecode at
    whatever point the last view is dropped, and a Ctrl-C that arrives during it is reported as
    "Exception ignored" and lost: the training loop went on as if nothing had been pressed.
    """

    def __init__(self) -> None:
        self._refs: dict[int, tuple[weakref.ref, object]] = {}  # id(ref) -> (ref, value)
        self._died: deque = deque()  # the refs whose object died (appended from any thread)

    def add(self, obj, value) -> None:
        ref = weakref.ref(obj, self._died.append)
        self._refs[id(ref)] = (ref, value)  # also keeps the ref alive: else no callback

    def dead(self) -> list:
        """The values of the objects that died since the last call."""
        out = []
        while self._died:
            out.append(self._refs.pop(id(self._died.popleft()))[1])
        return out


class Leases:
    """Slots lent out as zero-copy views: a slot comes back when the last view of it dies.

    ``root`` is the uint8 array a frame was read from; every view made from it keeps it alive
    (see ``wire``), so a weak reference on it is exact. Deaths are noted without running Python
    code (``_DeathWatch``); the owner collects them with ``returned``.
    """

    def __init__(self) -> None:
        self.out: set = set()
        self._watch = _DeathWatch()

    def __len__(self) -> int:
        return len(self.out)

    def lend(self, root: np.ndarray, key) -> None:
        self.out.add(key)
        self._watch.add(root, key)

    def returned(self) -> list:
        keys = self._watch.dead()
        self.out.difference_update(keys)
        return keys
