"""Salvage of a rosbag2 sqlite3 database cut off mid-write: rows read from its leaf pages.

SQLite (and so rosbags, and Python's sqlite3 module) reaches rows only through the table's
b-tree; a file cut off mid-write loses the interior pages first (they are allocated last), so
a query fails with "database disk image is malformed" although most leaf pages holding the
rows are intact. SQLite's recovery extension (the shell's `.recover`) is not
reachable from Python's sqlite3 module. This reader knows just enough of the file format to
read the topics table through its b-tree and every message row from the table leaf pages
whose cells have the messages table's shape.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from rosbags.typesys.msg import normalize_msgtype

from simconform.bag.salvage.base import Buffer, Cut, NotABag, Salvage


class SqliteScan(Salvage):
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
            except (Cut, ValueError, struct.error):
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
            raise NotABag(f"{path.name} is not an SQLite database")
        (ps,) = struct.unpack_from(">H", buf, 16)
        self.ps = 65536 if ps == 1 else ps
        self.usable = self.ps - buf[20]
        self.npages = len(buf) // self.ps
        (declared,) = struct.unpack_from(">I", buf, 28)
        self.truncated = len(buf) % self.ps != 0 or declared > self.npages

    def page(self, n: int) -> bytes:
        if not 1 <= n <= self.npages:
            raise Cut
        return bytes(self.buf[(n - 1) * self.ps : n * self.ps])

    def leaf_cells(self, ncols: int | None = None, pages: Iterable[int] | None = None) -> Iterator:
        """(page, cell offset, rowid, record) of table leaf pages (all pages by default)."""
        for n in pages if pages is not None else range(1, self.npages + 1):
            try:
                data = self.page(n)
            except Cut:
                continue
            hdr = 100 if n == 1 else 0
            if data[hdr] != 0x0D:
                continue
            (count,) = struct.unpack_from(">H", data, hdr + 3)
            for i in range(count):
                try:
                    (off,) = struct.unpack_from(">H", data, hdr + 8 + 2 * i)
                    rowid, rec = self._cell(data, off, ncols)
                except (Cut, ValueError, struct.error, IndexError):
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
            raise Cut
        if local < size:
            (nxt,) = struct.unpack_from(">I", data, p + local)
            parts = [payload]
            have = local
            while have < size:
                if nxt == 0:
                    raise Cut
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
            except Cut:
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
            raise NotABag(f"{self.name} has no readable topics table")
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
                raise Cut
            out.append(raw if t % 2 == 0 else raw.decode("utf-8", "replace"))
            p += n
        else:
            raise ValueError("reserved serial type")
    return out
