"""Tensors passed through shared memory between processes on one host (Linux `/dev/shm`).

A request's input travels client → controller → worker. Over sockets a 600 KB image is copied
into the kernel and out again at every hop; at thousands of requests a second that was most of
the controller's time (docs/benchmarks.md, "Fig. 5 on the GPU"). When all three share a
`/dev/shm`, the client writes the input once into a segment it owns and sends a `ShmRef`; the
controller checks and forwards the reference; the worker copies straight from the segment into
its IO buffer.

Who shares what is decided by `shm_domain()`: the kernel's boot id (one per host and boot), the
device number of the `/dev/shm` mount (distinct per tmpfs, so two containers with their own
`/dev/shm` differ) and the user id (segments are readable by their owner only). The controller
advertises its domain to clients and learns each worker's at registration; references only go
where the domain matches, and the controller turns them back into bytes for a worker elsewhere.

Lifetime: the client owns its segments and reuses a slot once the request's response arrives.
A worker can still read a slot after that only for a request already answered without its
result (timed out, its worker lost), whose output nobody will read.
"""

from __future__ import annotations

import collections
import mmap
import os
import re
import secrets
import threading

import msgspec

SHM_DIR = "/dev/shm"
_NAME = re.compile(r"cw-(\d+)-(\d+)-[0-9a-f]+-\d+")  # cw-PIDNS-PID-TOKEN-N
_SLOT_ALIGN = 4096
_SEGMENT_BYTES = 32 << 20  # slots of one size are carved from segments of up to this size
_FIRST_SEGMENT_BYTES = 1 << 20  # and the first of them this small (a one-shot `cw infer`)


class ShmRef(msgspec.Struct, frozen=True, array_like=True):
    """`nbytes` bytes at `offset` in shared-memory segment `segment` (a name under /dev/shm)."""
    segment: str
    offset: int
    nbytes: int


class ShmError(Exception):
    """A reference that cannot be read: unknown or vanished segment, out of bounds."""


def shm_domain() -> str:
    """Identifies the `/dev/shm` this process sees; "" where there is none (not Linux)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        return f"{boot}:{os.stat(SHM_DIR).st_dev}:{os.getuid()}"
    except OSError:
        return ""


class ShmArena:
    """A client's shared-memory slots, grouped by size. `put` copies arrays into free slots and
    returns their references; `free` gives them back. Thread-safe: callers put, the client's I/O
    thread frees. Segments live until `close` (or the process's exit, via `remove_stale` in the
    next client)."""

    def __init__(self, segment_bytes: int = _SEGMENT_BYTES,
                 first_segment_bytes: int = _FIRST_SEGMENT_BYTES):
        self.segment_bytes = segment_bytes
        self.first_segment_bytes = first_segment_bytes
        self._slots: dict[int, int] = collections.defaultdict(int)  # slot size -> slots made
        self._prefix = f"cw-{_pid_namespace()}-{os.getpid()}-{secrets.token_hex(4)}"
        self._lock = threading.Lock()
        self._free: dict[int, list[ShmRef]] = collections.defaultdict(list)  # slot size -> free
        self._maps: dict[str, mmap.mmap] = {}
        self._closed = False

    def put(self, arrays) -> list[ShmRef]:
        """References to copies of `arrays` (C-contiguous numpy arrays). Raises OSError when
        /dev/shm has no room left (the caller then sends the bytes instead)."""
        import numpy as np

        refs = []
        try:
            for a in arrays:
                ref = self._take(a.nbytes)
                refs.append(ref)
                dst = np.frombuffer(self._maps[ref.segment], dtype=np.uint8, count=a.nbytes,
                                    offset=ref.offset)
                dst[:] = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
        except BaseException:
            self.free(refs)
            raise
        return refs

    def free(self, refs) -> None:
        with self._lock:
            for ref in refs:
                self._free[_slot_size(ref.nbytes)].append(ref)

    def _take(self, nbytes: int) -> ShmRef:
        size = _slot_size(nbytes)
        with self._lock:
            if self._closed:
                raise OSError("shared-memory arena closed")
            free = self._free[size]
            if not free:
                self._grow(size, free)
            ref = free.pop()
        return ShmRef(ref.segment, ref.offset, nbytes)

    def _grow(self, size: int, free: list) -> None:
        # Geometric: a client that sends a few requests holds a few slots, one that keeps many
        # in flight gets there in a few segments (every reader maps each segment once).
        made = self._slots[size]
        count = max(4, self.first_segment_bytes // size, made)
        count = max(1, min(count, self.segment_bytes // size))
        self._slots[size] = made + count
        name = f"{self._prefix}-{len(self._maps)}"
        path = os.path.join(SHM_DIR, name)
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        try:
            # allocate now: a tmpfs that is full would otherwise fail later, with SIGBUS, on the
            # first write into a page it cannot back
            os.posix_fallocate(fd, 0, size * count)
            self._maps[name] = mmap.mmap(fd, size * count)
        except BaseException:
            os.unlink(path)
            raise
        finally:
            os.close(fd)
        free.extend(ShmRef(name, i * size, size) for i in range(count))

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for name in self._maps:
                try:
                    os.unlink(os.path.join(SHM_DIR, name))
                except FileNotFoundError:
                    pass
            self._maps.clear()  # mappings close once no array views them
            self._free.clear()
            self._slots.clear()


def _slot_size(nbytes: int) -> int:
    return max(_SLOT_ALIGN, -(-nbytes // _SLOT_ALIGN) * _SLOT_ALIGN)


class ShmReader:
    """Maps other processes' segments on first sight and hands out views of references.

    A mapping keeps its segment's memory even after the client unlinks it (closes its arena or
    is cleaned up after dying): `sweep` drops the mappings of segments that are gone, and a
    long-running reader calls it now and then, or clients that come and go would pin up to
    `max_segments` of their segments in /dev/shm."""

    def __init__(self, max_segments: int = 1024):
        self.max_segments = max_segments
        self._maps: collections.OrderedDict[str, mmap.mmap] = collections.OrderedDict()

    def view(self, ref: ShmRef) -> memoryview:
        m = self._maps.get(ref.segment)
        if m is None:
            m = self._open(ref.segment)
        else:
            self._maps.move_to_end(ref.segment)
        if ref.offset < 0 or ref.nbytes < 0 or ref.offset + ref.nbytes > len(m):
            raise ShmError(f"shared-memory reference {ref.offset}+{ref.nbytes} is outside "
                           f"segment {ref.segment} ({len(m)} bytes)")
        return memoryview(m)[ref.offset:ref.offset + ref.nbytes]

    def _open(self, name: str) -> mmap.mmap:
        if not _NAME.fullmatch(name):
            raise ShmError(f"'{name}' is not a cw shared-memory segment")
        try:
            fd = os.open(os.path.join(SHM_DIR, name), os.O_RDONLY)
        except OSError as e:
            raise ShmError(f"cannot open shared-memory segment {name}: {e.strerror}") from None
        try:
            m = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
        except (OSError, ValueError) as e:
            raise ShmError(f"cannot map shared-memory segment {name}: {e}") from None
        finally:
            os.close(fd)
        self._maps[name] = m
        if len(self._maps) > self.max_segments:
            self._maps.popitem(last=False)  # closed once no view of it is left
        return m

    def sweep(self) -> int:
        """Forget the mappings of segments no longer in /dev/shm; how many. A view handed out
        before stays readable (the mapping closes when the last view goes)."""
        gone = [name for name in self._maps
                if not os.path.exists(os.path.join(SHM_DIR, name))]
        for name in gone:
            del self._maps[name]
        return len(gone)

    def __len__(self) -> int:
        return len(self._maps)


def remove_stale() -> int:
    """Unlink segments left by cw processes that died without closing their arena."""
    removed, namespace = 0, _pid_namespace()
    try:
        names = os.listdir(SHM_DIR)
    except OSError:
        return 0
    for name in names:
        match = _NAME.fullmatch(name)
        # a process id means something only in its own pid namespace (containers may share a
        # /dev/shm and not their pids)
        if match is None or int(match.group(1)) != namespace or _alive(int(match.group(2))):
            continue
        try:
            os.unlink(os.path.join(SHM_DIR, name))
            removed += 1
        except OSError:
            pass
    return removed


def _pid_namespace() -> int:
    try:
        return int(re.sub(r"\D", "", os.readlink("/proc/self/ns/pid")) or 0)
    except OSError:
        return 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True
