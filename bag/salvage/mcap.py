"""Checked scan of an MCAP file: its records in file order, every chunk's CRC checked, damaged
chunks skipped and reported, a file cut off mid-write read up to the cut.

rosbags' MCAP reader starts from the summary section at the end of the file, which a cut
file lacks, and stops for good at the first chunk whose CRC does not match. The `mcap`
package's StreamReader (1.6) reads records in order but reads each chunk whole, so the chunk
that the cut runs through raises EndOfFile and every message in it is lost; with the large
chunks rosbag2 writes that is most of a short bag (measured on a 1.7 MB rosbags-written bag
cut at 50 %: 0 messages, against 1546 here; at 70 %: 1930 against 2107).

This scan:
- checks each chunk's CRC (where the writer stored one) before yielding any of its messages;
  a chunk that fails (CRC, decompression, record structure) is skipped and reported as a
  `Damage` with its log-time span and, from the message index records that follow it, how
  many messages of which topic it held; the scan goes on with the next chunk;
- finds the next chunk again when a record's framing is damaged (a length that runs past the
  end of a finished file, an unknown opcode): the next position where a chunk header is
  consistent with itself (its length equals its fields) or where DataEnd follows;
- checks the DataEnd CRC (the data section) and the Footer CRC (the summary) where non-zero;
- reads a chunk cut off by the end of the file up to its last complete record when the chunk
  has no CRC; one with a CRC cannot be checked and is dropped, with a note. Either is where a
  killed writer stopped, not damage: a closed bag cut short is verify/integrity.py's finding.
Schemas and channels come from the data section and, where the file has one, the summary
section, so a damaged first chunk (where rosbags writes them) does not hide the topics.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from isal.isal_zlib import crc32  # zlib's CRC-32, 6x faster (ISA-L; bag/storage.py)
from rosbags.typesys.msg import normalize_msgtype

from simconform.bag.deferred import open_chunk
from simconform.bag.salvage.base import (
    RELEASE_BYTES,
    Buffer,
    Cut,
    Damage,
    NotABag,
    Salvage,
    decompress,
    release,
)

_MCAP_MAGIC = b"\x89MCAP0\r\n"
_DATA_END = b"\x0f\x04\x00\x00\x00\x00\x00\x00\x00"  # opcode and length of DataEnd
_COMPRESSIONS = ("", "zstd", "lz4")


class McapScan(Salvage):
    """MCAP records in file order (schemas, channels and messages, also inside chunks)."""

    format = "rosbag2 (mcap)"

    def scan(
        self, topics: set[str] | None = None, defer: frozenset[str] = frozenset()
    ) -> Iterator[tuple[int, int, bytes]]:
        """Every message (channel id, log ns, data) in file order. With `topics`, a chunk of a
        finished file whose message index names only other topics is not decompressed: its
        bytes are vouched for by the data section CRC, checked at the end, which must be
        stored for the file (else every chunk is read); `skipped` counts such chunks. On the
        same terms, a zstd chunk holding one message of a topic in `defer` is yielded as a
        bag.deferred.Deferred, decompressed only as far as its message's header."""
        self.stop_reason, self.clean_end = "end of data", False
        self.skipped = 0
        self.damaged = []
        self.notes = []
        self.chunks = {"total": 0, "with_crc": 0}
        self.last_log_ns: int | None = None
        self._open: list[Damage] = []  # damage whose span ends at the next good message
        for path, buf in zip(self.files, self.maps):
            if bytes(buf[:8]) != _MCAP_MAGIC:
                raise NotABag(f"{path.name} does not start with the MCAP magic")
            self._file = path.name
            schemas: dict[int, tuple[str, str, str]] = {}
            self._summary(buf, schemas)
            self._topics = topics if topics is not None and _data_crc_stored(buf) else None
            self._defer = defer if self._topics is not None else frozenset()
            self._cut_unchecked = False
            ended = yield from self._top(buf, schemas)
            if not ended:
                upto = "chunk (the cut one has a CRC)" if self._cut_unchecked else "message"
                self.stop_reason = (
                    f"{path.name} cut off after byte {len(buf)}: read up to the last complete "
                    + upto
                )
                return
        self.stop_reason = "data section complete (the summary section is damaged)"
        self.clean_end = True

    def index(self) -> None:
        """Channels from each file's summary section (a closed file's; its CRC checked)."""
        for path, buf in zip(self.files, self.maps):
            if bytes(buf[:8]) != _MCAP_MAGIC:
                raise NotABag(f"{path.name} does not start with the MCAP magic")
            self._file = path.name
            self._summary(buf, {})

    # ----------------------------------------------------------------- top level

    def _top(self, buf: Buffer, schemas: dict) -> Iterator:
        """Messages of the data section; True at DataEnd or Footer, False at a cut."""
        finished = _finished(buf)
        pos, end, last_chunk, done = 8, len(buf), None, 0
        while pos < end:
            done = release(buf, done, pos)
            if pos + 9 > end:
                return False
            op = buf[pos]
            (length,) = struct.unpack_from("<Q", buf, pos + 1)
            fits = length <= end - pos - 9
            if op == 0x06 and _chunk_header(buf, pos) is not None:
                if not fits:  # cut off by the end of the file
                    yield from self._chunk(buf, pos, schemas, cut=True)
                    return False
                held = _held(buf, pos + 9 + length) if self._topics is not None else None
                if self._unwanted(held):
                    last_chunk = self._skip(buf, pos)
                elif (lone := self._deferred(buf, pos, held)) is not None:
                    yield from self._good([lone])
                    last_chunk = None
                else:
                    last_chunk = yield from self._chunk(buf, pos, schemas)
                pos += 9 + length
                continue
            if op == 0x0F and length == 4 and fits:
                self._data_crc(buf, pos)
                return True
            if op == 0x02 and fits and pos + 9 + length + 8 == end and finished:
                return True
            body = bytes(buf[pos + 9 : pos + 9 + length]) if fits else b""
            if fits and op == 0x07 and _index_ok(body):  # message index of the last chunk
                if last_chunk is not None:
                    self._count_index(body, last_chunk)
                pos += 9 + length
                continue
            if fits and (op >= 0x80 or op in (0x01, 0x09, 0x0C)):
                pos += 9 + length  # header, attachment, metadata, private records
                continue
            try:
                if not fits:
                    raise ValueError("a length past the end of the file")
                if op == 0x03:
                    _schema(body, schemas)
                elif op == 0x04:
                    self._channel(body, schemas)
                elif op == 0x05:
                    cid, _seq, log_ns = struct.unpack_from("<HIQ", body)
                    if cid in self.conns:
                        yield from self._good([(cid, log_ns, body[22:])])
                else:
                    raise ValueError(f"no record of opcode 0x{op:02x} belongs here")
            except (Cut, struct.error, ValueError, UnicodeDecodeError):
                nxt = _resync(buf, pos + 1, end)
                if nxt is None and not finished:
                    return False  # the file ends inside this record: a cut
                self._damage(
                    f"bytes {pos}-{end if nxt is None else nxt}",
                    f"unreadable records (opcode 0x{op:02x}, length {length}): the messages "
                    "there are lost",
                )
                if nxt is None:
                    return True
                pos, last_chunk = nxt, None
                continue
            last_chunk = None
            pos += 9 + length
        return False

    def _chunk(self, buf: Buffer, pos: int, schemas: dict, cut: bool = False) -> Iterator:
        """The messages of the chunk at `pos` once its CRC matches; its Damage otherwise."""
        start_ns, end_ns, usize, crc, method, data_at, csize = _chunk_header(buf, pos)
        self.chunks["total"] += 1
        self.chunks["with_crc"] += crc != 0
        n = self.chunks["total"]
        where = f"chunk {n} at byte {pos}"
        data = bytes(buf[data_at : min(data_at + csize, len(buf))])
        if cut and crc:  # where a killed writer stops: the file's end, not damage in it
            self._cut_unchecked = True
            self.notes.append(
                f"{self._file}: {where} is cut off by the end of the file after {len(data)} of "
                f"its {csize} bytes; its CRC cannot be checked, so none of its messages is used"
            )
            return None
        try:
            inner = decompress(data, method, partial=cut)
        except Exception as exc:  # zstd/lz4 errors have many types
            if cut:
                return None
            return self._damage(where, f"does not decompress ({exc})", start_ns, end_ns)
        if crc and crc32(inner) != crc:
            return self._damage(
                where,
                f"CRC mismatch (stored {crc:08x}, data {crc32(inner):08x})",
                start_ns,
                end_ns,
            )
        if not cut and not crc and len(inner) != usize:
            return self._damage(
                where, f"{len(inner)} bytes decompressed, header says {usize}", start_ns, end_ns
            )
        msgs, ok = self._inner(inner, schemas)
        if not ok and not cut:
            if crc:  # a chunk whose records are broken although its CRC matches: not ours
                self.notes.append(f"{where}: records end early although its CRC matches")
            d = self._damage(where, "its records end early (no CRC to check)", start_ns, end_ns)
            d.messages = {}
        yield from self._good(msgs)
        return None

    def _unwanted(self, held: list[tuple[int, int]] | None) -> bool:
        """The chunk whose message index names `held` (`_held`) holds messages, all of known
        channels whose topics this reading does not want."""
        want = self._topics or ()
        return bool(held) and all(c in self.conns and self.conns[c][0] not in want for c, _ in held)

    def _deferred(self, buf: Buffer, pos: int, held: list[tuple[int, int]] | None) -> tuple | None:
        """(channel id, log ns, Deferred) of the chunk at `pos` where its message index names
        one message (`held`), of a topic this reading defers; None to read it whole."""
        if not self._defer or held is None:
            return None
        if len(held) != 1 or held[0][1] != 16 or held[0][0] not in self.conns:
            return None  # a message index entry is 16 bytes: one message
        _start, _end, usize, crc, method, data_at, csize = _chunk_header(buf, pos)
        if self.conns[held[0][0]][0] not in self._defer or method != "zstd":
            return None
        got = open_chunk(bytes(buf[data_at : data_at + csize]), crc, usize)
        if got is None or got[0] != held[0][0]:
            return None
        self.chunks["total"] += 1
        self.chunks["with_crc"] += crc != 0
        return got

    def _skip(self, buf: Buffer, pos: int) -> None:
        """Count an unwanted chunk as `_chunk` would an intact one, without decompressing it."""
        _start, end_ns, _usize, crc, _method, _at, _csize = _chunk_header(buf, pos)
        self.chunks["total"] += 1
        self.chunks["with_crc"] += crc != 0
        self.skipped += 1
        for d in self._open:
            d.end_ns = end_ns
        self._open = []
        self.last_log_ns = end_ns if self.last_log_ns is None else max(self.last_log_ns, end_ns)

    def _inner(self, inner: bytes, schemas: dict) -> tuple[list, bool]:
        """(channel id, log ns, data) of a chunk's records; False where they stop early. A
        message's data is a view into the chunk (a truth image is MiBs: no copy here)."""
        out, p, view = [], 0, memoryview(inner)
        try:
            while p < len(inner):
                if p + 9 > len(inner):
                    return out, False
                op = inner[p]
                (n,) = struct.unpack_from("<Q", inner, p + 1)
                at, p = p + 9, p + 9 + n
                if p > len(inner):
                    return out, False
                if op == 0x05:
                    if n < 14:  # too short for its header: as a struct.error on the record
                        return out, False
                    cid, _seq, log_ns = struct.unpack_from("<HIQ", inner, at)
                    if cid in self.conns:
                        out.append((cid, log_ns, view[at + 22 : p]))
                elif op == 0x03:
                    _schema(inner[at:p], schemas)
                elif op == 0x04:
                    self._channel(inner[at:p], schemas)
        except (Cut, struct.error, ValueError, UnicodeDecodeError):
            return out, False
        return out, True

    # ----------------------------------------------------------------- bookkeeping

    def _good(self, msgs: list) -> Iterator[tuple[int, int, bytes]]:
        for cid, log_ns, raw in msgs:
            for d in self._open:
                d.end_ns = log_ns
            self._open = []
            self.last_log_ns = log_ns if self.last_log_ns is None else max(self.last_log_ns, log_ns)
            yield cid, log_ns, raw

    def _damage(
        self, where: str, reason: str, start_ns: int | None = None, end_ns: int | None = None
    ) -> Damage:
        d = Damage(self._file, where, reason, start_ns, end_ns)
        if start_ns is None:  # span unknown: from the last good message to the next one
            d.start_ns = self.last_log_ns
            self._open.append(d)
        self.damaged.append(d)
        return d

    def _count_index(self, body: bytes, d: Damage) -> None:
        """Message index records after a damaged chunk: which messages it held."""
        cid, n = struct.unpack_from("<HI", body)
        topic = self.conns.get(cid, (f"channel {cid}",))[0]
        if n:
            d.messages[topic] = d.messages.get(topic, 0) + n // 16

    def _channel(self, body: bytes, schemas: dict) -> None:
        cid, sid = struct.unpack_from("<HH", body)
        topic, _p = _mcap_str(body, 4)
        name, enc, text = schemas.get(sid, ("", "", ""))
        fmt = {"ros2msg": "msg", "ros2idl": "idl"}.get(enc, "")
        self.conns.setdefault(cid, (topic, normalize_msgtype(name), fmt, text))

    def _summary(self, buf: Buffer, schemas: dict) -> None:
        """Schemas and channels of the summary section, where the footer points to one; and
        the summary's CRC."""
        found = _footer(buf)
        if found is None:
            return
        footer, summary_start, offsets, crc = found
        if not 8 < summary_start <= footer:
            return
        if crc:
            got = crc32(bytes(buf[summary_start : footer + 25]))
            if got != crc:
                self.notes.append(
                    f"{self._file}: summary CRC mismatch (stored {crc:08x}, data {got:08x}); "
                    "its index is not used"
                )
                return
        pos, stop = summary_start, (offsets if summary_start < offsets <= footer else footer)
        while pos + 9 <= stop:
            op = buf[pos]
            (length,) = struct.unpack_from("<Q", buf, pos + 1)
            body = bytes(buf[pos + 9 : pos + 9 + length])
            try:
                if op == 0x03:
                    _schema(body, schemas)
                elif op == 0x04:
                    self._channel(body, schemas)
            except (Cut, struct.error, ValueError, UnicodeDecodeError):
                return
            pos += 9 + length

    def _data_crc(self, buf: Buffer, pos: int) -> None:
        (crc,) = struct.unpack_from("<I", buf, pos + 9)
        if crc:
            got, at, done = 0, 0, 0
            with memoryview(buf) as whole:
                while at < pos:  # a piece at a time, each let go (release) once read
                    nxt = min(at + RELEASE_BYTES, pos)
                    with whole[at:nxt] as data:
                        got = crc32(data, got)
                    at, done = nxt, release(buf, done, nxt)
            if got != crc:
                self.notes.append(
                    f"{self._file}: data section CRC mismatch (stored {crc:08x}, data {got:08x})"
                )


def _data_crc_stored(buf: Buffer) -> bool:
    """A finished file whose DataEnd record (just before its summary section, or its footer
    where it has none) stores a CRC."""
    found = _footer(buf)
    if found is None:
        return False
    footer, summary_start, _offsets, _crc = found
    at = (summary_start if 8 < summary_start <= footer else footer) - len(_DATA_END) - 4
    return (
        at > 8
        and bytes(buf[at : at + len(_DATA_END)]) == _DATA_END
        and struct.unpack_from("<I", buf, at + len(_DATA_END))[0] != 0
    )


def _footer(buf: Buffer) -> tuple[int, int, int, int] | None:
    """(position, summary_start, summary_offset_start, summary_crc) of a finished file's
    Footer record; None for a file that was not closed."""
    if not _finished(buf):
        return None
    footer = len(buf) - 8 - 29
    return (footer, *struct.unpack_from("<QQI", buf, footer + 9))


def _finished(buf: Buffer) -> bool:
    """The file ends with a footer record and the closing magic (it was closed)."""
    end = len(buf)
    return end >= 8 + 29 + 8 and bytes(buf[end - 8 :]) == _MCAP_MAGIC and buf[end - 37] == 0x02


def _chunk_header(buf: Buffer, pos: int) -> tuple | None:
    """(start, end, uncompressed size, crc, compression, data offset, compressed size) of a
    chunk record whose fields agree with its length (None where they do not: not a chunk)."""
    try:
        (length,) = struct.unpack_from("<Q", buf, pos + 1)
        start, stop, usize, crc, n = struct.unpack_from("<QQQII", buf, pos + 9)
        if n > 8:
            return None
        method = bytes(buf[pos + 41 : pos + 41 + n]).decode()
        (csize,) = struct.unpack_from("<Q", buf, pos + 41 + n)
    except (struct.error, UnicodeDecodeError):
        return None
    if method not in _COMPRESSIONS or length != 40 + n + csize or start > stop:
        return None
    return start, stop, usize, crc, method, pos + 49 + n, csize


def _held(buf: Buffer, pos: int) -> list[tuple[int, int]] | None:
    """(channel id, bytes of entries) of the message index records at `pos` (those after a
    chunk) that name messages; None where one is malformed."""
    out, end = [], len(buf)
    while pos + 9 + 6 <= end and buf[pos] == 0x07:
        (n,) = struct.unpack_from("<Q", buf, pos + 1)
        cid, size = struct.unpack_from("<HI", buf, pos + 9)
        if pos + 9 + n > end or size != n - 6:
            return None
        if size:
            out.append((cid, size))
        pos += 9 + n
    return out


def _resync(buf: Buffer, pos: int, end: int) -> int | None:
    """The next position from `pos` where a consistent chunk header or DataEnd starts."""
    data_end = buf.find(_DATA_END, pos, end)
    stop = data_end if data_end >= 0 else end
    while (c := buf.find(b"\x06", pos, stop)) >= 0:
        h = _chunk_header(buf, c)
        if h is not None and h[5] + h[6] <= end:
            return c
        pos = c + 1
    return data_end if data_end >= 0 else None


def _index_ok(body: bytes) -> bool:
    if len(body) < 6:
        return False
    _cid, n = struct.unpack_from("<HI", body)
    return n % 16 == 0 and n == len(body) - 6


def _schema(body: bytes, schemas: dict) -> None:
    sid, p = struct.unpack_from("<H", body)[0], 2
    name, p = _mcap_str(body, p)
    enc, p = _mcap_str(body, p)
    (n,) = struct.unpack_from("<I", body, p)
    if p + 4 + n > len(body):
        raise Cut
    schemas[sid] = (name, enc, body[p + 4 : p + 4 + n].decode())


def _mcap_str(body: bytes, p: int) -> tuple[str, int]:
    (n,) = struct.unpack_from("<I", body, p)
    if p + 4 + n > len(body):
        raise Cut
    return body[p + 4 : p + 4 + n].decode(), p + 4 + n
