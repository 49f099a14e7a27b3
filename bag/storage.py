"""rosbags' bag writers made to keep what they wrote: MCAP with CRCs, sqlite3 committed as it goes.

MCAP: rosbags' writer with the CRCs it leaves at zero (every chunk, the data section, the
summary).

rosbags (0.11) writes each CRC field of an MCAP file as 0, "not available", so a flipped byte
inside a chunk decompresses to plausible garbage that every reader accepts (issue 15 measured
range_std 9.4e35 from one flipped byte). `CrcMcapWriter` fills the three fields in:

- Chunk `uncompressed_crc`: CRC-32 of the chunk's uncompressed records, computed before rosbags
  writes the chunk and put into the record as rosbags writes it (9 + 24 bytes into it: opcode,
  length, start, end, uncompressed size). rosbags' reader, the mcap libraries and
  simconform.bag.salvage.mcap check it.
- DataEnd `data_section_crc`: CRC-32 of every byte from the start of the file up to the DataEnd
  record (as the mcap libraries compute it: magic and header included), summed as the bytes
  are written (`_Summed`), so that it vouches for what the writer produced, not for what a
  read back would find: a reader that leaves a chunk undecompressed (the chunks of topics it
  does not read, a truth image it does not compare: bag/salvage/mcap.py, bag/deferred.py)
  relies on it as on the chunk's own CRC. Footer `summary_crc`: from the summary section's
  start through the Footer's summary_offset_start field, read back once rosbags has closed
  the file (the summary is written at once, at the close). Both are patched in then.

CRC-32 comes from ISA-L (`isal`), the same polynomial as zlib's at 12.6 against 2.1 GB/s on
the build machine: a camera run's chunks hold about 10 MB of raw images per simulated second,
and every byte is summed when written and again when verified.

Why a subclass and not the `mcap` package's writer: rosbags also writes metadata.yaml and the
rosbag2 metadata record, and the bags must stay byte-identical for the same inputs and seed;
the subclass changes nothing but the three CRC fields (positions fixed by the MCAP spec and
checked before each patch), and writes no chunk with its message times at 2^63 - 1 and 0,
which readers refuse as damage: rosbags puts the schema and channel records of new
connections in the pending chunk, and wrote them so when it closed that chunk before a
message of a chunk of its own (below), or closed a bag before its first message. The records
now stay with the message, and a chunk left without one has the times the MCAP spec gives
it, 0 and 0. Each chunk is flushed to the operating system as it is written, so
a process killed mid-run leaves every complete chunk in the file.

sqlite3: rosbags' writer holds the whole bag in one transaction, committed on close; a process
killed mid-run leaves a hot journal, and the first program that opens the database rolls it
back to an empty bag. `CommittingSqlite3Writer` commits after about every MiB of message data
(what an MCAP chunk holds), so a killed run keeps every committed message. SQLite itself
checks only the structure of the file (`PRAGMA integrity_check`), not the contents of a row:
a flipped byte inside a message is found by the SHA-256 that run.json records of every file.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import ClassVar

from isal.isal_zlib import crc32  # zlib's CRC-32, 6x faster (ISA-L; bag/storage.py)
from rosbags.rosbag2 import StoragePlugin, Writer
from rosbags.rosbag2.storage_mcap import McapWriter
from rosbags.rosbag2.storage_sqlite3 import Sqlite3Writer

from simconform.bag.codec import zstd

_MAGIC = b"\x89MCAP0\r\n"
_CHUNK_CRC = 9 + 24  # opcode u8, length u64, message start/end u64, uncompressed size u64
_FOOTER = 1 + 8 + 8 + 8 + 4  # opcode, length, summary_start, summary_offset_start, summary_crc
_DATA_END = 1 + 8 + 4  # opcode, length, data_section_crc
_BLOCK = 1 << 20
_MESSAGE = struct.Struct("<BQHIQQ")


def _zstd_fast(data: bytes) -> bytes:
    """zstd's fast level -1: a run's chunks are mostly raw truth images, flat colours and
    smooth depth. On the demo's bag (`python bench/bagio.py RUN`, 2026-12-06) level 3, rosbags'
    default, keeps 0.097 of the size for 6.5 CPU-s of encoding and 3.5 of decoding per reader;
    level 1 0.102 for 4.2 and 3.5; -1 0.107 for 3.2 and 3.0; -3 0.116 for 3.0 and 3.8. The
    recording fills the cores, so its CPU is its wall: -1 saves about 2 CPU-s of a demo run
    (one encoding, two readers decoding) for 5 % more bag."""
    return zstd.compress(data, level=-1)


OWN_CHUNK = 1 << 19
"""A message this large (512 KiB: a truth image, a depth image, a dense lidar's cloud) is
written in a chunk of its own. A reader that does not want its topic then skips the chunk
without decompressing it (bag/salvage/mcap.py): verify's main process reads no camera image,
and no verify reader reads depth. On the 200 s demo that is 4.3 of the 4.9 GB the main
process decompressed, and 2.5 GB of the camera reader's."""


class CrcMcapWriter(McapWriter):
    """rosbags' McapWriter that writes each chunk's CRC and, on close, the data and summary
    CRCs; zstd chunks at level -1 (`_zstd_fast`); a message of `OWN_CHUNK` bytes or more in a
    chunk of its own."""

    def write(self, connection, timestamp: int, data) -> None:
        """rosbags' McapWriter.write, byte for byte the same Message record, written straight
        into the chunk: rosbags copies each message twice on the way (a truth image is MiBs)."""
        self.message_start_time = min(timestamp, self.message_start_time)
        self.message_end_time = max(timestamp, self.message_end_time)
        self.channel_stats[connection.id] += 1
        size = memoryview(data).nbytes
        if size >= OWN_CHUNK and self.chunk.msgs:  # new connections' records stay with it
            self.close_chunk()
        chunk = self.chunk
        chunk.message_start_time = min(timestamp, chunk.message_start_time)
        chunk.message_end_time = max(timestamp, chunk.message_end_time)
        chunk.msgs[connection.id].append((timestamp, chunk.bio.tell()))
        # opcode 0x05, record length, channel id, sequence 0, log time, publish time
        chunk.bio.write(_MESSAGE.pack(0x05, 22 + size, connection.id, 0, timestamp, timestamp))
        chunk.bio.write(data)
        if chunk.bio.tell() > 2**20 or size >= OWN_CHUNK:
            self.close_chunk()

    def __init__(self, path: Path, compression) -> None:
        super().__init__(path, compression)
        if self.compression == "zstd":
            self.compressor = _zstd_fast
        self.bio.flush()  # rosbags wrote the magic and the header: summed from here on
        self.bio = _Summed(self.bio, self.path.read_bytes())

    def close_chunk(self) -> None:
        if not self.chunk.msgs:  # schema and channel records alone (a bag closed before its
            self.chunk.message_start_time = 0  # first message): the MCAP spec's times, 0 and 0
        with self.chunk.bio.getbuffer() as records:
            crc = crc32(records)
        start = self.bio.tell()
        self.bio.expect(start, struct.pack("<I", crc))
        super().close_chunk()
        if self.bio.chunk_at is not None:
            raise RuntimeError(f"{self.path}: no chunk record at byte {start}")
        self.bio.flush()  # the complete chunk reaches the OS: a killed run keeps it

    def close(self, version: int, metadata: str) -> None:
        self.bio.closing = True  # the DataEnd record comes in this call
        super().close(version, metadata)
        seal(self.path, self.bio.data_end)


class _Summed:
    """The bag file as rosbags writes it, with the CRC-32 of every byte written so far: at the
    DataEnd record (`data_end`: its offset and the CRC of what precedes it) that is the data
    section CRC. `expect(start, crc)`: the chunk record rosbags writes next at `start` gets
    `crc` in its CRC field (rosbags writes 0 there) on its way into the file."""

    def __init__(self, fh, written: bytes) -> None:
        self.fh, self.pos, self.crc = fh, len(written), crc32(written)
        self.chunk_at: int | None = None
        self.chunk_crc = b""
        self.closing = False
        self.data_end: tuple[int, int] | None = None

    def expect(self, start: int, crc: bytes) -> None:
        self.chunk_at, self.chunk_crc = start, crc

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        n = view.nbytes
        at = self.chunk_at
        if at is not None and self.pos == at and (n != 1 or view[0] != 0x06):
            raise RuntimeError(f"{self.fh.name}: no chunk record at byte {at}")
        if at is not None and self.pos <= at + _CHUNK_CRC < self.pos + n:
            k = at + _CHUNK_CRC - self.pos
            if view[k : k + 4] != bytes(4):
                raise RuntimeError(f"{self.fh.name}: chunk at byte {at} has a CRC already")
            self._put(view[:k])
            self._put(memoryview(self.chunk_crc))
            self._put(view[k + 4 :])
            self.chunk_at = None
            return n
        if self.closing and self.data_end is None and n == 1 and view[0] == 0x0F:
            self.data_end = (self.pos, self.crc)  # DataEnd's opcode: the data section ends
        self._put(view)
        return n

    def _put(self, view: memoryview) -> None:
        self.crc = crc32(view, self.crc)
        self.pos += view.nbytes
        self.fh.write(view)

    def tell(self) -> int:
        return self.pos

    def __getattr__(self, name: str):
        return getattr(self.fh, name)  # flush, close, name


def seal(path: Path, data_end_crc: tuple[int, int] | None = None) -> None:
    """Write the DataEnd and Footer CRCs of a closed MCAP file (rosbags leaves them at 0).
    `data_end_crc`: the DataEnd record's offset and the data section's CRC as the writer summed
    it (`_Summed`); None to sum the file as it is now."""
    with open(path, "r+b") as fh:
        size = fh.seek(0, 2)
        fh.seek(size - 8 - _FOOTER)
        tail = fh.read(_FOOTER + 8)
        op, length, summary_start, _offsets = struct.unpack_from("<BQQQ", tail)
        if tail[-8:] != _MAGIC or op != 0x02 or length != 20 or summary_start < _DATA_END:
            raise RuntimeError(f"{path}: unexpected MCAP footer {tail!r}")
        data_end = summary_start - _DATA_END
        fh.seek(data_end)
        op, length = struct.unpack("<BQ", fh.read(9))
        if op != 0x0F or length != 4:
            raise RuntimeError(f"{path}: no DataEnd record at byte {data_end}")
        footer = size - 8 - _FOOTER
        if data_end_crc is not None and data_end_crc[0] != data_end:
            raise RuntimeError(f"{path}: DataEnd at byte {data_end}, written at {data_end_crc[0]}")
        data_crc = _crc(fh, 0, data_end) if data_end_crc is None else data_end_crc[1]
        summary_crc = _crc(fh, summary_start, footer + _FOOTER - 4)
        fh.seek(data_end + 9)
        fh.write(struct.pack("<I", data_crc))
        fh.seek(footer + _FOOTER - 4)
        fh.write(struct.pack("<I", summary_crc))


def _crc(fh, start: int, end: int) -> int:
    fh.seek(start)
    crc, left = 0, end - start
    while left > 0:
        block = fh.read(min(_BLOCK, left))
        if not block:
            raise RuntimeError(f"{fh.name}: file ends at byte {end - left}")
        crc = crc32(block, crc)
        left -= len(block)
    return crc


class CommittingSqlite3Writer(Sqlite3Writer):
    """rosbags' Sqlite3Writer committing after about every MiB of message data."""

    COMMIT_BYTES = 1 << 20

    def write(self, connection, timestamp: int, data) -> None:
        super().write(connection, timestamp, data)
        self._pending = getattr(self, "_pending", 0) + len(data)
        if self._pending >= self.COMMIT_BYTES:
            self.conn.commit()
            self._pending = 0


class CrcWriter(Writer):
    """rosbags' rosbag2 Writer with the storage writers above."""

    STORAGE_PLUGINS: ClassVar = {
        StoragePlugin.MCAP: CrcMcapWriter,
        StoragePlugin.SQLITE3: CommittingSqlite3Writer,
    }
