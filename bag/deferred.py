"""A message alone in its MCAP chunk, read from the chunk's first bytes; the rest decompressed,
and the chunk's CRC checked, only when its data is asked for.

A camera's truth image is written in a chunk of its own (bag/storage.py OWN_CHUNK), and the
verifier compares about 40 of a run's frames with their truth (verify/camera.py); for every
other frame it needs the truth's stamp and size only. Decompressing a demo truth image took
1.6 ms, its first 512 bytes 0.1 ms (2,000 chunks of a 200 s demo bag, a script outside the
repository, 2026-12-07). A chunk read this way is vouched for by the data section CRC, as the
chunks of topics a reader skips are (bag/salvage/mcap.py `scan`): a mismatch there sends the
run to the checked reading, which decompresses every chunk (verify/reading.py). Asking for the
data of a damaged chunk raises `DeferredDamage`, a ValueError, which the verifier treats as it
treats any sample that fails to decode in a one-pass reading: it reads the run again the
checked way.
"""

from __future__ import annotations

import struct

import numpy as np
from isal.isal_zlib import crc32  # zlib's CRC-32, 6x faster (ISA-L; bag/storage.py)

from simconform.bag.codec import zstd
from simconform.bag.messages import T

HEAD = 512  # bytes of a chunk decompressed to read its message's record and header
RECORD = 31  # a Message record's opcode, length, channel, sequence, log and publish time
IMAGE = "sensor_msgs/msg/Image"
_ENCODINGS = {"rgb8": 3, "bgr8": 3, "mono8": 1}  # bytes per pixel of those image_array takes


class DeferredDamage(ValueError):
    """A deferred chunk that does not decompress, or whose CRC or size does not match."""


class Deferred:
    """The one message of a zstd chunk (`chunk`: its compressed bytes, `crc` and `size` from
    its header): `head`, the first bytes of the message's data, at once; `data()` on demand."""

    def __init__(self, chunk: bytes, crc: int, size: int, head: bytes) -> None:
        self.chunk, self.crc, self.size, self.head = chunk, crc, size, head

    def __len__(self) -> int:
        return self.size - RECORD

    def data(self) -> memoryview:
        """The message's data, its chunk decompressed and checked (DeferredDamage if not)."""
        try:
            inner = zstd.decompress(self.chunk)
        except Exception as exc:  # zstd errors have several types
            raise DeferredDamage(f"its chunk does not decompress ({exc})") from None
        if len(inner) != self.size or (self.crc and crc32(inner) != self.crc):
            raise DeferredDamage(
                f"its chunk's CRC or size does not match (stored {self.crc:08x}, data "
                f"{crc32(inner):08x}; {len(inner)} of {self.size} bytes)"
            )
        return memoryview(inner)[RECORD:]


def open_chunk(chunk: bytes, crc: int, size: int) -> tuple[int, int, Deferred] | None:
    """(channel id, log ns, Deferred) of a zstd chunk holding one Message record and nothing
    else, from its first HEAD bytes; None where it holds anything else or does not start
    decompressing (the caller then reads it whole, as any chunk)."""
    try:
        head = zstd.ZstdDecompressor().decompress(chunk, max_length=HEAD)
    except Exception:  # zstd errors have several types
        return None
    if len(head) < RECORD or head[0] != 0x05:
        return None
    length, cid, _seq, log_ns = struct.unpack_from("<QHIQ", head, 1)
    if 9 + length != size:
        return None
    return cid, log_ns, Deferred(chunk, crc, size, head[RECORD:])


class DeferredImage:
    """A sensor_msgs/msg/Image whose header and size are read and whose pixels are not yet:
    `data` decompresses its chunk (so `bag.messages.image_array` takes it as any Image)."""

    __msgtype__ = IMAGE

    def __init__(self, raw: Deferred, fields: tuple, at: int) -> None:
        sec, nanosec, frame_id, self.height, self.width, self.encoding, big, self.step = fields
        self.header = T["std_msgs/msg/Header"](
            stamp=T["builtin_interfaces/msg/Time"](sec=sec, nanosec=nanosec), frame_id=frame_id
        )
        self.is_bigendian = big
        self._raw, self._at = raw, at

    @property
    def shape(self) -> tuple[int, int, int]:
        """The (h, w, 3) array image_array makes of it."""
        return (self.height, self.width, 3)

    @property
    def data(self) -> np.ndarray:
        n = self.height * self.step
        return np.frombuffer(self._raw.data()[self._at : self._at + n], np.uint8)


def deferred_image(raw: Deferred) -> DeferredImage | None:
    """An Image from a Deferred's head (CDR, little-endian); None where the head does not
    hold the whole header, the encoding is not one image_array reads, or the data's length is
    not height x step (the caller then deserializes it whole, which raises as before)."""
    b = raw.head
    try:
        if b[:4] != b"\x00\x01\x00\x00":  # CDR little-endian
            return None
        sec, nanosec, n = struct.unpack_from("<iII", b, 4)
        p = 16 + n
        frame_id = bytes(b[16 : p - 1]).decode()
        p = 4 + -(-(p - 4) // 4) * 4  # aligned from the end of the encapsulation header
        height, width, n = struct.unpack_from("<III", b, p)
        p += 12 + n
        encoding = bytes(b[p - n : p - 1]).decode()
        big = b[p]
        p = 4 + -(-(p + 1 - 4) // 4) * 4
        step, size = struct.unpack_from("<II", b, p)
    except (struct.error, UnicodeDecodeError, IndexError):
        return None
    px = _ENCODINGS.get(encoding)
    if px is None or big or size != height * step or step < width * px:
        return None
    if p + 8 + size != len(raw):
        return None
    fields = (sec, nanosec, frame_id, height, width, encoding, big, step)
    return DeferredImage(raw, fields, p + 8)
