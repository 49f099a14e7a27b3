"""Capture results come back from the workers through shared memory, not the result pipe.

A capture worker returns a batch of truth (a demo camera batch: ten 640 x 480 frames, 9 MB)
through the executor's pipe, and multiprocessing's receiving end reads a large message 64 KB
at a time into a fresh buffer the size of what is left: 2,000 frames and their noisy copies
cost the run's process 3.6 CPU-s and 11 s of wall to receive, against 0.56 CPU-s through
shared memory (`python bench/transfer.py`, docs/resources.md).
So each task is given a slot of one shared segment: the worker pickles its result with
protocol 5, places the arrays' buffers (the out-of-band ones numpy offers) in the slot, and
the rest too when it is 64 KB or more (bytes that pickle keeps in band: a demo batch's JPEG
frames); the pipe carries only where they are. The run's process copies them out while it
unpickles, and the slot is free once the result is in. A buffer that does not fit, a task
given no slot, or a machine whose /dev/shm cannot hold the segment, falls back to the pipe:
same objects either way.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import queue
import resource
from multiprocessing import shared_memory

SMALL = 64 << 10  # a buffer smaller than this goes through the pipe with the rest

_hosted: dict[str, shared_memory.SharedMemory] = {}  # this process's segments, by name
_attached: dict[str, shared_memory.SharedMemory] = {}  # segments a worker writes into


class Ring:
    """The run's side: one segment of `count` slots of `size` bytes, and which are free."""

    def __init__(self, count: int, size: int) -> None:
        self.size = size
        self.shm: shared_memory.SharedMemory | None = None
        self.free: queue.SimpleQueue[int] = queue.SimpleQueue()
        if count < 1 or size < SMALL or not _room(count * size):
            return
        try:
            self.shm = shared_memory.SharedMemory(create=True, size=count * size)
        except OSError:
            return
        _hosted[self.shm.name] = self.shm
        for i in range(count):
            self.free.put(i)

    @property
    def name(self) -> str | None:
        return None if self.shm is None else self.shm.name

    def take(self) -> int | None:
        """A free slot, or None (the result then comes through the pipe)."""
        try:
            return self.free.get_nowait()
        except queue.Empty:
            return None

    def give(self, slot: int) -> None:
        """Slot `slot` is free again (its result was copied out)."""
        self.free.put(slot)

    def close(self) -> None:
        if self.shm is None:
            return
        _hosted.pop(self.shm.name, None)
        with contextlib.suppress(OSError, BufferError):
            self.shm.close()
        with contextlib.suppress(OSError):
            self.shm.unlink()
        self.shm = None


def _room(nbytes: int) -> bool:
    """Whether /dev/shm has room for the segment: a full tmpfs would kill the worker writing
    into it (SIGBUS), so a small one (a container's 64 MB default) keeps the pipe. A file size
    limit (ulimit -f) below the segment keeps it too (Python 3.11's SharedMemory, failing to
    size it, unregisters it unregistered: a traceback from the resource tracker)."""
    soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    if soft != resource.RLIM_INFINITY and soft < nbytes:
        return False
    try:
        st = os.statvfs("/dev/shm")
    except OSError:
        return False
    return st.f_bavail * st.f_frsize >= 2 * nbytes


def attach(name: str | None) -> None:
    """In a worker: map the run's segment (at the pool's start)."""
    if name is not None and name not in _attached:
        _attached[name] = shared_memory.SharedMemory(name=name)


class Slotted:
    """A worker's result bound for slot `slot` of segment `name`."""

    def __init__(self, value, name: str, slot: int, size: int) -> None:
        self.value, self.name, self.slot, self.size = value, name, slot, size

    def __reduce__(self):
        mem = _attached[self.name].buf
        off = self.slot * self.size
        end = off + self.size
        spans: list[tuple[int, int]] = []

        def place(buf: pickle.PickleBuffer) -> bool:
            nonlocal off
            view = buf.raw()
            n = view.nbytes
            if n < SMALL or off + n > end:
                return True  # in band
            mem[off : off + n] = view
            spans.append((off, n))
            off += n
            return False

        data = pickle.dumps(self.value, protocol=5, buffer_callback=place)
        if len(data) >= SMALL and off + len(data) <= end:
            # the rest too (a demo batch's ten JPEG frames, 530 KB): through the pipe it
            # would be read 64 KB at a time into fresh buffers, as the arrays were
            mem[off : off + len(data)] = data
            return _unpack_placed, (self.name, off, len(data), tuple(spans))
        return _unpack, (self.name, data, tuple(spans))


def _unpack(name: str, data, spans: tuple[tuple[int, int], ...]):
    """In the run's process: the result, its buffers copied out of the slot."""
    mem = _hosted[name].buf
    return pickle.loads(data, buffers=[bytearray(mem[o : o + n]) for o, n in spans])


def _unpack_placed(name: str, at: int, size: int, spans: tuple[tuple[int, int], ...]):
    """`_unpack` for a result whose pickle is in the slot too (at `at`, `size` bytes)."""
    with _hosted[name].buf[at : at + size] as data:  # released at once: the segment can close
        return _unpack(name, data, spans)
