"""The shared part of the salvage readers: file mapping, connections, typestore, decompression.

A `Salvage` maps each file of a damaged bag, runs the format's `scan` once on opening (that
collects the connections and proves the structure) and deserializes messages with the types
the file itself declares. Subclasses: mcap.McapScan, ros1.Ros1Scan, sqlite.SqliteScan.
"""

from __future__ import annotations

import bz2
import contextlib
import mmap
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rosbags.typesys import Stores, get_types_from_idl, get_types_from_msg, get_typestore
from rosbags.typesys.store import Typestore

from simconform.bag.codec import zstd
from simconform.bag.messages import TYPESTORE
from simconform.stamps import format_seconds

Buffer = bytes | mmap.mmap


class NotABag(Exception):
    """The salvage scan found no valid file structure (bad magic, no connections)."""


@dataclass
class Damage:
    """A stretch of a bag file whose messages cannot be trusted and were not read: a chunk
    whose CRC does not match, that does not decompress, or records whose framing is broken.
    start_ns/end_ns: the log-time span its messages lie in (None: unknown, i.e. from the
    start or to the end); messages: topic -> how many it held, where the file says so."""

    file: str
    where: str
    reason: str
    start_ns: int | None = None
    end_ns: int | None = None
    messages: dict[str, int] = field(default_factory=dict)

    def text(self, origin_ns: int | None = None) -> str:
        """One line; with `origin_ns` (the run's t = 0) the span reads as seconds into the run,
        else as full log stamps (a 2024 epoch at 9 significant digits hid the span)."""

        def sec(t: int | None) -> str:
            if t is None:
                return "?"
            if origin_ns is not None:
                return f"{(t - origin_ns) / 1e9:.3f}"
            return format_seconds(t)

        held = ", ".join(f"{n} on {t}" for t, n in sorted(self.messages.items()))
        when = "t = " if origin_ns is not None else ""
        return (
            f"{self.file}, {self.where}: {self.reason}; messages logged {when}"
            f"{sec(self.start_ns)} to {sec(self.end_ns)} s"
            + (" into the run" if origin_ns is not None else "")
            + (f" ({held})" if held else "")
        )


RELEASE_BYTES = 8 << 20  # a scan hands back the pages it has passed every this many bytes


def release(buf: Buffer, done: int, upto: int) -> int:
    """Drop the pages of buf[done:upto] from this process's memory once RELEASE_BYTES have
    been passed (a read-only map: touched again, they are read again from the file); a scan
    of a large bag otherwise keeps the whole file resident. Returns the new `done`."""
    if upto - done < RELEASE_BYTES or not isinstance(buf, mmap.mmap):
        return done
    end = upto - upto % mmap.PAGESIZE
    if hasattr(mmap, "MADV_DONTNEED"):  # not on Windows
        buf.madvise(mmap.MADV_DONTNEED, done, end - done)
    return end


class Salvage:
    """Sequential reader of a damaged file: conns id -> (topic, msgtype, def format, def)."""

    format = ""
    is_ros1 = False

    def __init__(self, files: list[Path], prescan: bool = True) -> None:
        self.files = files
        self.maps = []
        self.handles = []
        for f in files:
            fh = open(f, "rb")  # noqa: SIM115 - closed by close()
            self.handles.append(fh)
            size = os.fstat(fh.fileno()).st_size
            self.maps.append(mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) if size else b"")
        self.conns: dict[int, tuple[str, str, str, str]] = {}
        self.stop_reason = ""
        self.clean_end = False  # the scan reached the file's regular end of data
        self.damaged: list[Damage] = []  # skipped stretches (MCAP: chunks that fail a check)
        self.notes: list[str] = []  # checks that failed outside the messages (MCAP CRCs)
        self.chunks = {"total": 0, "with_crc": 0}
        self.last_log_ns: int | None = None
        self._store: Typestore | None = None
        try:
            if prescan:
                n, last = 0, None  # the scan collects connections and checks the structure
                for _cid, log_ns, _raw in self.scan():
                    n, last = n + 1, log_ns if last is None else max(last, log_ns)
                self.count, self.last_log_ns = n, last
            else:  # the connections from an index; the checks come with the one scan
                self.index()
            if not self.conns:
                raise NotABag("no connection records found")
        except BaseException:
            self.close()
            raise

    def scan(self) -> Iterator[tuple[int, int, bytes]]:
        raise NotImplementedError

    def index(self) -> None:
        """Fill `conns` without a scan, where the file has an index (else leave it empty)."""

    def deserialize(self, raw: bytes, msgtype: str) -> Any:
        if self._store is None:
            self._store = self._typestore()
        if self.is_ros1:
            return self._store.deserialize_ros1(raw, msgtype)
        return self._store.deserialize_cdr(raw, msgtype)

    def _typestore(self) -> Typestore:
        typs: dict = {}
        for _t, msgtype, fmt, text in self.conns.values():
            with contextlib.suppress(Exception):
                if fmt == "msg" and text:
                    typs.update(get_types_from_msg(text, msgtype))
                elif fmt == "idl" and text:
                    typs.update(get_types_from_idl(text))
        if not typs:
            return get_typestore(Stores.ROS1_NOETIC) if self.is_ros1 else TYPESTORE
        store = get_typestore(Stores.EMPTY)
        store.register(typs)
        return store

    def close(self) -> None:
        for m in self.maps:
            if isinstance(m, mmap.mmap):
                m.close()
        for fh in self.handles:
            fh.close()


class Cut(Exception):
    """A record runs past the end of the file."""


def decompress(data: bytes, method: str, partial: bool = False) -> bytes:
    """Decompress a chunk; a partial one (cut off) gives what its complete blocks hold."""
    if method in ("", "none"):
        return data
    if method == "zstd":
        return zstd.ZstdDecompressor().decompress(data) if partial else zstd.decompress(data)
    if method == "lz4":
        from lz4.frame import LZ4FrameDecompressor  # type: ignore[import-untyped]
        from lz4.frame import decompress as lz4_decompress

        return LZ4FrameDecompressor().decompress(data) if partial else lz4_decompress(data)
    if method == "bz2":
        return bz2.BZ2Decompressor().decompress(data) if partial else bz2.decompress(data)
    raise ValueError(f"unknown compression {method!r}")
