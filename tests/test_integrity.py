"""Integrity end to end (issue 15, items 4 and 5): checksums written, damage found and left out,
killed and interrupted runs verified over what they recorded.

Everything here is real: bags written by `simconform run`, bytes flipped and files cut in real
files, real SIGKILL and SIGTERM to a real `simconform run`. What a scan should read is found
independently of simconform's reader: the chunks of the intact file are walked with `struct`,
decompressed with `zstandard` and their channels named by the `mcap` package's summary, and
the `mcap` package (CRC validation on) checks the CRCs the writer stores.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path
from typing import ClassVar

import jsonschema
import numpy as np
import pytest
import zstandard
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from mcap.reader import make_reader
from mcap.stream_reader import StreamReader

from conftest import REPO, cli
from simconform.bag.reader import SourceBag
from simconform.errors import UserError

Msg = tuple[str, int, bytes]  # (topic, log_ns, serialized bytes)


# ----------------------------------------------------------------- the intact file, independently


def top_records(data: bytes) -> list[tuple[int, int, int]]:
    """(opcode, start, end) of the file's top-level records, up to and with the Footer."""
    out, pos = [], 8
    while pos + 9 <= len(data):
        op = data[pos]
        (n,) = struct.unpack_from("<Q", data, pos + 1)
        out.append((op, pos, pos + 9 + n))
        pos += 9 + n
        if op == 0x02:
            break
    return out


def chunk_messages(data: bytes, pos: int, topics: dict[int, str]) -> list[Msg]:
    """The messages of the chunk record at `pos`, in file order."""
    _start, _end, usize, crc, n = struct.unpack_from("<QQQII", data, pos + 9)
    method = data[pos + 41 : pos + 41 + n].decode()
    (csize,) = struct.unpack_from("<Q", data, pos + 41 + n)
    body = data[pos + 49 + n : pos + 49 + n + csize]
    inner = zstandard.ZstdDecompressor().decompress(body, max_output_size=usize)
    assert method == "zstd" and len(inner) == usize and zlib.crc32(inner) == crc
    out, p = [], 0
    while p < len(inner):
        op = inner[p]
        (k,) = struct.unpack_from("<Q", inner, p + 1)
        if op == 0x05:
            cid, _seq, log = struct.unpack_from("<HIQ", inner, p + 9)
            out.append((topics[cid], log, inner[p + 9 + 22 : p + 9 + k]))
        p += 9 + k
    return out


class Intact:
    """A finished bag file: its bytes, its chunks (start, end offsets) and their messages."""

    def __init__(self, path: Path) -> None:
        self.data = path.read_bytes()
        with open(path, "rb") as fh:
            summary = make_reader(fh).get_summary()
        topics = {cid: ch.topic for cid, ch in summary.channels.items()}
        recs = top_records(self.data)
        self.chunks = [(s, e, chunk_messages(self.data, s, topics)) for op, s, e in recs if op == 6]
        self.data_end = next(s for op, s, _e in recs if op == 0x0F)
        self.footer = next(s for op, s, _e in recs if op == 0x02)
        self.index = [(s, e) for op, s, e in recs if op == 0x07]

    def messages(self, skip: set[int] = frozenset(), upto: int | None = None) -> list[Msg]:
        """Every message of the chunks not in `skip` (chunk numbers) and ending by `upto`."""
        return [
            m
            for k, (_s, e, msgs) in enumerate(self.chunks)
            if k not in skip and (upto is None or e <= upto)
            for m in msgs
        ]

    def chunk_at(self, offset: int) -> int | None:
        return next((k for k, (s, e, _m) in enumerate(self.chunks) if s <= offset < e), None)


@pytest.fixture(scope="module")
def intact(short_run: Path) -> Intact:
    return Intact(short_run / "bag" / "bag.mcap")


def read_all(path: Path, topics: set[str] | None = None) -> tuple[SourceBag, list[Msg]]:
    src = SourceBag(path)
    try:
        want = topics or {c.topic for c in src.connections}
        got = [(t, log, bytes(raw)) for t, _m, log, raw in src.messages(want)]
    finally:
        src.close()
    return src, got


def copy_run(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("report"))
    return dst


def flip(path: Path, offset: int, mask: int = 0x10) -> None:
    with open(path, "r+b") as fh:
        fh.seek(offset)
        b = fh.read(1)[0]
        fh.seek(offset)
        fh.write(bytes([b ^ mask]))


def report_of(run_dir: Path) -> dict:
    return json.loads((run_dir / "report" / "report.json").read_text())


def verify_checked(run: Path) -> dict:
    """The report (not written) of verify reading the bag the checked way, never in one pass."""
    from simconform.verify import reading, verifier

    orig = reading.open_run_bag
    try:
        reading.open_run_bag = lambda r, m, one_pass=False: orig(r, m, False)
        return verifier.verify_run(run, write=False)
    finally:
        reading.open_run_bag = orig


# ----------------------------------------------------------------- what the writer stores


def test_every_crc_is_written_and_an_independent_reader_validates_them(
    short_run: Path, intact: Intact
) -> None:
    data = intact.data
    assert len(intact.chunks) > 10
    for s, _e, _msgs in intact.chunks:
        assert struct.unpack_from("<I", data, s + 9 + 24)[0] != 0  # chunk_messages checked it
    (data_crc,) = struct.unpack_from("<I", data, intact.data_end + 9)
    assert data_crc == zlib.crc32(data[: intact.data_end]) != 0
    summary_start, _offsets, summary_crc = struct.unpack_from("<QQI", data, intact.footer + 9)
    assert summary_crc == zlib.crc32(data[summary_start : intact.footer + 25]) != 0
    with open(short_run / "bag" / "bag.mcap", "rb") as fh:  # the mcap package, CRCs checked
        records = list(StreamReader(fh, validate_crcs=True).records)
    assert sum(type(r).__name__ == "Message" for r in records) == len(intact.messages())
    # rosbags reads it (it checks every chunk's CRC too) and gets the same messages in order
    src, got = read_all(short_run / "bag")
    assert src.read_with == "rosbags" and src.chunks == {"total": len(intact.chunks)} | {
        "with_crc": len(intact.chunks)
    }
    assert sorted(got, key=lambda m: m[1]) == sorted(intact.messages(), key=lambda m: m[1])


def test_run_json_records_the_end_state_span_and_every_output_digest(short_run: Path) -> None:
    manifest = json.loads((short_run / "run.json").read_text())
    assert manifest["state"] == "finished" and manifest["complete"] is True
    assert manifest["recorded_end_ns"] == manifest["end_ns"]
    files = sorted(
        p.relative_to(short_run).as_posix()
        for folder in ("bag", "gt")
        for p in (short_run / folder).iterdir()
    )
    assert sorted(manifest["outputs"]) == files and "gt/lidar.tum" in files
    for rel, want in manifest["outputs"].items():
        data = (short_run / rel).read_bytes()
        assert want == {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    report = report_of(short_run)
    assert report["run"]["integrity"]["status"] == "intact"
    assert report["run"]["integrity"]["scope"] == "whole run"


def test_one_pass_reads_what_the_checked_reading_reads(short_run: Path, intact: Intact) -> None:
    """A finished run's bag read once, checked as it goes (verify's default): the same
    messages in the same order as rosbags after the separate check, and the same checks."""
    src = SourceBag(short_run / "bag", one_pass=True)
    try:
        got = [
            (t, log, bytes(raw))
            for t, _m, log, raw in src.messages({c.topic for c in src.connections})
        ]
    finally:
        src.close()
    _, ref = read_all(short_run / "bag")
    assert src.read_with == "checked scan (one pass)" and src.one_pass_clean
    assert got == ref and src.chunks == {
        "total": len(intact.chunks),
        "with_crc": len(intact.chunks),
    }
    report = report_of(short_run)  # written by verify_run: one pass
    assert report["run"]["integrity"]["read_with"] == "checked scan (one pass)"


def test_one_pass_that_meets_damage_is_read_again_the_checked_way(
    short_run: Path, intact: Intact, tmp_path: Path
) -> None:
    """A flipped byte in a late chunk: the one pass has paired samples before it finds the
    damage, so verify reads the bag again the checked way, which leaves the damaged chunk's
    span out before pairing: the report is the one the checked reading alone gives."""
    from simconform.verify import verifier

    run = copy_run(short_run, tmp_path / "run")
    s, e, _m = intact.chunks[-2]
    flip(run / "bag" / "bag.mcap", (s + e) // 2)
    one = verifier.verify_run(run, write=False)
    src = SourceBag(run / "bag", one_pass=True)
    try:
        list(src.messages({c.topic for c in src.connections}))
    finally:
        src.close()
    assert src.damaged and not src.one_pass_clean
    checked = verify_checked(run)
    assert one["run"]["integrity"]["read_with"] == "checked scan (damaged chunks skipped)"
    one.pop("provenance"), checked.pop("provenance")
    assert one == checked


IMU_LIDAR = {"/imu", "/truth/imu", "/lidar/points", "/truth/lidar/points"}


def test_one_pass_does_not_decompress_the_chunks_of_topics_it_does_not_read(
    short_run: Path, intact: Intact, tmp_path: Path
) -> None:
    """Every message of 512 KiB or more (the truth and depth images) is a chunk of its own, so a
    reading of other topics skips those chunks undecompressed (verify's main process reads no
    image). It reads what rosbags reads of its topics; a flipped byte in a skipped chunk fails
    the data section CRC, so verify reads the bag again the checked way, which names it."""
    from simconform.bag.storage import OWN_CHUNK
    from simconform.verify import verifier

    big = [k for k, (_s, _e, msgs) in enumerate(intact.chunks) if len(msgs[-1][2]) >= OWN_CHUNK]
    assert big and all(len(intact.chunks[k][2]) == 1 for k in big)
    other = [
        k for k, (_s, _e, msgs) in enumerate(intact.chunks) if not {m[0] for m in msgs} & IMU_LIDAR
    ]
    assert set(big) <= set(other)
    src = SourceBag(short_run / "bag", one_pass=True)
    try:
        got = [(t, log, bytes(raw)) for t, _m, log, raw in src.messages(IMU_LIDAR)]
        skipped = src._salvage.skipped
    finally:
        src.close()
    _, ref = read_all(short_run / "bag", IMU_LIDAR)
    assert got == ref and src.one_pass_clean and skipped == len(other)
    assert src.chunks == {"total": len(intact.chunks), "with_crc": len(intact.chunks)}

    run = copy_run(short_run, tmp_path / "run")
    depth = next(k for k in big if intact.chunks[k][2][0][0] == "/truth/camera/depth")
    s, e, _m = intact.chunks[depth]
    flip(run / "bag" / "bag.mcap", (s + e) // 2)
    src = SourceBag(run / "bag", one_pass=True)
    try:
        got = [(t, log, bytes(raw)) for t, _m, log, raw in src.messages(IMU_LIDAR)]
    finally:
        src.close()
    assert got == ref and src.notes and not src.one_pass_clean
    one = verifier.verify_run(run, write=False)
    checked = verify_checked(run)
    integrity = one["run"]["integrity"]
    assert integrity["read_with"] == "checked scan (damaged chunks skipped)"
    assert f"chunk {depth + 1} at byte {s}" in json.dumps(integrity)
    one.pop("provenance"), checked.pop("provenance")
    assert one == checked


# ----------------------------------------------------------------- flipped bytes, cut files


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("damaged")


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(where=st.data())
@example(where=None)  # the special offsets below, every run
def test_a_flipped_byte_anywhere_is_found_and_no_damaged_message_is_read(
    intact: Intact, scratch: Path, where
) -> None:
    """One flipped byte at any offset of the file: the scan reports it (a damaged chunk, a
    failed data or summary CRC, or a file rosbags refuses), every message it yields is
    byte-identical to the intact file's, and it yields every message of every chunk that does
    not hold the flipped byte."""
    data = intact.data
    s0, _e0, _m = intact.chunks[0]
    s5, e5, _m = intact.chunks[5]
    special = [
        3,  # the magic
        s0 + 1,  # the first chunk's length (it holds the schemas and channels)
        s5,  # a chunk's opcode
        s5 + 9 + 3,  # its start time
        s5 + 9 + 24,  # its CRC
        (s5 + e5) // 2,  # its compressed data
        intact.index[3][0] + 12,  # a message index record
        intact.data_end + 10,  # DataEnd's CRC
        intact.data_end + 40,  # the summary
        len(data) - 10,  # the footer
        len(data) - 2,  # the closing magic
    ]
    offsets = (
        special
        if where is None
        else [where.draw(st.integers(0, len(data) - 1) | st.sampled_from(special))]
    )
    for offset in offsets:
        path = scratch / "flipped.mcap"
        path.write_bytes(data)
        flip(path, offset)
        try:
            src, got = read_all(path)
        except UserError as exc:  # the leading magic: not an MCAP file at all
            assert offset < 8 and "MCAP magic" in str(exc)
            continue
        found = bool(src.damaged or src.notes or src.read_with == "salvage scan")
        assert found, f"byte {offset} flipped and nothing noticed"
        k = intact.chunk_at(offset)
        allowed = [intact.messages()] + ([intact.messages(skip={k})] if k is not None else [])
        assert got in allowed, f"byte {offset}: {len(got)} messages read"
        for _t, log, _raw in intact.chunks[k][2] if got != intact.messages() else []:
            # every lost message lies in the span of a reported damage (what verify leaves out)
            assert any(
                (d.start_ns is None or d.start_ns <= log) and (d.end_ns is None or log <= d.end_ns)
                for d in src.damaged
            ), (offset, log, src.damaged)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(share=st.floats(0.0, 1.0))
@example(share=0.0)
@example(share=1.0)
def test_a_cut_file_gives_exactly_its_complete_chunks(intact: Intact, scratch: Path, share) -> None:
    """A file cut at any offset: the scan yields the messages of every chunk whose record is
    complete before the cut and nothing of the cut one (its CRC cannot be checked, as a note:
    a cut file is read as an interrupted one, not a damaged one)."""
    data = intact.data
    n = 9 + int(share * (intact.data_end - 9))  # from the header to DataEnd
    path = scratch / "cut.mcap"
    path.write_bytes(data[:n])
    try:
        src, got = read_all(path)
    except UserError as exc:  # no complete chunk yet: no channels, nothing to read
        assert n <= intact.chunks[0][1] and "not readable" in str(exc)
        return
    assert got == intact.messages(upto=n)
    assert src.stop_reason is not None and src.read_with == "salvage scan"
    assert src.damaged == []  # where the file ends is not damage inside it
    inside = any(s + 53 <= n < e for s, e, _m in intact.chunks)  # a whole zstd chunk header
    assert any("cut off by the end of the file" in note for note in src.notes) == inside


def lidar_chunk(intact: Intact, nth: int = 1) -> int:
    """The number of the nth chunk (from the middle) that holds a published lidar sweep."""
    ks = [
        k
        for k, (_s, _e, msgs) in enumerate(intact.chunks)
        if any(m[0] == "/lidar/points" for m in msgs)
    ]
    return ks[len(ks) // 2 + nth - 1]


def test_verify_names_a_damaged_lidar_chunk_and_judges_only_the_intact_data(
    short_run: Path, intact: Intact, baseline: dict, tmp_path: Path
) -> None:
    run_dir = copy_run(short_run, tmp_path / "run")
    k = lidar_chunk(intact)
    s, e, lost = intact.chunks[k]
    flip(run_dir / "bag" / "bag.mcap", (s + e) // 2)
    res = cli("verify", str(run_dir))
    assert res.returncode == 4, res.stderr  # a verdict on part of the run is not a PASS
    assert "Traceback" not in res.stderr
    assert "(of the intact part only: not a verdict on the whole run)" in res.stdout
    assert "bag/bag.mcap: differs from the SHA-256 run.json recorded" in res.stderr
    assert f"chunk {k + 1} at byte {s}: CRC mismatch" in res.stderr
    n_lidar = sum(m[0] == "/lidar/points" for m in lost)
    assert f"{n_lidar} on /lidar/points" in " ".join(res.stderr.split())
    # the span as seconds into the run (the 2024 epoch at 9 digits once read '1.7040672e+09
    # to 1.7040672e+09 s')
    t0 = json.loads((run_dir / "run.json").read_text())["start_ns"]
    logs = [m[1] for m in lost]
    span = f"{(min(logs) - t0) / 1e9:.3f} to {(max(logs) - t0) / 1e9:.3f} s into the run"
    assert f"messages logged t = {span}" in " ".join(res.stderr.split())
    report, before = report_of(run_dir), baseline
    integ = report["run"]["integrity"]
    assert integ["status"] == "damaged" and integ["scope"] == "intact part only"
    (gap,) = integ["gaps"]
    assert gap["start_s"] == min(logs) / 1e9 and gap["end_s"] == max(logs) / 1e9
    lidar, lidar0 = report["sensors"]["lidar"], before["sensors"]["lidar"]
    assert (
        lidar["excluded"] >= n_lidar and lidar["captures"] + lidar["excluded"] == lidar0["captures"]
    )
    # the report's first screen says what the verdict leaves out, in the documented schema
    gaps = {(g["sensor"], g["what"]) for g in report["summary"]["not_checked"]}
    assert ("lidar", f"{lidar['excluded']:,} samples") in gaps and ("*", "part of the run") in gaps
    jsonschema.validate(report, json.loads((REPO / "docs" / "report.schema.json").read_text()))
    for name in ("range_std", "range_bias", "point_dropout", "latency_ms"):
        m, m0 = lidar["metrics"][name], lidar0["metrics"][name]
        assert m["n"] < m0["n"] and np.isfinite(m["measured"]), (name, m)
        width = m0["ci"][1] - m0["ci"][0]  # the intact run's interval: the same data, less of it
        assert abs(m["measured"] - m0["measured"]) <= max(width, 0.05 * abs(m0["measured"]))
    assert lidar["metrics"]["sample_dropout"]["measured"] == 0.0  # lost is not dropped


@pytest.mark.parametrize("where", ["between chunks", "inside a chunk"])
def test_a_finished_bag_cut_short_leaves_its_tail_out(
    short_run: Path, intact: Intact, baseline: dict, tmp_path: Path, where: str
) -> None:
    """A finished run's bag truncated afterwards (a copy cut short): its tail is a gap, never
    read as dropped samples; the scope is the intact part, exit 4."""
    run_dir = copy_run(short_run, tmp_path / "run")
    k = lidar_chunk(intact)
    s, e, _m = intact.chunks[k]
    os.truncate(run_dir / "bag" / "bag.mcap", s if where == "between chunks" else (s + e) // 2)
    report = verify_checked(run_dir)
    integ = report["run"]["integrity"]
    assert integ["scope"] == "intact part only", integ
    tail = [g for g in integ["gaps"] if "the bag ends early" in g["reason"]]
    assert len(tail) == 1 and tail[0]["end_s"] is None, integ["gaps"]
    for name in report["sensors"]:  # no more drops than the whole run had
        m, m0 = (r["sensors"][name]["metrics"].get("sample_dropout") for r in (report, baseline))
        if m is not None and m["measured"] is not None:
            assert m["n"] < m0["n"], name
            assert round(m["measured"] * m["n"]) <= round(m0["measured"] * m0["n"]), (name, m, m0)
    res = cli("verify", str(run_dir))
    assert res.returncode == 4, res.stdout + res.stderr


@pytest.fixture(scope="module")
def baseline(short_run: Path, tmp_path_factory) -> dict:
    """`simconform verify` of an untouched copy of short_run: its report (the CLI's process
    sums some float arrays in another order than the in-process fixture, so compare CLI with
    CLI)."""
    run_dir = copy_run(short_run, tmp_path_factory.mktemp("baseline") / "run")
    res = cli("verify", str(run_dir))
    assert res.returncode in (0, 1) and "integrity" not in res.stderr, res.stderr
    report = report_of(run_dir)
    assert report["run"]["integrity"]["status"] == "intact"
    return report


@pytest.mark.parametrize("change", ["gt changed", "gt missing", "metadata changed"])
def test_outputs_other_than_the_messages_are_checked_too(
    short_run: Path, baseline: dict, tmp_path: Path, change: str
) -> None:
    run_dir = copy_run(short_run, tmp_path / "run")
    if change == "gt changed":
        flip(run_dir / "gt" / "imu.tum", 100, 0x01)
    elif change == "gt missing":
        (run_dir / "gt" / "imu.tum").unlink()
    else:
        meta = run_dir / "bag" / "metadata.yaml"
        meta.write_text(meta.read_text().replace("message_count", "message_cuont", 1))
    res = cli("verify", str(run_dir))
    assert res.returncode == 4, res.stderr
    integ = report_of(run_dir)["run"]["integrity"]
    assert integ["status"] == "damaged" and not integ["gaps"]
    if change == "gt missing":
        assert integ["outputs_missing"] == ["gt/imu.tum"]
    else:
        assert integ["outputs_changed"] == ["gt/imu.tum" if "gt" in change else "bag/metadata.yaml"]
    # the messages are intact (every chunk matches its CRC): the same metrics as before
    assert report_of(run_dir)["sensors"] == baseline["sensors"]


def test_sqlite3_damage_cannot_be_located_so_nothing_is_judged(tmp_path: Path) -> None:
    out = tmp_path / "s"
    res = cli("run", "--duration", "1", "--storage", "sqlite3", "--jobs", "0", "--out", str(out))
    assert res.returncode in (0, 1), res.stderr
    db = out / "bag" / "bag.db3"
    flip(db, db.stat().st_size // 2)
    again = cli("verify", str(out))
    assert again.returncode == 4 and "Traceback" not in again.stderr, again.stderr
    assert "sqlite3 storage has no per-message checksum" in again.stderr
    report = report_of(out)
    assert report["verdict"] == "not_applicable"
    for sensor in report["sensors"].values():
        assert list(sensor["metrics"]) == ["not_judged"]


# ----------------------------------------------------------------- killed and interrupted runs


def start_run(out: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "simconform.cli", "run", "--out", str(out), "--jobs", "0",
         "--no-progress", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )  # fmt: skip


def wait_for(path: Path, size: int, proc: subprocess.Popen, limit: float = 240) -> None:
    deadline = time.time() + limit
    while not (path.exists() and path.stat().st_size >= size):
        assert proc.poll() is None, proc.communicate()
        assert time.time() < deadline, f"{path} never reached {size} bytes"
        time.sleep(0.02)


@pytest.mark.parametrize("at_bytes", [2_000_000, 7_000_000])
def test_a_killed_run_is_verified_up_to_its_last_complete_chunk(
    short_run: Path, intact: Intact, tmp_path: Path, at_bytes: int
) -> None:
    """SIGKILL at two points (inside the first second, mid-run) of the very run short_run
    recorded (same inputs and seed): the killed file is a prefix of the finished one, the
    scan gives back every message of every chunk completed before the kill (and of a chunk cut
    by it, the whole messages its written part holds), and verify judges that span and says
    where the run was interrupted."""
    out = tmp_path / "killed"
    proc = start_run(out, "--duration", "3")
    try:
        wait_for(out / "bag" / "bag.mcap", at_bytes, proc)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    manifest = json.loads((out / "run.json").read_text())
    assert manifest["state"] == "recording" and "outputs" not in manifest
    assert manifest["pid"] == proc.pid
    assert not (out / "bag" / "metadata.yaml").exists()
    killed = (out / "bag" / "bag.mcap").read_bytes()
    diff = np.flatnonzero(
        np.frombuffer(killed, np.uint8) != np.frombuffer(intact.data[: len(killed)], np.uint8)
    )
    last = max(s for s, _e, _m in intact.chunks if s < len(killed))
    # the only difference a kill can leave: the CRC of the last chunk, written just after it
    assert len(diff) == 0 or (diff.min() >= last + 33 and diff.max() < last + 37), diff
    _src, got = read_all(out / "bag")
    want = intact.messages(upto=len(killed))
    assert got[: len(want)] == want and len(want) > 0
    # killed while a chunk was being written, its CRC not yet patched in: a chunk without a
    # CRC gives the whole messages its written zstd blocks hold (the salvage rule for such
    # chunks), which are the first messages of the same chunk in the finished file
    cut = next((m for s, e, m in intact.chunks if s < len(killed) < e), [])
    extra = got[len(want) :]
    assert extra == cut[: len(extra)]
    want = got
    before = cli_snapshot(out)
    res = cli("verify", str(out))
    assert res.returncode in (1, 4) and "Traceback" not in res.stderr, res.stderr
    assert cli_snapshot(out) == before  # verify reads the bag, never repairs or rewrites it
    start_ns = json.loads((out / "run.json").read_text())["start_ns"]  # the epoch's clock
    end_s = (max(m[1] for m in want) - start_ns) / 1e9
    assert f"interrupted at t = {end_s:.9g} s: the run was killed" in res.stderr
    report = report_of(out)
    assert report["run"]["state"] == "recording" and report["run"]["complete"] is False
    assert report["run"]["duration_s"] == pytest.approx(end_s)
    assert report["run"]["planned_duration_s"] == 3.0
    # The kill can land inside a large chunk's write, after its header (with its CRC) reached
    # the file (seen once under CI load): that cut chunk cannot be checked, so none of it is
    # used, and it is said so; it is where the killed file ends, not damage, so the scope is
    # the recorded part either way.
    crc_cut = any(
        s < len(killed) < e and len(killed) >= s + 37 and killed[s + 33 : s + 37] != bytes(4)
        for s, e, _m in intact.chunks
    )
    assert ("cut off by the end of the file" in res.stderr) == crc_cut, res.stderr
    assert report["run"]["integrity"]["scope"] == "recorded part only"
    truth = sum(m[0] == "/truth/lidar/points" for m in want)
    lidar = report["sensors"]["lidar"]
    assert lidar["captures"] + lidar.get("excluded", 0) == truth > 0
    assert lidar["metrics"]["sample_dropout"]["measured"] == 0.0  # cut is not dropped


def test_verify_of_a_run_still_recording_is_refused_naming_the_writer(tmp_path: Path) -> None:
    """The run holds its folder's lock (simconform/outlock.py): verify does not judge a bag
    that is still being written, and says who writes it."""
    out = tmp_path / "live"
    proc = start_run(out)  # the whole demo: still recording while verify reads it
    try:
        wait_for(out / "bag" / "bag.mcap", 2_000_000, proc)
        live = cli("verify", str(out))
        assert proc.poll() is None, "the run ended before verify did"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    assert live.returncode == 2 and "Traceback" not in live.stderr, live.stderr
    text = " ".join(live.stderr.split())
    assert text.startswith("simconform: error: ") and f"is being written by pid {proc.pid}" in text
    assert f"DIR: got '{out}'" in text and "another --out" not in text  # verify takes DIR
    assert not (out / "report").exists()


def cli_snapshot(run_dir: Path) -> dict[str, str]:
    """Name -> SHA-256 of every file in the run's bag/ and gt/ (report/ is verify's own)."""
    return {
        p.relative_to(run_dir).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for folder in ("bag", "gt")
        for p in sorted((run_dir / folder).iterdir())
    }


def test_a_killed_sqlite3_run_keeps_its_committed_messages(tmp_path: Path) -> None:
    out = tmp_path / "killed"
    proc = start_run(out, "--duration", "3", "--storage", "sqlite3")
    try:
        wait_for(out / "bag" / "bag.db3", 12_000_000, proc)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    before = cli_snapshot(out)
    res = cli("verify", str(out))
    assert res.returncode in (1, 4) and "Traceback" not in res.stderr, res.stderr
    assert cli_snapshot(out) == before  # the hot journal is not rolled back, nothing deleted
    assert "the run was killed" in res.stderr
    report = report_of(out)
    assert report["run"]["duration_s"] > 0.3 and report["sensors"]["lidar"]["captures"] >= 3


def test_a_run_killed_before_its_first_chunk_says_there_is_nothing(
    short_run: Path, tmp_path: Path
) -> None:
    """What a kill in the first moments leaves: run.json still recording, a bag file that
    holds the MCAP header only."""
    run_dir = copy_run(short_run, tmp_path / "run")
    manifest = json.loads((run_dir / "run.json").read_text())
    for key in ("outputs", "recorded_end_ns", "captures", "published"):
        manifest.pop(key)
    manifest.update(state="recording", complete=False)
    (run_dir / "run.json").write_text(json.dumps(manifest))
    (run_dir / "bag" / "metadata.yaml").unlink()
    mcap = run_dir / "bag" / "bag.mcap"
    mcap.write_bytes(mcap.read_bytes()[:43])
    res = cli("verify", str(run_dir))
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
    assert "the run was killed before its bag held a complete chunk" in res.stderr


def test_sigterm_run_is_verified_over_the_span_it_recorded(tmp_path: Path) -> None:
    out = tmp_path / "stopped"
    proc = start_run(out, "--duration", "3")
    try:
        wait_for(out / "bag" / "bag.mcap", 6_000_000, proc)
        proc.send_signal(signal.SIGTERM)
        _stdout, stderr = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 143 and "Traceback" not in stderr, stderr
    manifest = json.loads((out / "run.json").read_text())
    assert manifest["state"] == "interrupted" and manifest["stopped_by"] == "SIGTERM"
    start, end, planned = manifest["start_ns"], manifest["recorded_end_ns"], manifest["end_ns"]
    assert start < end < planned
    assert set(manifest["outputs"]) >= {"bag/bag.mcap", "bag/metadata.yaml", "gt/lidar.tum"}
    span = (end - start) / 1e9
    assert f"interrupted at t = {span:.9g} s (SIGTERM)" in stderr
    report = report_of(out)
    assert report["run"]["duration_s"] == pytest.approx(span)  # not the planned 3 s
    assert report["run"]["integrity"]["status"] == "intact"
    assert report["run"]["integrity"]["scope"] == "recorded part only"
    lidar = report["sensors"]["lidar"]
    # every capture of the span is in the bag with its published copy: none left out
    assert lidar["captures"] == manifest["captures"]["lidar"] and "excluded" not in lidar
    assert lidar["captures"] == int(np.ceil(span * 10 - 1e-9))  # 10 Hz over [start, end)
    again = cli("verify", str(out))
    assert again.returncode in (1, 4) and again.returncode == (
        1 if report["verdict"] == "fail" else 4
    )
    assert report_of(out)["run"]["duration_s"] == pytest.approx(span)


# ----------------------------------------------------------------- runs from before checksums


def test_a_run_written_before_checksums_still_verifies(tmp_path: Path) -> None:
    """tests/data/gazebo/run: a real Gazebo run recorded before CRCs and run.json digests."""
    from conftest import REPO

    run_dir = copy_run(REPO / "tests" / "data" / "gazebo" / "run", tmp_path / "old")
    manifest = json.loads((run_dir / "run.json").read_text())
    assert "outputs" not in manifest and "state" not in manifest
    res = cli("verify", str(run_dir))
    assert res.returncode in (0, 1) and "Traceback" not in res.stderr, res.stderr
    report = report_of(run_dir)
    integ = report["run"]["integrity"]
    assert integ["status"] == "not recorded" and integ["scope"] == "whole run"
    assert integ["chunks"]["with_crc"] == 0 and integ["chunks"]["total"] > 0
    assert report["run"]["complete"] is True and report["run"]["state"] == "finished"
    assert report["run"]["duration_s"] == 2.0
    assert report["sensors"]["lidar"]["captures"] == 20


def test_an_old_interrupted_run_is_judged_up_to_its_last_capture(
    short_run: Path, tmp_path: Path
) -> None:
    """run.json of an interrupted run from before `state` and `recorded_end_ns`."""
    run_dir = copy_run(short_run, tmp_path / "run")
    manifest = json.loads((run_dir / "run.json").read_text())
    for key in ("state", "recorded_end_ns", "outputs", "pid", "host"):
        manifest.pop(key)
    manifest.update(complete=False, stopped_by="SIGINT")
    (run_dir / "run.json").write_text(json.dumps(manifest))
    res = cli("verify", str(run_dir))
    assert res.returncode in (1, 4), res.stderr
    report = report_of(run_dir)
    assert report["run"]["integrity"]["scope"] == "recorded part only"
    assert report["run"]["duration_s"] == pytest.approx(2.99)  # the last IMU capture


# ----------------------------------------------------------------- foreign bags in replay


def test_replay_reports_a_damaged_source_chunk_and_does_not_judge_it(tmp_path: Path) -> None:
    """A foreign MCAP bag with chunk CRCs (as rosbag2's MCAP storage writes them): a flipped
    byte in one chunk is found, named, left out, and the rest of the bag is verified."""
    from rosbags.rosbag2 import StoragePlugin
    from test_replay import LIDAR, ROS2, Msgs, Sim, contains, foreign_items, make_map

    from simconform.adapters.replay import ReplayConfig, replay
    from simconform.bag.storage import CrcMcapWriter, CrcWriter
    from simconform.verify.verifier import verify_run

    sim = Sim(seed=21)
    items = foreign_items(sim, Msgs(ROS2), "unorganized-sensor", "tf", ("lidar", "imu"))
    mp = make_map(tmp_path, "unorganized-sensor", "tf", ("lidar", "imu"))

    class SmallChunks(CrcMcapWriter):  # a recorder that closes a chunk every 64 KiB
        def write(self, connection, timestamp, data) -> None:
            super().write(connection, timestamp, data)
            if self.chunk.bio.tell() > 64 << 10:
                self.close_chunk()

    class Recorder(CrcWriter):
        STORAGE_PLUGINS: ClassVar = {StoragePlugin.MCAP: SmallChunks}

    bag = tmp_path / "src"
    with Recorder(bag, version=9, storage_plugin=StoragePlugin.MCAP) as w:
        conns: dict = {}
        for topic, typ, log, msg in sorted(items, key=lambda x: x[2]):
            if topic not in conns:
                conns[topic] = w.add_connection(topic, typ, typestore=ROS2)
            w.write(conns[topic], log, ROS2.serialize_cdr(msg, typ))
    src_file = bag / "src.mcap"
    data = src_file.read_bytes()
    chunks = [(s, e) for op, s, e in top_records(data) if op == 6]
    assert len(chunks) >= 3, "the source must span several chunks"
    s, e = chunks[len(chunks) // 2]
    flip(src_file, (s + e) // 2)
    out = tmp_path / "out"
    res = replay(ReplayConfig(bag=bag, map=mp, out=out))
    manifest = json.loads((out / "run.json").read_text())
    assert res.complete is False and "source bag damaged" in manifest["incomplete_reason"]
    sec = manifest["replay"]
    assert sec["read_with"] == "checked scan (damaged chunks skipped)"
    (damage,) = sec["source_integrity"]["damaged"]
    assert f"at byte {s}: CRC mismatch" in damage
    assert any("damaged, skipped and not judged" in w for w in sec["warnings"])
    (gap,) = manifest["data_gaps"]
    assert gap["kind"] == "damaged" and gap["start_ns"] <= gap["end_ns"]
    report = verify_run(out, write=False)
    integ = report["run"]["integrity"]
    assert integ["scope"] == "intact part only" and integ["gaps"][0]["reason"] == damage
    lm = report["sensors"]["lidar"]["metrics"]
    assert contains(lm["range_std"], LIDAR["sigma"]) and contains(lm["range_bias"], LIDAR["bias"])
    # the scans lost with the chunk are not counted as dropped
    excluded = report["sensors"]["lidar"].get("excluded", 0)
    assert excluded > 0
    runner = cli("replay", str(bag), "--map", str(mp), "--out", str(tmp_path / "cli"))
    assert "damaged, skipped and not judged" in runner.stderr, runner.stderr
    verdict = report_of(tmp_path / "cli")["verdict"]
    assert runner.returncode == (1 if verdict == "fail" else 4), runner.stderr


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("start_ns", "x", "start_ns: got 'x'; Input should be a valid integer"),
        ("outputs", 5, "outputs: got 5; Input should be a valid dictionary"),
        ("complete", "yes", "complete: got 'yes'"),
        ("captures", {"lidar": "a"}, "captures.lidar: got 'a'"),
    ],
)
def test_a_hand_edited_run_json_is_one_message(
    short_run: Path, tmp_path: Path, key: str, value, words: str
) -> None:
    """A run.json value of the wrong type ended in a ValueError or AttributeError traceback."""
    run_dir = tmp_path / "run"
    shutil.copytree(short_run, run_dir)
    manifest = json.loads((run_dir / "run.json").read_text())
    manifest[key] = value
    (run_dir / "run.json").write_text(json.dumps(manifest))
    before = sorted(p.name for p in (run_dir / "report").iterdir())
    res = cli("verify", str(run_dir), "-q")
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert res.stderr.count("\n") == 1 and "run.json: " + words in res.stderr, res.stderr
    assert sorted(p.name for p in (run_dir / "report").iterdir()) == before
