"""The MCAP writer (bag/storage.py): no chunk without a message, and a data section CRC summed
from the bytes the writer produced, so it vouches for chunks a reader does not decompress."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from mcap.reader import make_reader
from test_integrity import top_records

from simconform.bag.messages import T
from simconform.bag.reader import SourceBag
from simconform.bag.writer import BagRecorder

IMAGE = "sensor_msgs/msg/Image"


def _image(sec: int, value: int = 0):
    return T[IMAGE](
        header=T["std_msgs/msg/Header"](
            stamp=T["builtin_interfaces/msg/Time"](sec=sec, nanosec=0), frame_id="camera"
        ),
        height=480,
        width=640,
        encoding="rgb8",
        is_bigendian=0,
        step=1920,
        data=np.full(921_600, value, np.uint8),  # 900 KiB: a chunk of its own
    )


def test_a_new_topics_first_large_message_writes_no_empty_chunk(tmp_path: Path) -> None:
    """A topic's connection is added when its first message is queued, which puts its records
    in the pending chunk; a large message then closed that chunk with no message in it (its
    times 2^63 - 1 and 0), which the checked scan reported as damage in an intact bag. Every
    chunk now holds a message, and every reader reads the bag clean."""
    rec = BagRecorder(tmp_path / "bag")
    rec.push("/a", IMAGE, _image(0), 0)
    rec.advance(0)
    rec.push("/b", IMAGE, _image(1), 1)  # a new connection, then its large message
    rec.advance(None)
    rec.writer.close()
    path = tmp_path / "bag" / "bag.mcap"
    data = path.read_bytes()
    for op, start, _end in top_records(data):
        if op == 0x06:
            t0, t1 = np.frombuffer(data[start + 9 : start + 25], "<u8")
            assert t0 <= t1 < 2**63 - 1
    src = SourceBag(tmp_path / "bag")
    try:
        got = [(t, log) for t, _m, log, _r in src.messages({"/a", "/b"})]
    finally:
        src.close()
    assert got == [("/a", 0), ("/b", 1)] and not src.damaged and not src.notes
    with open(path, "rb") as fh:
        assert len(list(make_reader(fh, validate_crcs=True).iter_messages())) == 2


def test_a_bag_closed_before_its_first_message_reads_clean(tmp_path: Path) -> None:
    """A run stopped before its first message is written leaves a bag of connections only:
    its one chunk holds their records and no message, with the MCAP spec's times for that (0
    and 0), so it is read as an empty, intact bag, not as damage."""
    rec = BagRecorder(tmp_path / "bag")
    rec.connection("/imu", "sensor_msgs/msg/Imu")
    rec.advance(None)
    rec.writer.close()
    src = SourceBag(tmp_path / "bag")
    try:
        assert list(src.messages({"/imu"})) == []
        assert [c.topic for c in src.connections] == ["/imu"]
    finally:
        src.close()
    assert not src.damaged and not src.notes and src.read_with == "rosbags"
    with open(tmp_path / "bag" / "bag.mcap", "rb") as fh:
        assert list(make_reader(fh, validate_crcs=True).iter_messages()) == []


def test_damage_before_the_close_fails_the_data_section_crc(tmp_path: Path) -> None:
    """A byte of a written chunk changed in the file before the bag is closed (the write
    path: page cache, disk): the data section CRC, summed as the writer wrote, no longer
    matches, so a reading that leaves the chunk undecompressed, the deferred truth image
    included, is not clean and verify reads the bag the checked way, which finds the chunk."""
    topic = "/truth/camera/image"
    rec = BagRecorder(tmp_path / "bag")
    for k in range(3):
        rec.push(topic, IMAGE, _image(k, 40 * k), k)
        rec.advance(k)
    path = tmp_path / "bag" / "bag.mcap"
    chunks = [(s, e) for op, s, e in top_records(path.read_bytes()) if op == 0x06]
    start, end = chunks[1]
    fd = os.open(path, os.O_RDWR)
    try:
        byte = os.pread(fd, 1, end - 3)
        os.pwrite(fd, bytes([byte[0] ^ 0x10]), end - 3)  # past the image's header
    finally:
        os.close(fd)
    rec.advance(None)
    rec.writer.close()
    src = SourceBag(tmp_path / "bag", one_pass=True)
    try:
        stamps = [
            src.deserialize(raw, m).header.stamp.sec
            for _t, m, _log, raw in src.messages({topic}, frozenset({topic}))
        ]
    finally:
        src.close()
    assert stamps == [0, 1, 2]  # the header reads; the pixels were never decompressed
    assert not src.one_pass_clean and any("data section CRC mismatch" in n for n in src.notes)
    checked = SourceBag(tmp_path / "bag")
    try:
        assert len(list(checked.messages({topic}))) == 2
    finally:
        checked.close()
    (damage,) = checked.damaged
    assert damage.where.endswith(f"at byte {start}") and damage.messages == {topic: 1}
