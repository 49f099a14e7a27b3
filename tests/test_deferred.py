"""Truth images read from their chunks' first bytes (bag/deferred.py): the same message as
rosbags deserializes, never decompressed unless compared, and damage in one still found."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from test_integrity import Intact, copy_run, flip, verify_checked

from simconform.bag import deferred
from simconform.bag.deferred import DeferredImage, deferred_image, open_chunk
from simconform.bag.messages import TYPESTORE, T, image_array
from simconform.bag.reader import SourceBag

TRUTH = "/truth/camera/image"

try:  # as rosbags imports it
    from compression import zstd  # type: ignore[import-not-found]
except ImportError:
    from backports import zstd  # type: ignore[import-not-found,no-redef]


def _chunk(cid: int, log_ns: int, data: bytes) -> tuple[bytes, int]:
    """A zstd chunk holding one Message record, and its uncompressed size."""
    record = struct.pack("<BQHIQQ", 0x05, 22 + len(data), cid, 0, log_ns, log_ns) + data
    return zstd.compress(record, level=-1), len(record)


@settings(max_examples=150, deadline=None)
@given(
    frame_id=st.text(st.characters(codec="ascii", exclude_characters="\x00"), max_size=40),
    encoding=st.sampled_from(["rgb8", "bgr8", "mono8", "rgba8", "32FC1", ""]),
    height=st.integers(1, 12),
    width=st.integers(1, 12),
    pad=st.integers(0, 5),
    big=st.booleans(),
    sec=st.integers(-(2**31), 2**31 - 1),
    nanosec=st.integers(0, 999_999_999),
    seed=st.integers(0, 2**32 - 1),
)
def test_a_deferred_image_is_the_message_rosbags_reads(
    frame_id, encoding, height, width, pad, big, sec, nanosec, seed
) -> None:
    """Any Image (frame ids of every length move the CDR alignment of what follows): its
    header, size and pixels read from the chunk's first bytes are rosbags' deserialization of
    the whole; an encoding image_array does not read, or a big-endian flag, leaves it to
    rosbags (None)."""
    px = {"rgb8": 3, "bgr8": 3, "mono8": 1}.get(encoding, 4)
    step = width * px + pad
    pixels = np.random.default_rng(seed).integers(0, 256, height * step, dtype=np.uint8)
    msg = T["sensor_msgs/msg/Image"](
        header=T["std_msgs/msg/Header"](
            stamp=T["builtin_interfaces/msg/Time"](sec=sec, nanosec=nanosec), frame_id=frame_id
        ),
        height=height,
        width=width,
        encoding=encoding,
        is_bigendian=int(big),
        step=step,
        data=pixels,
    )
    data = bytes(TYPESTORE.serialize_cdr(msg, deferred.IMAGE))
    chunk, size = _chunk(7, 123, data)
    cid, log_ns, raw = open_chunk(chunk, 0, size)
    assert (cid, log_ns, len(raw)) == (7, 123, len(data))
    assert bytes(raw.data()) == data
    got = deferred_image(raw)
    if encoding not in ("rgb8", "bgr8", "mono8") or big:
        assert got is None
        return
    assert isinstance(got, DeferredImage)
    fields = ("height", "width", "encoding", "is_bigendian", "step")
    assert [getattr(got, f) for f in fields] == [getattr(msg, f) for f in fields]
    assert got.header == msg.header
    assert np.array_equal(image_array(got), image_array(msg))
    assert got.shape == image_array(msg).shape


def test_a_chunk_holding_anything_else_is_read_whole() -> None:
    """A chunk whose one record is not a Message, or that holds more than one record, or
    whose size disagrees with its header, is not deferred."""
    chunk, size = _chunk(1, 5, b"x" * 1000)
    assert open_chunk(chunk, 0, size) is not None
    assert open_chunk(chunk, 0, size + 1) is None  # another record would follow
    other = zstd.compress(b"\x04" + bytes(40), level=-1)  # a Channel record
    assert open_chunk(other, 0, 41) is None
    assert open_chunk(b"not zstd at all", 0, 100) is None


def test_the_runs_truth_images_deferred_are_the_ones_read_whole(short_run: Path) -> None:
    """The demo's truth images, read by the one-pass scan with their topic deferred: each is a
    DeferredImage equal to rosbags' reading of the same message, pixels included."""
    src = SourceBag(short_run / "bag", one_pass=True)
    try:
        lazy = [
            (log, src.deserialize(raw, m))
            for _t, m, log, raw in src.messages({TRUTH}, frozenset({TRUTH}))
        ]
    finally:
        src.close()
    whole = SourceBag(short_run / "bag")
    try:
        ref = [(log, whole.deserialize(raw, m)) for _t, m, log, raw in whole.messages({TRUTH})]
    finally:
        whole.close()
    assert len(lazy) == len(ref) > 20 and src.one_pass_clean
    for (log, got), (log2, want) in zip(lazy, ref):
        assert isinstance(got, DeferredImage) and log == log2
        assert _fields(got) == _fields(want)  # the bag's own types (rosbags) or ours
        assert np.array_equal(image_array(got), image_array(want))


def _fields(msg) -> tuple:
    h = msg.header
    rest = (msg.height, msg.width, msg.encoding, msg.is_bigendian, msg.step)
    return (h.stamp.sec, h.stamp.nanosec, h.frame_id, *rest)


def test_truth_images_not_compared_are_never_decompressed(
    short_run: Path, tmp_path: Path, monkeypatch
) -> None:
    """verify decompresses a JPEG camera's truth image only for the frames it compares and the
    first three (the histogram, the figure); its report is the one of reading every image
    whole. A flipped byte in an image never decompressed fails the data section CRC: verify
    then reads the bag again the checked way, which names the chunk, and its report is the
    checked reading's."""
    from simconform.verify import camera, verifier

    monkeypatch.setattr(camera, "JPEG_PREDICTION_FRAMES", 5)  # 30 frames: every 6th compared
    opened: list[int] = []
    data = deferred.Deferred.data
    monkeypatch.setattr(deferred.Deferred, "data", lambda self: opened.append(1) or data(self))
    run = copy_run(short_run, tmp_path / "run")
    lazy = verifier.verify_run(run, write=False, jobs=0)
    paired = lazy["sensors"]["camera"]["frames_paired"]
    assert len(opened) == sum(1 for i in range(paired) if i % 6 == 0 or i < 3) < paired - 10
    with monkeypatch.context() as m:
        m.setattr("simconform.bag.salvage.mcap.open_chunk", lambda *a: None)  # all read whole
        whole = verifier.verify_run(run, write=False, jobs=0)
    for report in (lazy, whole):
        report.pop("provenance")
    assert lazy == whole

    intact = Intact(run / "bag" / "bag.mcap")
    truths = [k for k, (_s, _e, msgs) in enumerate(intact.chunks) if msgs[0][0] == TRUTH]
    k = truths[4]  # the fifth frame: neither compared nor in the histogram
    start, end, _m = intact.chunks[k]
    flip(run / "bag" / "bag.mcap", end - 3)  # in the chunk's last zstd block, past its head
    opened.clear()
    one = verifier.verify_run(run, write=False, jobs=0)
    checked = verify_checked(run)
    integrity = one["run"]["integrity"]
    assert integrity["status"] == "damaged"
    assert integrity["read_with"] == "checked scan (damaged chunks skipped)"
    assert f"chunk {k + 1} at byte {start}" in str(integrity)
    one.pop("provenance"), checked.pop("provenance")
    assert one == checked
