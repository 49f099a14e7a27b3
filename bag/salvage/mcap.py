"""Salvage of an MCAP file cut off mid-write: its records in file order, up to the cut.

rosbags' MCAP reader starts from the summary section at the end of the file, which a cut
file lacks. The `mcap` package's StreamReader (1.6) reads records in order but reads each
chunk whole, so the chunk that the cut runs through raises EndOfFile and every message in it
is lost; with the large chunks rosbag2 writes that is most of a short bag (measured on a
1.7 MB rosbags-written bag cut at 50 %: 0 messages, against 1546 here; at 70 %: 1930
against 2107). This scan decompresses a cut chunk's prefix with a streaming decompressor and
keeps the complete records at its start, so it reads up to the last complete message.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from rosbags.typesys.msg import normalize_msgtype

from simconform.bag.salvage.base import Buffer, Cut, NotABag, Salvage, decompress

_MCAP_MAGIC = b"\x89MCAP0\r\n"


class McapScan(Salvage):
    """MCAP records in file order (schemas, channels and messages, also inside chunks)."""

    format = "rosbag2 (mcap)"

    def scan(self) -> Iterator[tuple[int, int, bytes]]:
        self.stop_reason, self.clean_end = "end of data", False
        for path, buf in zip(self.files, self.maps):
            if bytes(buf[:8]) != _MCAP_MAGIC:
                raise NotABag(f"{path.name} does not start with the MCAP magic")
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
                    inner = decompress(body[p + 8 : p + 8 + n], method, partial=cut)
                    ok = yield from self._records(inner, 0, len(inner), schemas)
                    if cut or not ok:
                        return False
                elif op in (0x0F, 0x02):  # data end, footer
                    return True
            except (Cut, struct.error, ValueError, UnicodeDecodeError, OSError):
                return False
            except Exception:  # a damaged compressed chunk (zstd/lz4 errors have many types)
                return False
        return not top


def _mcap_str(body: bytes, p: int) -> tuple[str, int]:
    (n,) = struct.unpack_from("<I", body, p)
    if p + 4 + n > len(body):
        raise Cut
    return body[p + 4 : p + 4 + n].decode(), p + 4 + n
