"""Salvage of a ROS 1 bag cut off mid-write (a `.bag.active` file): records in file order.

rosbags' ROS 1 reader needs the index that a bag gets when it is closed (the index data and
chunk info records at the end, found through the file header's index position); a recorder
killed mid-write leaves none, and ROS 1's own `rosbag reindex`, which rebuilds it, needs a
ROS 1 installation. This scan walks the records from the start (connections and messages,
also inside chunks, a cut chunk's complete records included) up to the last complete one.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from rosbags.typesys.msg import normalize_msgtype

from simconform.bag.salvage.base import Buffer, NotABag, Salvage, decompress

_ROS1_MAGIC = b"#ROSBAG V2.0\n"


class Ros1Scan(Salvage):
    """ROS 1 bag v2.0 records in file order (connections and messages inside chunks)."""

    format = "rosbag1"
    is_ros1 = True

    def scan(self) -> Iterator[tuple[int, int, bytes]]:
        self.stop_reason = "end of file"
        for path, buf in zip(self.files, self.maps):
            if bytes(buf[: len(_ROS1_MAGIC)]) != _ROS1_MAGIC:
                raise NotABag(f"{path.name} does not start with the ROS 1 bag magic")
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
                    inner = decompress(data, h["compression"].decode(), partial=cut)
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
