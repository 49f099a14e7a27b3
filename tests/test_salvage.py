"""Salvage scans (simconform.bag.salvage) on bags written with rosbags' own writers, then cut
off or stripped of their summary or index the way a recorder killed mid-write leaves them.

Each scan must give back exactly the messages whose records are complete in the file, with
their topics, log times and bytes, and nothing else. Which ones are complete is found
independently of the scans: every payload is unique, so its offset in the intact file says
where its record ends (MCAP, ROS 1: the payload ends the record) or on which page it lies
(sqlite: a row is readable when its whole leaf page is).
"""

from __future__ import annotations

import bz2
import sqlite3
import struct
from pathlib import Path

import numpy as np
import pytest
from rosbags.rosbag1 import Writer as Writer1
from rosbags.rosbag2 import StoragePlugin
from rosbags.rosbag2 import Writer as Writer2
from rosbags.rosbag2.enums import CompressionFormat, CompressionMode
from rosbags.typesys import Stores, get_typestore

from simconform.bag.reader import SourceBag, UnreadableBag, open_bag
from simconform.bag.salvage import McapScan, NotABag, Ros1Scan, SqliteScan, salvage_for
from simconform.bag.salvage.base import decompress
from simconform.bag.salvage.sqlite import _record, _varint

ROS2 = get_typestore(Stores.ROS2_JAZZY)
ROS1 = get_typestore(Stores.ROS1_NOETIC)
STRING = "std_msgs/msg/String"
T0 = 5_000_000_000

Item = tuple[str, int, bytes]  # (topic, log_ns, serialized message)


def items(n: int, size: int, ros1: bool = False, seed: int = 0) -> list[Item]:
    """n String messages on two topics with unique, incompressible payloads."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        msg = ROS2.types[STRING](data=f"{i:06d} {rng.bytes(size).hex()}")
        raw = ROS1.serialize_ros1(msg, STRING) if ros1 else ROS2.serialize_cdr(msg, STRING)
        out.append(("/a" if i % 3 else "/b", T0 + i * 1_000_000, bytes(raw)))
    return out


def write2(path: Path, plugin: StoragePlugin, msgs: list[Item], zstd: bool = False) -> Path:
    """A rosbag2 folder; returns its data file (.mcap or .db3)."""
    w = Writer2(path, version=9, storage_plugin=plugin)
    if zstd:
        w.set_compression(CompressionMode.STORAGE, CompressionFormat.ZSTD)
    with w:
        conns = {t: w.add_connection(t, STRING, typestore=ROS2) for t in ("/a", "/b")}
        for topic, log, raw in msgs:
            w.write(conns[topic], log, raw)
    return next(p for p in path.iterdir() if p.suffix in (".mcap", ".db3"))


def write1(path: Path, msgs: list[Item], chunk: int, compression: str | None = None) -> Path:
    w = Writer1(path)
    if compression is not None:
        w.set_compression(Writer1.CompressionFormat[compression.upper()])
    w.chunk_threshold = chunk
    with w:
        conns = {t: w.add_connection(t, STRING, typestore=ROS1) for t in ("/a", "/b")}
        for topic, log, raw in msgs:
            w.write(conns[topic], log, raw)
    return path


def scanned(scan) -> list[Item]:
    """Everything a scan yields, as (topic, log_ns, bytes), and closes it."""
    try:
        return [(scan.conns[cid][0], log, bytes(raw)) for cid, log, raw in scan.scan()]
    finally:
        scan.close()


def ends(data: bytes, msgs: list[Item]) -> list[int]:
    """The offset just past each payload in the intact file (each occurs exactly once)."""
    out = []
    for _t, _log, raw in msgs:
        assert data.count(raw) == 1
        out.append(data.index(raw) + len(raw))
    return out


def cut_to(path: Path, data: bytes, n: int) -> None:
    path.write_bytes(data[:n])


# --------------------------------------------------------------------------- MCAP


@pytest.fixture(scope="module")
def mcap_plain(tmp_path_factory) -> tuple[Path, bytes, list[Item]]:
    msgs = items(1500, 300)
    f = write2(tmp_path_factory.mktemp("mcap") / "b", StoragePlugin.MCAP, msgs)
    return f, f.read_bytes(), msgs


@pytest.mark.parametrize("at", [0.4, 0.8, "boundary", "boundary-1"])
def test_mcap_cut_gives_every_complete_message(mcap_plain, at) -> None:
    f, data, msgs = mcap_plain
    end = ends(data, msgs)
    # "boundary": exactly at the end of message 700's record; "boundary-1": one byte short
    n = end[700] - (at == "boundary-1") if isinstance(at, str) else int(len(data) * at)
    try:
        cut_to(f, data, n)
        scan = McapScan([f])
        assert scan.clean_end is False and f"cut off after byte {n}" in scan.stop_reason
        got = scanned(scan)
    finally:
        f.write_bytes(data)
    want = [m for m, e in zip(msgs, end) if e <= n]
    assert got == want
    if at == "boundary":
        assert len(got) == 701
    if at == "boundary-1":
        assert len(got) == 700


def test_mcap_without_summary_reads_the_whole_data_section(mcap_plain) -> None:
    """A file whose summary and footer are lost but whose data section ended (DataEnd)."""
    f, data, msgs = mcap_plain
    footer = len(data) - 8 - (9 + 20)
    assert data[footer] == 0x02
    (summary_start,) = struct.unpack_from("<Q", data, footer + 9)
    try:
        cut_to(f, data, summary_start)
        scan = McapScan([f])
        assert scan.clean_end is True and "data section complete" in scan.stop_reason
        assert scanned(scan) == msgs
    finally:
        f.write_bytes(data)


def test_mcap_zstd_chunk_cut_gives_its_complete_records(tmp_path: Path) -> None:
    """A cut inside the first compressed chunk: its decompressible prefix is read (a reader
    that needs whole chunks gets nothing here)."""
    msgs = items(3000, 400, seed=1)
    f = write2(tmp_path / "b", StoragePlugin.MCAP, msgs, zstd=True)
    data = f.read_bytes()
    assert b"zstd" in data[:200]
    cut_to(f, data, len(data) // 5)
    got = scanned(McapScan([f]))
    assert 0 < len(got) < len(msgs) and got == msgs[: len(got)]


def test_mcap_without_magic_is_not_a_bag(tmp_path: Path) -> None:
    f = tmp_path / "x.mcap"
    f.write_bytes(b"not an mcap file" * 10)
    with pytest.raises(NotABag, match="MCAP magic"):
        McapScan([f])


# --------------------------------------------------------------------------- ROS 1


@pytest.fixture(scope="module")
def ros1_plain(tmp_path_factory) -> tuple[Path, bytes, list[Item]]:
    msgs = items(1500, 300, ros1=True)
    f = write1(tmp_path_factory.mktemp("ros1") / "b.bag", msgs, chunk=64 * 1024)
    return f, f.read_bytes(), msgs


def index_pos(data: bytes) -> int:
    """The bag header record's index_pos: where the index (written on close) begins."""
    p = len(b"#ROSBAG V2.0\n")
    (hlen,) = struct.unpack_from("<I", data, p)
    head, q = data[p + 4 : p + 4 + hlen], 0
    while q < len(head):
        (n,) = struct.unpack_from("<I", head, q)
        key, value = head[q + 4 : q + 4 + n].split(b"=", 1)
        if key == b"index_pos":
            return struct.unpack("<Q", value)[0]
        q += 4 + n
    raise AssertionError("no index_pos")


@pytest.mark.parametrize("at", [0.3, 0.75, "boundary", "boundary-1"])
def test_ros1_cut_gives_every_complete_message(ros1_plain, at) -> None:
    f, data, msgs = ros1_plain
    end = ends(data, msgs)
    n = end[900] - (at == "boundary-1") if isinstance(at, str) else int(len(data) * at)
    try:
        cut_to(f, data, n)
        scan = Ros1Scan([f])
        assert "cut off after byte" in scan.stop_reason
        got = scanned(scan)
    finally:
        f.write_bytes(data)
    assert got == [m for m, e in zip(msgs, end) if e <= n]
    if isinstance(at, str):
        assert len(got) == (901 if at == "boundary" else 900)


@pytest.mark.parametrize("compression", [None, "lz4", "bz2"])
def test_ros1_without_index_reads_every_chunk(tmp_path: Path, compression) -> None:
    """A bag whose recorder died after its last chunk: no index, every message readable."""
    msgs = items(600, 300, ros1=True, seed=2)
    f = write1(tmp_path / "b.bag", msgs, chunk=32 * 1024, compression=compression)
    data = f.read_bytes()
    active = tmp_path / "b.bag.active"
    active.write_bytes(data[: index_pos(data)])
    f.unlink()
    scan = salvage_for(active)
    assert isinstance(scan, Ros1Scan) and scan.count == len(msgs)
    assert scan.stop_reason == "end of file"
    got = scanned(scan)
    assert got == msgs


def test_ros1_lz4_chunk_cut_gives_its_complete_records(tmp_path: Path) -> None:
    """A cut inside the first (lz4) chunk: the records its complete blocks hold are read."""
    msgs = items(3000, 300, ros1=True, seed=5)
    f = write1(tmp_path / "b.bag", msgs, chunk=4 * 1024 * 1024, compression="lz4")
    data = f.read_bytes()
    cut_to(f, data, len(data) // 3)
    got = scanned(Ros1Scan([f]))
    assert 0 < len(got) < len(msgs) and got == msgs[: len(got)]


def test_ros1_deserializes_with_the_bag_s_own_definitions(ros1_plain) -> None:
    f, _data, _msgs = ros1_plain
    scan = Ros1Scan([f])
    try:
        _cid, _log, raw = next(iter(scan.scan()))
        assert scan.deserialize(raw, STRING).data.startswith("000000 ")
    finally:
        scan.close()


# --------------------------------------------------------------------------- sqlite3


@pytest.fixture(scope="module")
def db_plain(tmp_path_factory) -> tuple[Path, bytes, list[Item]]:
    msgs = items(900, 150)
    f = write2(tmp_path_factory.mktemp("db") / "b", StoragePlugin.SQLITE3, msgs)
    return f, f.read_bytes(), msgs


def test_sqlite_intact_reads_every_row(db_plain) -> None:
    f, _data, msgs = db_plain
    scan = SqliteScan([f])
    assert scan.clean_end is True
    assert scan.stop_reason == f"read {len(msgs)} messages from the leaf pages"
    assert scanned(scan) == msgs


@pytest.mark.parametrize("share", [0.3, 0.6, 0.9])
def test_sqlite_cut_gives_the_rows_of_every_complete_leaf_page(db_plain, share) -> None:
    f, data, msgs = db_plain
    (ps,) = struct.unpack_from(">H", data, 16)
    end = ends(data, msgs)
    n = int(len(data) * share)
    try:
        cut_to(f, data, n)
        with pytest.raises(sqlite3.DatabaseError, match="malformed"):  # why we salvage at all
            con = sqlite3.connect(f"file:{f}?mode=ro", uri=True)
            try:
                con.execute("SELECT timestamp FROM messages").fetchall()
            finally:
                con.close()
        scan = SqliteScan([f])
        assert scan.clean_end is False and f"{f.name} cut off" in scan.stop_reason
        got = scanned(scan)
    finally:
        f.write_bytes(data)
    complete_pages = n // ps
    want = [m for m, e in zip(msgs, end) if (e - 1) // ps < complete_pages]
    assert got == want and 0 < len(got) < len(msgs)


def test_sqlite_rows_with_overflow_pages(tmp_path: Path) -> None:
    """Messages larger than a page continue on overflow pages."""
    msgs = items(40, 6000, seed=3)
    f = write2(tmp_path / "b", StoragePlugin.SQLITE3, msgs)
    assert scanned(SqliteScan([f])) == msgs


def test_sqlite_that_is_not_sqlite(tmp_path: Path) -> None:
    f = tmp_path / "x.db3"
    f.write_bytes(b"\0" * 8192)
    with pytest.raises(NotABag, match="not an SQLite database"):
        SqliteScan([f])


def test_sqlite_varint_and_record() -> None:
    assert _varint(b"\x05", 0) == (5, 1)
    assert _varint(b"\x81\x00", 0) == (128, 2)
    assert _varint(b"\xff" * 8 + b"\x01", 0) == ((2**56 - 1) << 8 | 1, 9)
    # header: length 7, types NULL, 1-byte int, float, constant 1, 3-char text, 2-byte blob
    header = bytes([7, 0, 1, 7, 9, 12 + 2 * 3 + 1, 12 + 2 * 2])
    body = b"\xfe" + struct.pack(">d", 2.5) + b"abc" + b"\x00\x01"
    assert _record(header + body, None) == [None, -2, 2.5, 1, "abc", b"\x00\x01"]
    assert _record(header + body, 4) is None  # not the shape asked for


# --------------------------------------------------------------------------- common


def test_decompress_whole_and_partial() -> None:
    data = np.random.default_rng(4).bytes(300_000) * 2
    assert decompress(data, "") is data and decompress(data, "none") is data
    assert decompress(bz2.compress(data), "bz2") == data
    try:
        from compression import zstd  # type: ignore[import-not-found]
    except ImportError:  # before Python 3.14: rosbags' own dependency
        from backports import zstd  # type: ignore[import-not-found,no-redef]

    packed = zstd.compress(data)
    assert decompress(packed, "zstd") == data
    part = decompress(packed[: len(packed) // 2], "zstd", partial=True)
    assert 0 < len(part) < len(data) and data.startswith(part)
    with pytest.raises(ValueError, match="unknown compression"):
        decompress(data, "brotli")


def test_salvage_for_picks_the_scan_by_file_kind(tmp_path: Path, mcap_plain, db_plain) -> None:
    for folder, kind in ((mcap_plain[0].parent, McapScan), (db_plain[0].parent, SqliteScan)):
        scan = salvage_for(folder)
        scan.close()
        assert type(scan) is kind
    with pytest.raises(NotABag, match=r"no \.mcap or \.db3"):
        salvage_for(tmp_path)
    (tmp_path / "x.txt").write_text("x")
    with pytest.raises(NotABag, match="unknown file kind"):
        salvage_for(tmp_path / "x.txt")


# --------------------------------------------------------------------------- reader


def test_open_bag_names_the_unreadable_bag(tmp_path: Path) -> None:
    bad = tmp_path / "b"
    bad.mkdir()
    (bad / "metadata.yaml").write_text("nonsense: [\n")
    with pytest.raises(UnreadableBag) as exc:
        open_bag(bad)
    text = str(exc.value)
    assert text.startswith(f"{bad}: bag: got '{bad}'; expected a readable rosbag2 directory (")
    kind, message = exc.value.reason.split(": ", 1)  # the rosbags exception, for run.json
    assert kind.isidentifier() and text.endswith(f"({message})")


def test_source_bag_falls_back_to_the_salvage_scan(mcap_plain) -> None:
    f, data, msgs = mcap_plain
    end = ends(data, msgs)
    n = int(len(data) * 0.6)
    try:
        cut_to(f, data, n)
        src = SourceBag(f.parent)
        try:
            assert src.read_with == "salvage scan" and src.format == "rosbag2 (mcap)"
            assert src.open_error is not None
            got = [(t, log, raw) for t, _m, log, raw in src.messages({"/a", "/b"})]
            assert src.stop_reason is not None and src.stop_reason.startswith(src.open_error)
        finally:
            src.close()
    finally:
        f.write_bytes(data)
    assert got == [m for m, e in zip(msgs, end) if e <= n]
