"""Replay backend: verify a bag recorded from any other simulator or a real robot.

The source bag (ROS 2 sqlite3 or MCAP, or ROS 1) is read through rosbags' AnyReader with a
topic map (simconform.replay_map). Ground truth comes either from /truth/<topic> topics in the
bag (our own layout) or is recomputed: the ground-truth pose stream is interpolated (cubic in
position, rotation spline in orientation, so that the IMU's second differences are smooth) and
the reference backend casts the exact lidar returns at each scan's stamp and pose and derives
IMU, GNSS and odometry truth from the same motion.

The result is an ordinary run folder in our own layout, so the verifier, the reports and
`simconform compare` treat it like any other run:

- published messages are re-recorded with the source's log (receive) time, so latency is
  log time - header.stamp as in our runs; clouds are re-organized into the spec's rings x
  columns in the sensor frame (unorganized clouds are paired with truth rays by direction);
- truth is logged at its capture stamp on /truth/<spec topic>;
- the bag is read twice: a scan validates everything before DIR exists (bad input is one
  UserError, nothing written), then the run is built in a temporary folder next to DIR and
  moved into place.

A source file cut off mid-write (the summary of an MCAP file, the b-tree of a sqlite db, the
index of a ROS 1 bag lost) cannot be opened by rosbags; it is then read by a sequential scan
of its records (sqlite: of its leaf pages) up to the last complete message, and run.json says
"complete": false with the reason.
"""

from __future__ import annotations

import bz2
import contextlib
import datetime as dt
import itertools
import math
import mmap
import os
import shutil
import struct
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pymap3d
from rosbags.highlevel import AnyReader
from rosbags.typesys import Stores, get_types_from_idl, get_types_from_msg, get_typestore
from rosbags.typesys.base import Nodetype
from rosbags.typesys.msg import normalize_msgtype
from rosbags.typesys.store import Typestore
from scipy.interpolate import CubicSpline
from scipy.spatial import cKDTree
from scipy.spatial.transform import Rotation, RotationSpline

from simconform import __version__
from simconform.adapters.base import (
    BackendUnavailable,
    GnssTruth,
    ImuTruth,
    LidarTruth,
    OdomTruth,
    SensorBackend,
)
from simconform.adapters.reference import ReferenceBackend
from simconform.bag import messages
from simconform.bag.messages import TYPESTORE, cloud_arrays, stamp_ns
from simconform.bag.writer import BagRecorder, TumWriter
from simconform.errors import UserError
from simconform.frames import Pose, wrap_angle
from simconform.outdir import write_json_atomic
from simconform.pipeline.noise import se2_increment
from simconform.progress import progress_bar
from simconform.provenance import git_commit, sha256
from simconform.replay_map import (
    POSE_TYPES,
    SENSOR_TYPES,
    JsonPose,
    ReplayMap,
    SensorTopic,
    TfPose,
    check_against_spec,
    load_map,
)
from simconform.spec import ImuSpec, LidarSpec, Spec, load_spec
from simconform.world import World, load_world

Buffer = bytes | mmap.mmap
CLOCK_WARN_S = 60.0  # |log time - stamp| beyond this: the bag's clocks are not comparable
RESIDUAL_SAMPLE = 200_000  # angular residuals kept for the pairing quantiles


class ReplayBackend(SensorBackend):
    """The registry's entry for "replay": its data come from a recorded bag, not from an
    engine driven along a trajectory, so `simconform run --backend replay` points the user to
    `simconform replay` (which this module implements) instead of failing obscurely."""

    name = "replay"
    HINT = (
        "the replay backend verifies a recorded bag: run `simconform replay BAG --map MAP.yaml "
        "--out DIR` (see docs/replay.md)"
    )

    def open(self, world: World, spec: Spec) -> None:
        raise BackendUnavailable(self.HINT)

    def capture(self, sensor: str, t_ns: int, motion: Any) -> LidarTruth:
        raise BackendUnavailable(self.HINT)


# --------------------------------------------------------------------------- source bags


class _NotABag(Exception):
    """The salvage scan found no valid file structure (bad magic, no connections)."""


@dataclass
class SourceConnection:
    topic: str
    msgtype: str


class SourceBag:
    """A source bag opened with rosbags, or salvaged by a sequential scan when rosbags cannot
    open it. `messages` yields (topic, msgtype, log_ns, raw) in log order (salvage: file
    order) and, when the read stops early, sets `stop_reason` instead of raising."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.stop_reason: str | None = None
        self.open_error: str | None = None
        self._reader: AnyReader | None = None
        self._salvage: _Salvage | None = None
        if not path.exists():
            raise UserError(path, "bag", str(path), _BAG_KINDS)
        try:
            reader = AnyReader([path], default_typestore=_default_store(path))
            reader.open()
            self._reader = reader
            self.format = _format_of(path)
            self.read_with = "rosbags"
            self.connections = [
                SourceConnection(c.topic, normalize_msgtype(c.msgtype)) for c in reader.connections
            ]
        except Exception as exc:  # rosbags raises many types for unreadable bags
            self.open_error = f"{type(exc).__name__}: {exc}"
            try:
                self._salvage = _salvage_for(path)
            except _NotABag as why:
                raise UserError(
                    path, "bag", str(path), f"{_BAG_KINDS}; not readable ({self.open_error}; {why})"
                ) from None
            self.format = self._salvage.format
            self.read_with = "salvage scan"
            self.connections = [
                SourceConnection(t, m) for t, m, _f, _d in self._salvage.conns.values()
            ]

    def types(self) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for c in self.connections:
            out.setdefault(c.topic, set()).add(c.msgtype)
        return out

    def messages(self, topics: set[str]) -> Iterator[tuple[str, str, int, bytes]]:
        self.stop_reason = None
        if self._reader is not None:
            conns = [c for c in self._reader.connections if c.topic in topics]
            if not conns:
                return
            it = self._reader.messages(connections=conns)
            while True:
                try:
                    conn, log_ns, raw = next(it)
                except StopIteration:
                    return
                except Exception as exc:  # a damaged chunk inside a bag rosbags could open
                    self.stop_reason = f"read stopped: {type(exc).__name__}: {exc}"
                    return
                yield conn.topic, normalize_msgtype(conn.msgtype), log_ns, bytes(raw)
        else:
            assert self._salvage is not None
            s = self._salvage
            for cid, log_ns, raw in s.scan():
                topic, msgtype, _f, _d = s.conns[cid]
                if topic in topics:
                    yield topic, msgtype, log_ns, raw
            if not s.clean_end:
                self.stop_reason = f"{self.open_error}; {s.stop_reason}"

    def deserialize(self, raw: bytes, msgtype: str) -> Any:
        if self._reader is not None:
            return self._reader.deserialize(raw, msgtype)
        assert self._salvage is not None
        return self._salvage.deserialize(raw, msgtype)

    def close(self) -> None:
        if self._reader is not None:
            with contextlib.suppress(Exception):
                self._reader.close()
        if self._salvage is not None:
            self._salvage.close()


_BAG_KINDS = "expected a rosbag2 folder (MCAP or sqlite3), an .mcap file or a ROS 1 .bag file"


def _default_store(path: Path) -> Typestore:
    return get_typestore(Stores.ROS1_NOETIC) if path.suffix == ".bag" else TYPESTORE


def _format_of(path: Path) -> str:
    if path.suffix == ".bag":
        return "rosbag1"
    if path.suffix == ".mcap" or any(path.glob("*.mcap")):
        return "rosbag2 (mcap)"
    return "rosbag2 (sqlite3)"


def _salvage_for(path: Path) -> _Salvage:
    if path.is_dir():
        files = sorted(path.glob("*.mcap")) or sorted(path.glob("*.db3"))
        if not files:
            raise _NotABag("no .mcap or .db3 file in the folder")
    else:
        files = [path]
    kind = ".bag" if files[0].name.endswith(".bag.active") else files[0].suffix
    if kind == ".mcap":
        return _McapScan(files)
    if kind == ".db3":
        return _SqliteScan(files)
    if kind == ".bag":
        return _Ros1Scan(files)
    raise _NotABag(f"unknown file kind {kind!r}")


class _Salvage:
    """Sequential reader of a damaged file: conns id -> (topic, msgtype, def format, def)."""

    format = ""
    is_ros1 = False

    def __init__(self, files: list[Path]) -> None:
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
        self._store: Typestore | None = None
        try:
            self.count = sum(1 for _ in self.scan())  # collects connections, checks structure
            if not self.conns:
                raise _NotABag("no connection records found")
        except BaseException:
            self.close()
            raise

    def scan(self) -> Iterator[tuple[int, int, bytes]]:
        raise NotImplementedError

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


class _Cut(Exception):
    """A record runs past the end of the file."""


def _decompress(data: bytes, method: str, partial: bool = False) -> bytes:
    """Decompress a chunk; a partial one (cut off) gives what its complete blocks hold."""
    if method in ("", "none"):
        return data
    if method == "zstd":
        try:
            from compression import zstd  # type: ignore[import-not-found]
        except ImportError:
            from backports import zstd  # type: ignore[import-not-found,no-redef]
        return zstd.ZstdDecompressor().decompress(data) if partial else zstd.decompress(data)
    if method == "lz4":
        from lz4.frame import LZ4FrameDecompressor, decompress  # type: ignore[import-untyped]

        return LZ4FrameDecompressor().decompress(data) if partial else decompress(data)
    if method == "bz2":
        return bz2.BZ2Decompressor().decompress(data) if partial else bz2.decompress(data)
    raise ValueError(f"unknown compression {method!r}")


_MCAP_MAGIC = b"\x89MCAP0\r\n"


class _McapScan(_Salvage):
    """MCAP records in file order (schemas, channels and messages, also inside chunks)."""

    format = "rosbag2 (mcap)"

    def scan(self) -> Iterator[tuple[int, int, bytes]]:
        self.stop_reason, self.clean_end = "end of data", False
        for path, buf in zip(self.files, self.maps):
            if bytes(buf[:8]) != _MCAP_MAGIC:
                raise _NotABag(f"{path.name} does not start with the MCAP magic")
            schemas: dict[int, tuple[str, str, str]] = {}
            ended = yield from self._records(buf, 8, len(buf), schemas, top=True)
            if not ended:
                self.stop_reason = (
                    f"{path.name} cut off after byte {len(buf)}: read up to the last complete "
                    "message"
                )
                return
        self.stop_reason = "data section complete (the summary section is damaged)"
        self.clean_end = True

    def _records(
        self, buf: Buffer, pos: int, end: int, schemas: dict, top: bool = False
    ) -> Iterator:
        """Messages of the records in buf[pos:end]; returns True at DataEnd or Footer, or at
        the end of a chunk, and False where the data stops early. A chunk cut off by the end
        of the file still gives the complete records at its start."""
        while pos < end:
            if pos + 9 > end:
                return False
            op = buf[pos]
            (length,) = struct.unpack_from("<Q", buf, pos + 1)
            avail = min(length, end - pos - 9)
            body = bytes(buf[pos + 9 : pos + 9 + avail])
            cut = avail < length
            pos += 9 + length
            if cut and op != 0x06:
                return False
            try:
                if op == 0x03:  # schema
                    sid, p = struct.unpack_from("<H", body)[0], 2
                    name, p = _mcap_str(body, p)
                    enc, p = _mcap_str(body, p)
                    (n,) = struct.unpack_from("<I", body, p)
                    schemas[sid] = (name, enc, body[p + 4 : p + 4 + n].decode())
                elif op == 0x04:  # channel
                    cid, sid = struct.unpack_from("<HH", body)
                    topic, _p = _mcap_str(body, 4)
                    name, enc, text = schemas.get(sid, ("", "", ""))
                    fmt = {"ros2msg": "msg", "ros2idl": "idl"}.get(enc, "")
                    self.conns.setdefault(cid, (topic, normalize_msgtype(name), fmt, text))
                elif op == 0x05:  # message
                    cid, _seq, log_ns = struct.unpack_from("<HIQ", body)
                    if cid in self.conns:
                        yield cid, log_ns, body[22:]
                elif op == 0x06:  # chunk: start, end, size u64, crc u32, compression, records
                    method, p = _mcap_str(body, 28)
                    (n,) = struct.unpack_from("<Q", body, p)
                    inner = _decompress(body[p + 8 : p + 8 + n], method, partial=cut)
                    ok = yield from self._records(inner, 0, len(inner), schemas)
                    if cut or not ok:
                        return False
                elif op in (0x0F, 0x02):  # data end, footer
                    return True
            except (_Cut, struct.error, ValueError, UnicodeDecodeError, OSError):
                return False
            except Exception:  # a damaged compressed chunk (zstd/lz4 errors have many types)
                return False
        return not top


def _mcap_str(body: bytes, p: int) -> tuple[str, int]:
    (n,) = struct.unpack_from("<I", body, p)
    if p + 4 + n > len(body):
        raise _Cut
    return body[p + 4 : p + 4 + n].decode(), p + 4 + n


_ROS1_MAGIC = b"#ROSBAG V2.0\n"


class _Ros1Scan(_Salvage):
    """ROS 1 bag v2.0 records in file order (connections and messages inside chunks)."""

    format = "rosbag1"
    is_ros1 = True

    def scan(self) -> Iterator[tuple[int, int, bytes]]:
        self.stop_reason = "end of file"
        for path, buf in zip(self.files, self.maps):
            if bytes(buf[: len(_ROS1_MAGIC)]) != _ROS1_MAGIC:
                raise _NotABag(f"{path.name} does not start with the ROS 1 bag magic")
            if not (yield from self._records(buf, len(_ROS1_MAGIC), len(buf))):
                self.stop_reason = (
                    f"{path.name} cut off after byte {len(buf)}: read up to the last complete "
                    "message"
                )
                return

    def _records(self, buf: Buffer, pos: int, end: int) -> Iterator:
        """Messages of the records in buf[pos:end]; False where the data stops early (a
        chunk cut off by the end of the file still gives its complete records)."""
        while pos < end:
            if pos + 4 > end:
                return False
            (hlen,) = struct.unpack_from("<I", buf, pos)
            if pos + 8 + hlen > end:
                return False
            head = bytes(buf[pos + 4 : pos + 4 + hlen])
            (dlen,) = struct.unpack_from("<I", buf, pos + 4 + hlen)
            start = pos + 8 + hlen
            data = bytes(buf[start : min(start + dlen, end)])
            cut = start + dlen > end
            pos = start + dlen
            try:
                h = _ros1_fields(head)
                op = h.get("op", b"\x00")[0]
                if cut and op != 0x05:
                    return False
                if op == 0x05:  # chunk
                    inner = _decompress(data, h["compression"].decode(), partial=cut)
                    ok = yield from self._records(inner, 0, len(inner))
                    if cut or not ok:
                        return False
                elif op == 0x07:  # connection
                    (cid,) = struct.unpack("<I", h["conn"])
                    d = _ros1_fields(data)
                    topic = h["topic"].decode()
                    msgtype = normalize_msgtype(d["type"].decode())
                    text = d.get("message_definition", b"").decode()
                    self.conns.setdefault(cid, (topic, msgtype, "msg", text))
                elif op == 0x02:  # message data
                    (cid,) = struct.unpack("<I", h["conn"])
                    sec, nsec = struct.unpack("<II", h["time"])
                    if cid in self.conns:
                        yield cid, sec * 1_000_000_000 + nsec, data
            except (struct.error, KeyError, ValueError, UnicodeDecodeError, OSError):
                return False
            except Exception:  # damaged compressed chunk
                return False
        return True


def _ros1_fields(head: bytes) -> dict[str, bytes]:
    out, p = {}, 0
    while p + 4 <= len(head):
        (n,) = struct.unpack_from("<I", head, p)
        item = head[p + 4 : p + 4 + n]
        if len(item) != n or b"=" not in item:
            raise ValueError("bad ROS 1 header field")
        key, value = item.split(b"=", 1)
        out[key.decode()] = value
        p += 4 + n
    return out


class _SqliteScan(_Salvage):
    """rosbag2 sqlite3 db read page by page: the topics table through its b-tree, the
    messages from every table leaf page whose cells have the messages table's shape
    (NULL rowid alias, topic_id, timestamp, data), so rows survive the loss of the interior
    pages that a cut file loses first (they are allocated last)."""

    format = "rosbag2 (sqlite3)"

    def scan(self) -> Iterator[tuple[int, int, bytes]]:
        if not hasattr(self, "_rows"):
            self._index()
        for ts, _rowid, fi, page, off in self._rows:
            db = self._dbs[fi]
            try:
                rec = db.record_at(page, off)
            except (_Cut, ValueError, struct.error):
                continue
            yield int(rec[1]), ts, rec[3]
        self.stop_reason = self._reason

    def _index(self) -> None:
        self._dbs = [_Sqlite(buf, f) for f, buf in zip(self.files, self.maps)]
        rows = []
        cut = []
        for fi, db in enumerate(self._dbs):
            for name, typ, fmt, text, tid in db.topics():
                self.conns.setdefault(tid, (name, normalize_msgtype(typ), fmt, text))
            for page, off, rowid, rec in db.leaf_cells(4):
                shaped = rec[0] is None and isinstance(rec[1], int) and isinstance(rec[2], int)
                if shaped and isinstance(rec[3], bytes) and rec[1] in self.conns:
                    rows.append((rec[2], rowid, fi, page, off))
            if db.truncated:
                cut.append(db.name)
        rows.sort()
        self._rows = rows
        self.clean_end = not cut
        self._reason = (
            f"{', '.join(cut)} cut off: read the {len(rows)} messages whose pages are complete"
            if cut
            else f"read {len(rows)} messages from the leaf pages"
        )


class _Sqlite:
    """Just enough of the SQLite file format to read table rows from a damaged file."""

    def __init__(self, buf: Buffer, path: Path) -> None:
        self.buf, self.name = buf, path.name
        if bytes(buf[:16]) != b"SQLite format 3\x00":
            raise _NotABag(f"{path.name} is not an SQLite database")
        (ps,) = struct.unpack_from(">H", buf, 16)
        self.ps = 65536 if ps == 1 else ps
        self.usable = self.ps - buf[20]
        self.npages = len(buf) // self.ps
        (declared,) = struct.unpack_from(">I", buf, 28)
        self.truncated = len(buf) % self.ps != 0 or declared > self.npages

    def page(self, n: int) -> bytes:
        if not 1 <= n <= self.npages:
            raise _Cut
        return bytes(self.buf[(n - 1) * self.ps : n * self.ps])

    def leaf_cells(self, ncols: int | None = None, pages: Iterable[int] | None = None) -> Iterator:
        """(page, cell offset, rowid, record) of table leaf pages (all pages by default)."""
        for n in pages if pages is not None else range(1, self.npages + 1):
            try:
                data = self.page(n)
            except _Cut:
                continue
            hdr = 100 if n == 1 else 0
            if data[hdr] != 0x0D:
                continue
            (count,) = struct.unpack_from(">H", data, hdr + 3)
            for i in range(count):
                try:
                    (off,) = struct.unpack_from(">H", data, hdr + 8 + 2 * i)
                    rowid, rec = self._cell(data, off, ncols)
                except (_Cut, ValueError, struct.error, IndexError):
                    continue
                if rec is not None:
                    yield n, off, rowid, rec

    def record_at(self, page: int, off: int) -> list | None:
        return self._cell(self.page(page), off, None)[1]

    def _cell(self, data: bytes, off: int, ncols: int | None) -> tuple[int, list | None]:
        size, p = _varint(data, off)
        rowid, p = _varint(data, p)
        u = self.usable
        x = u - 35
        if size <= x:
            local = size
        else:
            m = (u - 12) * 32 // 255 - 23
            k = m + (size - m) % (u - 4)
            local = k if k <= x else m
        payload = data[p : p + local]
        if len(payload) != local:
            raise _Cut
        if local < size:
            (nxt,) = struct.unpack_from(">I", data, p + local)
            parts = [payload]
            have = local
            while have < size:
                if nxt == 0:
                    raise _Cut
                ov = self.page(nxt)
                (nxt,) = struct.unpack_from(">I", ov, 0)
                chunk = ov[4 : 4 + min(u - 4, size - have)]
                parts.append(chunk)
                have += len(chunk)
            payload = b"".join(parts)
        return rowid, _record(payload, ncols)

    def tree_rows(self, root: int) -> Iterator[tuple[int, list]]:
        """(rowid, record) of a table b-tree, skipping pages past the end of the file."""
        stack = [root]
        while stack:
            n = stack.pop()
            try:
                data = self.page(n)
            except _Cut:
                continue
            hdr = 100 if n == 1 else 0
            kind = data[hdr]
            if kind == 0x0D:
                for _pg, _off, rowid, rec in self.leaf_cells(None, [n]):
                    yield rowid, rec
            elif kind == 0x05:
                (count,) = struct.unpack_from(">H", data, hdr + 3)
                kids = [struct.unpack_from(">I", data, hdr + 8)[0]]
                for i in range(count):
                    (off,) = struct.unpack_from(">H", data, hdr + 12 + 2 * i)
                    kids.append(struct.unpack_from(">I", data, off)[0])
                stack.extend(reversed(kids))

    def topics(self) -> Iterator[tuple[str, str, str, str, int]]:
        roots, defs = {}, {}
        for _rowid, rec in self.tree_rows(1):
            if len(rec) >= 4 and rec[0] == "table" and isinstance(rec[3], int):
                roots[rec[1]] = rec[3]
        if "message_definitions" in roots:
            for _rowid, rec in self.tree_rows(roots["message_definitions"]):
                if len(rec) >= 4 and isinstance(rec[1], str):
                    fmt = {"ros2msg": "msg", "ros2idl": "idl"}.get(str(rec[2]), "")
                    defs[rec[1]] = (fmt, rec[3] if isinstance(rec[3], str) else "")
        if "topics" not in roots:
            raise _NotABag(f"{self.name} has no readable topics table")
        for rowid, rec in self.tree_rows(roots["topics"]):
            if len(rec) >= 3 and isinstance(rec[1], str) and isinstance(rec[2], str):
                fmt, text = defs.get(rec[2], ("", ""))
                yield rec[1], rec[2], fmt, text, rowid


def _varint(data: bytes, p: int) -> tuple[int, int]:
    v = 0
    for i in range(9):
        b = data[p + i]
        if i == 8:
            return (v << 8) | b, p + 9
        v = (v << 7) | (b & 0x7F)
        if b < 0x80:
            return v, p + i + 1
    raise ValueError("bad varint")  # pragma: no cover


_INT_SIZES = {1: 1, 2: 2, 3: 3, 4: 4, 5: 6, 6: 8}


def _record(payload: bytes, ncols: int | None) -> list | None:
    hlen, p = _varint(payload, 0)
    types = []
    while p < hlen:
        t, p = _varint(payload, p)
        types.append(t)
    if ncols is not None and len(types) != ncols:
        return None
    out: list[Any] = []
    p = hlen
    for t in types:
        if t == 0:
            out.append(None)
        elif t in _INT_SIZES:
            n = _INT_SIZES[t]
            out.append(int.from_bytes(payload[p : p + n], "big", signed=True))
            p += n
        elif t == 7:
            out.append(struct.unpack_from(">d", payload, p)[0])
            p += 8
        elif t in (8, 9):
            out.append(t - 8)
        elif t >= 12:
            n = (t - 12) // 2
            raw = payload[p : p + n]
            if len(raw) != n:
                raise _Cut
            out.append(raw if t % 2 == 0 else raw.decode("utf-8", "replace"))
            p += n
        else:
            raise ValueError("reserved serial type")
    return out


# --------------------------------------------------------------------------- motion


class PoseStream:
    """Ground-truth motion of base_link in the map frame from sampled poses.

    Cubic spline in position and a rotation spline in orientation, so velocity and the IMU's
    second differences are continuous: linear interpolation would put all acceleration into
    spikes at the samples. Implements the backends' Motion protocol.
    """

    def __init__(self, times_ns: np.ndarray, positions: np.ndarray, rotations: Rotation) -> None:
        self.times_ns = np.asarray(times_ns, dtype=np.int64)
        self.positions = np.asarray(positions, dtype=float)
        self.rotations = rotations
        self.start_ns = int(self.times_ns[0])
        self.end_ns = int(self.times_ns[-1])
        rel = (self.times_ns - self.start_ns) * 1e-9
        self._pos = CubicSpline(rel, self.positions, axis=0)
        self._rot = RotationSpline(rel, rotations)

    def pose_at(self, t_ns: int | np.ndarray) -> Pose:
        t = np.asarray(t_ns, dtype=np.int64)
        if t.size and (t.min() < self.start_ns or t.max() > self.end_ns):
            raise ValueError(f"time outside ground truth [{self.start_ns}, {self.end_ns}] ns")
        rel = (t - self.start_ns) * 1e-9
        return Pose(np.asarray(self._pos(rel)), self._rot(rel))


# --------------------------------------------------------------------------- lidar pairing


@dataclass
class PairStats:
    """How well received points fell onto the spec's rays, over all scans of one lidar."""

    method: str
    received: int = 0
    nonfinite: int = 0
    out_of_bin: int = 0
    duplicates: int = 0
    paired: int = 0
    _sum: float = 0.0
    _sum_sq: float = 0.0
    _max: float = 0.0
    _kept: list = field(default_factory=list)
    _stride: int = 1
    _n_kept: int = 0

    def add_residuals(self, angle: np.ndarray) -> None:
        if angle.size == 0:
            return
        self._sum += float(angle.sum())
        self._sum_sq += float(angle @ angle)
        self._max = max(self._max, float(angle.max()))
        part = angle[:: self._stride]
        self._kept.append(part)
        self._n_kept += len(part)
        if self._n_kept > RESIDUAL_SAMPLE:  # decimate: a fixed-size, evenly spread sample
            joined = np.concatenate(self._kept)[::2]
            self._kept, self._n_kept, self._stride = [joined], len(joined), self._stride * 2

    def summary(self, ring_bin_deg: float | None, column_bin_deg: float) -> dict:
        finite = self.received - self.nonfinite
        judged = self.paired + self.duplicates
        res = np.concatenate(self._kept) if self._kept else np.zeros(0)
        deg = float(np.rad2deg(1.0))

        def q(p: float) -> float | None:
            return float(np.quantile(res, p)) * deg if res.size else None

        return {
            "method": self.method,
            "points_received": self.received,
            "points_nonfinite": self.nonfinite,
            "points_paired": self.paired,
            "points_duplicate_ray": self.duplicates,
            "points_beyond_half_bin": self.out_of_bin,
            "share_beyond_half_bin": self.out_of_bin / finite if finite else None,
            "residual_deg": {
                "mean": self._sum / judged * deg if judged else None,
                "rms": math.sqrt(self._sum_sq / judged) * deg if judged else None,
                "p50": q(0.5),
                "p95": q(0.95),
                "max": self._max * deg if judged else None,
            },
            "ring_bin_deg": ring_bin_deg,
            "column_bin_deg": column_bin_deg,
        }


class RayGrid:
    """One scan's rays (rings x columns unit directions in the sensor frame at the scan stamp)
    with the spec's nominal layout, for pairing points with rays by direction."""

    @staticmethod
    def from_truth(points: np.ndarray, directions: np.ndarray, elevations: np.ndarray) -> RayGrid:
        """Rays as seen from the sensor origin at the scan stamp: the direction of each truth
        point where there is one, else the ray's own direction.

        With a rolling shutter the sensor moves during the sweep, so a ray starts away from
        that origin and a near point's direction from it differs from the ray's by the
        parallax (degrees at 1 m). Noise along the ray moves a point by only a tiny angle
        about the truth point, so the truth point's direction is the one to match.
        """
        rng = np.linalg.norm(points, axis=-1)
        ok = np.isfinite(rng) & (rng > 0)
        dirs = np.where(ok[..., None], points / np.where(ok, rng, 1.0)[..., None], directions)
        return RayGrid(dirs, elevations)

    def __init__(self, rays: np.ndarray, elevations: np.ndarray) -> None:
        self.rays = rays
        self.rings, self.cols = rays.shape[:2]
        self.elev = elevations
        self.col_bin = 2 * np.pi / self.cols
        self.ray_el = np.arcsin(np.clip(rays[..., 2], -1.0, 1.0))
        self.ray_az = np.arctan2(rays[..., 1], rays[..., 0])
        self._tree: cKDTree | None = None
        gaps = np.diff(elevations)
        if self.rings > 1:
            self.half_up = np.append(gaps, gaps[-1]) / 2
            self.half_down = np.insert(gaps, 0, gaps[0]) / 2
        else:  # a single ring has no ring spacing: use the column bin
            self.half_up = self.half_down = np.array([self.col_bin / 2])

    def nearest(self, d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(ring, column) of the ray nearest in angle to each unit direction d.

        With the nominal grid this is the nearest ring in elevation and the nearest column in
        azimuth. A rolling shutter under motion moves a scan's rays by up to several bins for
        near points (parallax), which no local search around the nominal bin follows
        reliably; a k-d tree over the scan's own rays finds the global nearest one.
        """
        if self._tree is None:
            self._tree = cKDTree(self.rays.reshape(-1, 3))
        _dist, cell = self._tree.query(d)
        return np.divmod(np.asarray(cell, dtype=np.int64), self.cols)

    def residuals(
        self, d: np.ndarray, r: np.ndarray, c: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """(angle between each direction and its ray, whether it lies within half a bin)."""
        ray = self.rays[r, c]
        cross = np.linalg.norm(np.cross(d, ray), axis=1)
        angle = np.arctan2(cross, np.einsum("ij,ij->i", d, ray))
        d_el = np.arcsin(np.clip(d[:, 2], -1.0, 1.0)) - self.ray_el[r, c]
        d_az = wrap_angle(np.arctan2(d[:, 1], d[:, 0]) - self.ray_az[r, c])
        half_el = np.where(d_el > 0, self.half_up[r], self.half_down[r])
        inside = (np.abs(d_el) <= half_el) & (np.abs(d_az) <= self.col_bin / 2)
        return angle, inside


def pair_by_direction(
    points: np.ndarray, values: np.ndarray, grid: RayGrid, stats: PairStats
) -> tuple[np.ndarray, np.ndarray]:
    """Organize an unorganized cloud (N, 3, sensor frame) onto the grid's rays.

    Each point goes to the ray nearest its direction (elevation -> nearest ring, azimuth ->
    nearest column, for the rays where the scan's motion put them). Points more than half a
    bin from their ray are left out (they belong to no ray of the spec), and of several
    points on one ray the closest in direction is kept. Returns the (rings, columns, 3) cloud
    with NaN for rays without a point, and the values per ray.
    """
    R, C = grid.rings, grid.cols
    stats.received += len(points)
    rng = np.linalg.norm(points, axis=1)
    ok = np.isfinite(rng) & (rng > 0)
    stats.nonfinite += int(len(points) - ok.sum())
    p, v = points[ok], values[ok]
    d = p / rng[ok, None]
    br, bc = grid.nearest(d)
    angle, inside = grid.residuals(d, br, bc)
    stats.out_of_bin += int((~inside).sum())
    cells = (br * C + bc)[inside]
    angle, p, v = angle[inside], p[inside], v[inside]
    order = np.lexsort((angle, cells))
    first = np.ones(len(order), dtype=bool)
    first[1:] = cells[order][1:] != cells[order][:-1]
    sel = order[first]
    stats.duplicates += int(len(order) - len(sel))
    stats.paired += len(sel)
    stats.add_residuals(angle[sel])
    cloud = np.full((R * C, 3), np.nan)
    cloud[cells[sel]] = p[sel]
    vals = np.zeros(R * C)
    vals[cells[sel]] = v[sel]
    return cloud.reshape(R, C, 3), vals.reshape(R, C)


def index_residuals(cloud: np.ndarray, grid: RayGrid, stats: PairStats) -> np.ndarray:
    """Statistics of an organized cloud paired by index; returns it with NaN for no point."""
    flat = cloud.reshape(-1, 3)
    stats.received += len(flat)
    rng = np.linalg.norm(flat, axis=1)
    ok = np.isfinite(rng) & (rng > 0)
    stats.nonfinite += int(len(flat) - ok.sum())
    idx = np.flatnonzero(ok)
    r, c = np.divmod(idx, grid.cols)
    angle, inside = grid.residuals(flat[ok] / rng[ok, None], r, c)
    stats.out_of_bin += int((~inside).sum())
    stats.paired += len(idx)
    stats.add_residuals(angle)
    return np.where(ok[:, None], flat, np.nan).reshape(cloud.shape)


# --------------------------------------------------------------------------- messages


def to_ours(msg: Any, typename: str) -> Any:
    """A message from any type store (ROS 1 or another ROS 2 distro) as the same type in ours,
    field by field (ROS 1's header.seq has no place in ROS 2 and is dropped)."""
    _consts, fields = TYPESTORE.fielddefs[typename]
    kwargs = {name: _convert(getattr(msg, name), node, detail) for name, (node, detail) in fields}
    return TYPESTORE.types[typename](**kwargs)


def _convert(value: Any, node: Nodetype, detail: Any) -> Any:
    if node == Nodetype.NAME:
        return to_ours(value, detail)
    if node == Nodetype.BASE:
        return value
    (sub_node, sub_detail), _n = detail
    if sub_node == Nodetype.NAME:
        return [to_ours(v, sub_detail) for v in value]
    if sub_node == Nodetype.BASE and sub_detail[0] == "string":
        return list(value)
    return np.asarray(value)


def _xyz(v: Any) -> np.ndarray:
    return np.array([v.x, v.y, v.z], dtype=float)


def _quat(q: Any) -> np.ndarray:
    return np.array([q.x, q.y, q.z, q.w], dtype=float)


def _frame(name: str) -> str:
    return name.lstrip("/")


# --------------------------------------------------------------------------- orchestration


@dataclass
class ReplayConfig:
    bag: Path
    map: Path
    out: Path
    world: Path | None = None
    spec: Path | None = None
    force: bool = False


@dataclass
class ReplayResult:
    out: Path
    complete: bool
    reason: str | None
    truth: str
    replay: dict


@dataclass
class _Sensor:
    """One mapped sensor: where it is in the source, where it goes in our bag, and counts."""

    name: str
    s: Any  # the spec's sensor
    entry: SensorTopic
    msgtype: str
    out_topic: str
    frame: str
    mount: Pose
    truth_topic: str | None = None  # source truth topic (truth: topics)
    stamps: list[int] = field(default_factory=list)  # published stamps, stream order
    logs: list[int] = field(default_factory=list)
    truth_stamps: list[int] = field(default_factory=list)
    truth_seen: set[int] = field(default_factory=set)
    pub_seen: set[int] = field(default_factory=set)
    last: dict[str, int] = field(default_factory=dict)
    kept: set[int] = field(default_factory=set)
    missing_after: dict[int, list[int]] = field(default_factory=dict)
    skipped: int = 0
    captures: list[int] = field(default_factory=list)  # truth stamps written
    published: int = 0
    stats: PairStats | None = None
    feed: _TruthFeed | None = None
    prev_odom: OdomTruth | None = None
    pending: dict[int, RayGrid] = field(default_factory=dict)

    @property
    def is_lidar(self) -> bool:
        return isinstance(self.s, LidarSpec)

    def window_ok(self, t: int, motion: PoseStream) -> bool:
        """Whether the capture's whole time window lies inside the ground truth."""
        lo, hi = t, t
        if isinstance(self.s, LidarSpec):
            hi = t + round(float(self.s.column_offsets_s()[-1]) * 1e9)
        elif isinstance(self.s, ImuSpec):
            h = round(1e9 / self.s.rate_hz)
            lo, hi = t - h, t + h
        return motion.start_ns <= lo and hi <= motion.end_ns


class _TruthFeed:
    """Truth of a vector sensor at its (sorted) capture stamps, computed in batches."""

    def __init__(
        self,
        backend: ReferenceBackend,
        name: str,
        stamps: np.ndarray,
        motion: PoseStream,
        batch: int = 2000,
    ) -> None:
        self.backend, self.name, self.motion = backend, name, motion
        self.stamps, self.batch = stamps, batch
        self.k = self.base = self.j = 0
        self.buf: list = []

    def get(self, t: int) -> GnssTruth | ImuTruth | OdomTruth:
        if self.j >= len(self.buf):
            chunk = self.stamps[self.k : self.k + self.batch]
            self.k += len(chunk)
            self.buf = self.backend.capture_batch(self.name, chunk, self.motion)
            self.base = self.k - len(chunk)
            self.j = 0
        if int(self.stamps[self.base + self.j]) != t:
            raise RuntimeError(f"{self.name}: truth requested out of order at {t} ns")
        self.j += 1
        return self.buf[self.j - 1]


def replay(cfg: ReplayConfig) -> ReplayResult:
    """Validate everything, then build the run folder (verify it with verify_run)."""
    m = load_map(cfg.map)
    spec_path = cfg.spec or m.path_of("spec")
    world_path = cfg.world or m.path_of("world")
    if spec_path is None:
        raise UserError(cfg.map, "spec", None, "expected a sensor spec: --spec or spec: in the map")
    if world_path is None:
        raise UserError(cfg.map, "world", None, "expected a world: --world or world: in the map")
    full = load_spec(spec_path)
    world = load_world(world_path)
    check_against_spec(m, full, cfg.map)
    _check_out(cfg.out, cfg.force)
    src = SourceBag(Path(cfg.bag))
    try:
        job = _Replay(cfg, m, full, world, Path(spec_path), Path(world_path), src)
        job.scan()
        cfg.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = cfg.out.parent / f".{cfg.out.name}.replay-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
        try:
            result = job.write(tmp)
            if cfg.out.exists():
                shutil.rmtree(cfg.out)
            os.replace(tmp, cfg.out)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    finally:
        src.close()
    result.out = cfg.out
    return result


def _check_out(out: Path, force: bool) -> None:
    """run.prepare_out's rules, without deleting anything yet."""
    from simconform.outdir import check_out

    check_out(out, force)


def _sub_spec(spec: Spec, names: list[str]) -> Spec:
    data = spec.model_dump(mode="json")
    data["sensors"] = {n: v for n, v in data["sensors"].items() if n in names}
    return Spec.model_validate(data)


class _Replay:
    def __init__(
        self,
        cfg: ReplayConfig,
        m: ReplayMap,
        full: Spec,
        world: World,
        spec_path: Path,
        world_path: Path,
        src: SourceBag,
    ) -> None:
        self.cfg, self.m, self.world, self.src = cfg, m, world, src
        self.spec_path, self.world_path = spec_path, world_path
        self.spec = _sub_spec(full, list(m.sensors))
        self.unmapped = [n for n in full.sensors if n not in m.sensors]
        self.bag_path = Path(cfg.bag)
        self.gt = m.ground_truth
        self.warnings: list[str] = []
        self.sensors: list[_Sensor] = []
        for name, entry in m.sensors.items():
            s = self.spec.sensors[name]
            self.sensors.append(
                _Sensor(
                    name=name,
                    s=s,
                    entry=entry,
                    msgtype=entry.type or SENSOR_TYPES[type(s)],
                    out_topic=self.spec.topic(name),
                    frame=self.spec.frame(name),
                    mount=Pose.from_xyz_rpy(s.mount.xyz, s.mount.rpy),
                    stats=PairStats(entry.pair_by()) if isinstance(s, LidarSpec) else None,
                )
            )
        self.by_name = {s.name: s for s in self.sensors}
        self.truth = self._truth_mode()
        self.roles: dict[str, tuple[str, _Sensor | None]] = {}
        for sn in self.sensors:
            self.roles[sn.entry.topic] = ("pub", sn)
            if self.truth == "topics":
                sn.truth_topic = "/truth" + sn.entry.topic
                self.roles[sn.truth_topic] = ("truth", sn)
        if self.gt is not None:
            if self.gt.topic in self.roles:
                raise UserError(
                    cfg.map, "ground_truth.topic", self.gt.topic, "expected a topic of its own"
                )
            self.roles[self.gt.topic] = ("pose", None)
        self._check_topics()
        self.base_in_body = (
            Pose.from_xyz_rpy(self.gt.base_in_body.xyz, self.gt.base_in_body.rpy)
            if self.gt is not None
            else Pose.identity()
        )
        self.motion: PoseStream | None = None

    # ----------------------------------------------------------------- validation

    def _truth_mode(self) -> str:
        present = {c.topic for c in self.src.connections}
        have = all("/truth" + sn.entry.topic in present for sn in self.sensors)
        if self.m.truth == "topics" and not have:
            miss = next(
                "/truth" + sn.entry.topic
                for sn in self.sensors
                if "/truth" + sn.entry.topic not in present
            )
            raise UserError(
                self.bag_path, miss, None, "truth: topics expects /truth/<topic> for every sensor"
            )
        mode = "topics" if self.m.truth == "topics" or (self.m.truth == "auto" and have) else ""
        if not mode:
            if self.gt is None:
                raise UserError(
                    self.cfg.map,
                    "ground_truth",
                    None,
                    "the bag has no /truth/<topic> topics, so truth must be recomputed from a "
                    "ground-truth pose stream: add ground_truth to the map",
                )
            mode = "recompute"
        return mode

    def _check_topics(self) -> None:
        types = self.src.types()
        listing = ", ".join(f"{t} ({'/'.join(sorted(v))})" for t, v in sorted(types.items()))
        for topic, (role, sn) in self.roles.items():
            want = POSE_TYPES[self.gt.kind] if role == "pose" else sn.msgtype
            if topic not in types:
                raise UserError(
                    self.bag_path,
                    topic,
                    None,
                    f"expected the topic with {want} messages in the bag (has: {listing})",
                )
            got = types[topic]
            if got != {want}:
                raise UserError(
                    self.bag_path, topic, "/".join(sorted(got)), f"expected {want} messages"
                )

    # ----------------------------------------------------------------- pass 1

    def scan(self) -> None:
        """Read the whole bag once without writing: stamps, order, layouts, ground truth."""
        poses: list[tuple[int, np.ndarray, np.ndarray]] = []
        earliest: list[int] = []
        last_pose: int | None = None
        counts = dict.fromkeys(self.roles, 0)
        for topic, msgtype, log_ns, raw in self.src.messages(set(self.roles)):
            role, sn = self.roles[topic]
            msg = self._deserialize(topic, msgtype, raw)
            counts[topic] += 1
            if role == "pose":
                first = None
                for st, xyz, q in self._pose_samples(topic, msg, log_ns):
                    if last_pose is not None and st < last_pose:
                        raise UserError(
                            self.bag_path,
                            topic,
                            _sec(st),
                            f"expected ground-truth stamps in order; this one is before "
                            f"the previous {_sec(last_pose)} s",
                        )
                    if st != last_pose:
                        poses.append((st, xyz, q))
                        last_pose = st
                    first = st if first is None else min(first, st)
                earliest.append(log_ns if first is None else min(log_ns, first))
                continue
            st = self._check_msg(sn, role, topic, msg)
            if role == "pub":
                sn.stamps.append(st)
                sn.logs.append(log_ns)
            else:
                sn.truth_stamps.append(st)
            earliest.append(min(log_ns, st))
        self.n_stream = len(earliest)
        self.stop_reason = self.src.stop_reason
        self.counts = counts
        e = np.asarray(earliest, dtype=np.int64)
        self.suffix_min = np.minimum.accumulate(e[::-1])[::-1] if len(e) else e
        for topic, n in counts.items():
            if n == 0 and self.stop_reason is None:
                raise UserError(self.bag_path, topic, 0, "expected messages on the topic")
        if self.gt is not None:
            self._build_motion(poses)
        self._plan_captures()

    def _deserialize(self, topic: str, msgtype: str, raw: bytes) -> Any:
        try:
            return self.src.deserialize(raw, msgtype)
        except Exception as exc:
            raise UserError(
                self.bag_path, topic, msgtype, f"expected a valid {msgtype} message ({exc})"
            ) from None

    def _check_msg(self, sn: _Sensor, role: str, topic: str, msg: Any) -> int:
        st = stamp_ns(msg.header)
        prev = sn.last.get(role)
        if prev is not None and st <= prev:
            raise UserError(
                self.bag_path,
                topic,
                f"header.stamp {_sec(st)} s",
                f"expected header stamps strictly increasing in log order; the previous "
                f"message has {_sec(prev)} s",
            )
        sn.last[role] = st
        want_frame = sn.entry.frame
        if (
            role == "pub"
            and want_frame is not None
            and _frame(msg.header.frame_id) != _frame(want_frame)
        ):
            raise UserError(
                self.bag_path,
                topic,
                f"header.frame_id {msg.header.frame_id!r}",
                f"expected {want_frame!r} (sensors.{sn.name}.frame in the map)",
            )
        if sn.is_lidar:
            names = [f.name for f in msg.fields]
            kinds = {f.name: f.datatype for f in msg.fields}
            missing = [k for k in ("x", "y", "z") if kinds.get(k) not in (7, 8)]  # FLOAT32/64
            bad = [f.name for f in msg.fields if not 1 <= f.datatype <= 8]
            if bad:
                raise UserError(
                    self.bag_path,
                    topic,
                    f"field {bad[0]!r} of datatype {kinds[bad[0]]}",
                    "expected PointField datatypes 1 to 8 (INT8 ... FLOAT64)",
                )
            if missing:
                raise UserError(
                    self.bag_path,
                    topic,
                    f"fields {names}",
                    "expected a PointCloud2 with float x, y and z fields",
                )
            rings, cols = len(sn.s.rings.elevations()), sn.s.columns
            organized = role == "truth" or sn.entry.organized
            if organized and (msg.height, msg.width) != (rings, cols):
                what = "the truth cloud" if role == "truth" else "an organized cloud"
                raise UserError(
                    self.bag_path,
                    topic,
                    f"height x width {msg.height} x {msg.width}",
                    f"expected {what} of the spec's {rings} rings x {cols} columns"
                    + ("" if role == "truth" else "; set organized: false in the map if not"),
                )
            if len(msg.data) < msg.row_step * (msg.height - 1) + msg.point_step * msg.width:
                raise UserError(
                    self.bag_path,
                    topic,
                    f"{len(msg.data)} data bytes",
                    f"expected height x width points of point_step {msg.point_step}",
                )
        if role == "pub" and self.truth == "topics" and st not in sn.truth_seen:
            raise UserError(
                self.bag_path,
                topic,
                f"header.stamp {_sec(st)} s",
                f"expected a truth message on {sn.truth_topic} with the same stamp logged "
                "before it",
            )
        (sn.pub_seen if role == "pub" else sn.truth_seen).add(st)
        return st

    def _pose_samples(
        self, topic: str, msg: Any, log_ns: int
    ) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
        gt = self.gt
        if isinstance(gt, TfPose):
            for tr in msg.transforms:
                if _frame(tr.header.frame_id) == _frame(gt.parent) and _frame(
                    tr.child_frame_id
                ) == _frame(gt.child):
                    t = tr.transform
                    yield stamp_ns(tr.header), _xyz(t.translation), _quat(t.rotation)
        elif isinstance(gt, JsonPose):
            try:
                got = gt.json_ego.extract(msg.data)
            except ValueError as exc:
                raise UserError(
                    self.bag_path,
                    topic,
                    msg.data[:60],
                    f"expected the ego pose as described by ground_truth.json_ego ({exc})",
                ) from None
            if got is not None:
                xyz, q, st = got
                yield (log_ns if st is None else st), xyz, q
        else:
            p = msg.pose.pose if gt.kind == "odometry" else msg.pose
            yield stamp_ns(msg.header), _xyz(p.position), _quat(p.orientation)

    def _build_motion(self, poses: list) -> None:
        topic = self.gt.topic
        if len(poses) < 2:
            what = (
                f"transforms {self.gt.parent} -> {self.gt.child}"
                if isinstance(self.gt, TfPose)
                else "ego poses"
            )
            raise UserError(
                self.bag_path, topic, len(poses), f"expected at least 2 ground-truth {what}"
            )
        t = np.array([p[0] for p in poses], dtype=np.int64)
        xyz = np.array([p[1] for p in poses])
        q = np.array([p[2] for p in poses])
        norms = np.linalg.norm(q, axis=1)
        bad = np.flatnonzero(~np.isfinite(norms) | (np.abs(norms - 1) > 1e-3))
        if bad.size or not np.all(np.isfinite(xyz)):
            i = int(bad[0]) if bad.size else 0
            raise UserError(
                self.bag_path,
                topic,
                f"quaternion norm {norms[i]:.6g} at {_sec(int(t[i]))} s",
                "expected finite positions and unit quaternions",
            )
        body = Pose(xyz, Rotation.from_quat(q / norms[:, None]))
        base = body.compose(self.base_in_body)
        self.motion = PoseStream(t, base.t, base.rot)

    def _plan_captures(self) -> None:
        """Which captures get truth: inside the ground truth; dropped ones from stamp gaps."""
        motion = self.motion
        for sn in self.sensors:
            need_motion = self.truth == "recompute" or sn.entry.points_frame == "world"
            if motion is None or not need_motion:
                sn.kept = set(sn.stamps) | set(sn.truth_stamps)
                continue
            cands = sn.stamps if self.truth == "recompute" else sn.truth_stamps
            kept = [t for t in cands if sn.window_ok(t, motion)]
            sn.skipped = len(cands) - len(kept)
            sn.kept = set(kept)
            if self.truth != "recompute":
                continue
            period = 1e9 / sn.s.rate_hz
            for a, b in itertools.pairwise(kept):
                k = round((b - a) / period)
                if k >= 2:
                    sn.missing_after[a] = [a + round(j * (b - a) / k) for j in range(1, k)]
        if not any(sn.kept for sn in self.sensors):
            span = f"[{_sec(motion.start_ns)}, {_sec(motion.end_ns)}] s" if motion else "-"
            raise UserError(
                self.bag_path,
                self.gt.topic if self.gt else "topics",
                span,
                "expected sensor messages whose stamps fall inside the ground truth's span",
            )

    # ----------------------------------------------------------------- pass 2

    def write(self, out: Path) -> ReplayResult:
        (out / "gt").mkdir()
        backend = None
        if self.truth == "recompute":
            backend = ReferenceBackend()
            backend.open(self.world, self.spec)
            for sn in self.sensors:
                if not sn.is_lidar:
                    need = sorted(sn.kept | {m for v in sn.missing_after.values() for m in v})
                    sn.feed = _TruthFeed(backend, sn.name, np.array(need, np.int64), self.motion)
        self.backend = backend
        stamps = [t for sn in self.sensors for t in sn.kept]
        start, end = min(stamps), max(stamps)
        for sn in self.sensors:
            for v in sn.missing_after.values():
                end = max(end, *v)
        bag = BagRecorder(out / "bag", "mcap")
        for sn in self.sensors:
            bag.connection(sn.out_topic, sn.msgtype)
            bag.connection("/truth" + sn.out_topic, sn.msgtype)
        bag.connection("/tf", messages.TFMESSAGE)
        bag.connection("/tf_static", messages.TFMESSAGE, latched=True)
        ident = Pose.identity()
        static = [(start, "map", "odom", ident.t, ident.quat())]
        static += [
            (start, self.spec.base_frame, sn.frame, sn.mount.t, sn.mount.quat())
            for sn in self.sensors
        ]
        first_log = int(self.suffix_min[0]) if len(self.suffix_min) else start
        static_msg = messages.transforms(static)
        bag.push("/tf_static", messages.TFMESSAGE, static_msg, min(start, first_log))
        tf_next = 0
        bar = progress_bar(self.n_stream, None)
        try:
            stream = self.src.messages(set(self.roles))
            for i, (topic, msgtype, log_ns, raw) in enumerate(stream, start=1):
                if i > self.n_stream:
                    break
                if bar is not None and i % 500 == 0:
                    bar.update(i)
                role, sn = self.roles[topic]
                if role != "pose":
                    msg = self._deserialize(topic, msgtype, raw)
                    self._process(bag, sn, role, topic, msg, log_ns)
                mark = int(self.suffix_min[i]) - 1 if i < self.n_stream else None
                tf_next = self._push_tf(bag, tf_next, mark)
                if mark is not None:
                    bag.advance(mark)
            self._push_tf(bag, tf_next, None)
        finally:
            bag.close()
            if bar is not None:
                bar.close()
        if self.motion is not None:
            self._write_gt(out / "gt")
        complete = self.stop_reason is None
        reason = None if complete else f"source bag truncated or damaged: {self.stop_reason}"
        section = self._section(start, end)
        manifest = self._manifest(start, end, complete, reason, section)
        write_json_atomic(out / "run.json", manifest)
        return ReplayResult(out, complete, reason, self.truth, section)

    def _push_tf(self, bag: BagRecorder, j: int, mark: int | None) -> int:
        m = self.motion
        if m is None:
            return j
        n = len(m.times_ns)
        stop = n if mark is None else int(np.searchsorted(m.times_ns, mark, side="right"))
        if stop > j:
            poses = Pose(m.positions[j:stop], m.rotations[j:stop])
            q = poses.quat()
            for k in range(stop - j):
                t = int(m.times_ns[j + k])
                tf = messages.transforms([(t, "odom", self.spec.base_frame, poses.t[k], q[k])])
                bag.push("/tf", messages.TFMESSAGE, tf, t)
        return max(j, stop)

    def _process(
        self, bag: BagRecorder, sn: _Sensor, role: str, topic: str, msg: Any, log_ns: int
    ) -> None:
        st = stamp_ns(msg.header)
        if st not in sn.kept:
            return
        truth_topic = "/truth" + sn.out_topic
        if role == "truth":  # truth: topics
            with self._usable(topic, sn, st):
                if sn.is_lidar:
                    lt = self._truth_cloud(sn, msg)
                    if st in sn.pub_seen:
                        elev = sn.s.rings.elevations()
                        sn.pending[st] = RayGrid.from_truth(lt.points, lt.directions, elev)
                    out = messages.cloud(lt, st, sn.frame)
                else:
                    out = to_ours(msg, sn.msgtype)
            bag.push(truth_topic, sn.msgtype, out, log_ns)
            sn.captures.append(st)
            return
        if self.truth == "recompute":
            truth_msg, grid = self._recompute(sn, st)
            bag.push(truth_topic, sn.msgtype, truth_msg, min(st, log_ns))
            sn.captures.append(st)
        else:
            grid = sn.pending.pop(st, None)
            for old in [t for t in sn.pending if t < st]:  # their published copy never came
                del sn.pending[old]
        with self._usable(topic, sn, st):
            if sn.is_lidar:
                out = self._published_cloud(sn, msg, st, grid)
            else:
                out = to_ours(msg, sn.msgtype)
        bag.push(sn.out_topic, sn.msgtype, out, log_ns)
        sn.published += 1
        for t in sn.missing_after.get(st, ()):
            truth_msg, _grid = self._recompute(sn, t)
            bag.push(truth_topic, sn.msgtype, truth_msg, t)
            sn.captures.append(t)

    @contextlib.contextmanager
    def _usable(self, topic: str, sn: _Sensor, st: int) -> Iterator[None]:
        """A source message that deserialized but cannot be decoded or converted."""
        try:
            yield
        except (AttributeError, TypeError, ValueError, KeyError) as exc:
            raise UserError(
                self.bag_path,
                topic,
                f"header.stamp {_sec(st)} s",
                f"expected a usable {sn.msgtype} message ({type(exc).__name__}: {exc})",
            ) from None

    def _recompute(self, sn: _Sensor, t: int) -> tuple[Any, RayGrid | None]:
        s = sn.s
        if isinstance(s, LidarSpec):
            lt = self.backend.capture(sn.name, t, self.motion)
            grid = RayGrid.from_truth(lt.points, lt.directions, s.rings.elevations())
            return messages.cloud(lt, t, sn.frame), grid
        sample = sn.feed.get(t)
        if isinstance(sample, ImuTruth):
            av, gv = np.square(s.noise.accel.sigma), np.square(s.noise.gyro.sigma)
            return messages.imu(sample, t, sn.frame, av, gv, with_orientation=True), None
        if isinstance(sample, GnssTruth):
            o = self.world.origin
            lla = pymap3d.enu2geodetic(*sample.enu, o.lat, o.lon, o.alt)
            return messages.navsat(lla, t, sn.frame, np.square(s.noise.position.sigma)), None
        if isinstance(sample, OdomTruth):
            prev = sn.prev_odom
            twist = np.zeros(3) if prev is None else se2_increment(prev, sample) * s.rate_hz
            sn.prev_odom = sample
            var = np.square(s.noise.increment.sigma) * s.rate_hz
            msg = messages.odometry(sample, twist, t, "odom", self.spec.base_frame, var)
            return msg, None
        raise TypeError(type(sample).__name__)

    def _truth_cloud(self, sn: _Sensor, msg: Any) -> LidarTruth:
        f = cloud_arrays(msg)
        pts = np.stack([f["x"], f["y"], f["z"]], axis=-1).astype(np.float64)
        rng = np.linalg.norm(pts, axis=-1)
        ok = np.isfinite(rng) & (rng > 0)
        nominal = sn.s.directions()
        dirs = np.where(ok[..., None], pts / np.where(ok, rng, 1.0)[..., None], nominal)
        t_off = f["t"] if "t" in f else np.broadcast_to(sn.s.column_offsets_s(), rng.shape)
        return LidarTruth(
            points=np.where(ok[..., None], pts, np.nan),
            directions=dirs,
            ranges=np.where(ok, rng, np.nan),
            intensity=np.nan_to_num(f.get("intensity", np.zeros(rng.shape))).astype(np.float32),
            t_offset=np.asarray(t_off, dtype=np.float32),
        )

    def _published_cloud(self, sn: _Sensor, msg: Any, st: int, grid: RayGrid | None) -> Any:
        s: LidarSpec = sn.s
        f = cloud_arrays(msg)
        xyz = np.stack([f["x"], f["y"], f["z"]], axis=-1).astype(np.float64)
        inten = np.asarray(f.get("intensity", np.zeros(xyz.shape[:2])), dtype=np.float64)
        if sn.entry.points_frame == "world":
            pose = self.motion.pose_at(st).compose(sn.mount)
            xyz = pose.inverse().apply(xyz.reshape(-1, 3)).reshape(xyz.shape)
        if grid is None:
            grid = RayGrid(s.directions(), s.rings.elevations())
        if sn.entry.pair_by() == "index":
            cloud = index_residuals(xyz, grid, sn.stats)
            vals = inten
        else:
            cloud, vals = pair_by_direction(xyz.reshape(-1, 3), inten.ravel(), grid, sn.stats)
        ranges = np.linalg.norm(cloud, axis=-1)
        lt = LidarTruth(
            points=cloud,
            directions=grid.rays,
            ranges=ranges,
            intensity=np.nan_to_num(vals).astype(np.float32),
            t_offset=np.broadcast_to(s.column_offsets_s(), ranges.shape).astype(np.float32),
        )
        return messages.cloud(lt, st, sn.frame)

    def _write_gt(self, gt_dir: Path) -> None:
        m = self.motion
        w = TumWriter(gt_dir / "base_link.tum")
        q = Pose(m.positions, m.rotations).quat()
        for t, p, qq in zip(m.times_ns, m.positions, q):
            w.write(int(t), p, qq)
        w.close()
        for sn in self.sensors:
            t = np.array(sorted(x for x in sn.captures if m.start_ns <= x <= m.end_ns), np.int64)
            w = TumWriter(gt_dir / f"{sn.name}.tum")
            if len(t):
                poses = m.pose_at(t).compose(sn.mount)
                for tt, p, qq in zip(t, poses.t, poses.quat()):
                    w.write(int(tt), p, qq)
            w.close()

    # ----------------------------------------------------------------- run.json

    def _section(self, start: int, end: int) -> dict:
        if self.src.read_with != "rosbags":
            self.warnings.append(
                f"rosbags could not open the bag ({self.src.open_error}); it was read by a "
                "sequential scan of its records"
            )
        sensors = {}
        for sn in self.sensors:
            lat = (np.asarray(sn.logs) - np.asarray(sn.stamps)) / 1e6 if sn.stamps else None
            info: dict[str, Any] = {
                "source_topic": sn.entry.topic,
                "topic": sn.out_topic,
                "messages": len(sn.stamps),
                "published": sn.published,
                "captures": len(sn.captures),
                "skipped_outside_ground_truth": sn.skipped,
                "inferred_dropped": sum(len(v) for v in sn.missing_after.values()),
                "log_minus_stamp_ms_median": float(np.median(lat)) if lat is not None else None,
            }
            if lat is not None and np.median(np.abs(lat)) > CLOCK_WARN_S * 1e3:
                self.warnings.append(
                    f"{sn.entry.topic}: log time and header.stamp differ by "
                    f"{np.median(lat) / 1e3:.3g} s (median): the bag was probably recorded on "
                    "the wall clock while stamps are simulation time (record with "
                    "use_sim_time), so latency cannot be measured"
                )
            if sn.stats is not None:
                s = sn.s
                el = s.rings.elevations()
                ring_bin = float(np.rad2deg(np.diff(el).min())) if len(el) > 1 else None
                summary = sn.stats.summary(ring_bin, 360.0 / s.columns)
                info["pairing"] = summary
                share = summary["share_beyond_half_bin"]
                if share is not None and share > 0.05:
                    self.warnings.append(
                        f"{sn.entry.topic}: {share:.1%} of the points lie more than half a bin "
                        "from every ray of the spec: check the spec's rings/columns"
                        + (", or set pairing: direction" if summary["method"] == "index" else "")
                    )
            sensors[sn.name] = info
        gt = None
        if self.motion is not None:
            m = self.motion
            span = (m.end_ns - m.start_ns) / 1e9
            gt = {
                "topic": self.gt.topic,
                "kind": self.gt.kind,
                "poses": len(m.times_ns),
                "start_ns": m.start_ns,
                "end_ns": m.end_ns,
                "rate_hz": (len(m.times_ns) - 1) / span if span > 0 else None,
            }
        return {
            "source": str(self.bag_path.resolve()),
            "source_format": self.src.format,
            "read_with": self.src.read_with,
            "source_complete": self.stop_reason is None,
            "truncation": self.stop_reason,
            "messages_read": self.n_stream,
            "map": str(Path(self.cfg.map).resolve()),
            "map_content": self.m.model_dump(mode="json"),
            "truth": self.truth,
            "ground_truth": gt,
            "sensors_not_mapped": self.unmapped,
            "sensors": sensors,
            "warnings": self.warnings,
        }

    def _manifest(
        self, start: int, end: int, complete: bool, reason: str | None, section: dict
    ) -> dict:
        return {
            "simconform": __version__,
            "git_commit": git_commit(),
            "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "backend": "replay",
            "seed": None,
            "storage": "mcap",
            "spec": str(self.spec_path),
            "world": str(self.world_path),
            "trajectory": None,
            "spec_sha256": sha256(self.spec_path),
            "world_sha256": sha256(self.world_path),
            "trajectory_sha256": None,
            "start_ns": int(start),
            "end_ns": int(end),
            "tf_rate_hz": None,
            "spec_content": self.spec.model_dump(mode="json"),
            "world_content": self.world.model_dump(mode="json"),
            "complete": complete,
            "stopped_by": None,
            "incomplete_reason": reason,
            "captures": {sn.name: len(sn.captures) for sn in self.sensors},
            "published": {sn.name: sn.published for sn in self.sensors},
            "replay": section,
        }


def _sec(t_ns: int) -> str:
    from simconform.trajectory import format_seconds

    return format_seconds(int(t_ns))


__all__ = [
    "PairStats",
    "PoseStream",
    "RayGrid",
    "ReplayBackend",
    "ReplayConfig",
    "ReplayResult",
    "SourceBag",
    "index_residuals",
    "pair_by_direction",
    "replay",
    "to_ours",
]
