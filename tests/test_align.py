"""Time alignment in replay (adapters/replay/align.py) and the replay's provenance.

Foreign bags are written with rosbags by the independent "foreign simulator" of
test_replay.py (its own 1 kHz trajectory and noise); only the ground-truth pose stream is
stamped late by a known offset, as when poses and sensors are stamped by different clocks.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import test_replay as tr
from scipy.spatial.transform import Rotation
from typer.testing import CliRunner

from simconform.adapters.replay import ReplayConfig, replay
from simconform.adapters.replay.align import parse_offsets
from simconform.cli import app
from simconform.errors import UserError
from simconform.verify.verifier import verify_run

BASE_MOTION = tr.base_motion


def late_poses(items: list, late_ms: float) -> list:
    """The pose stream's stamps `late_ms` late: the pose stamped t + late is the vehicle's
    pose at t (tf headers inside the messages; the log times are unchanged)."""
    d = round(late_ms * 1e6)
    for topic, _typ, _log, msg in items:
        if topic == "/gt/tf":
            for ts in msg.transforms:
                ns = ts.header.stamp.sec * 10**9 + ts.header.stamp.nanosec + d
                ts.header.stamp.sec, ts.header.stamp.nanosec = divmod(ns, 10**9)
    return items


def foreign_bag(tmp: Path, late_ms: float, sensors=("lidar",), seed: int = 12) -> tuple[Path, Path]:
    sim = tr.Sim(seed=seed)
    items = tr.foreign_items(sim, tr.Msgs(tr.ROS2), "organized-sensor", "tf", sensors)
    bag = tr.write_bag(tmp / "bag", "mcap", late_poses(items, late_ms), tr.ROS2)
    return bag, tr.make_map(tmp, "organized-sensor", "tf", sensors)


def replayed(tmp: Path, bag: Path, mp: Path, **cfg) -> tuple[dict, dict]:
    out = tmp / "out"
    replay(ReplayConfig(bag=bag, map=mp, out=out, **cfg))
    report = verify_run(out, 0.95)
    return json.loads((out / "run.json").read_text()), report


@pytest.mark.parametrize("late_ms", [0.5, 2.0])
def test_late_pose_stream_is_estimated_and_compensated(tmp_path: Path, late_ms: float) -> None:
    """0.5-2 ms late poses: the estimate's interval covers the true offset and, compensated,
    no lidar metric fails (uncompensated, a ray at a silhouette hits the background: an edge
    outlier, see test_cli_no_align_and_a_fixed_offset)."""
    bag, mp = foreign_bag(tmp_path, late_ms)
    manifest, report = replayed(tmp_path, bag, mp)
    a = manifest["replay"]["alignment"]["lidar"]
    assert a["mode"] == "estimated" and a["samples"] >= 20
    lo, hi = a["ci_ms"]
    assert lo <= late_ms <= hi and hi - lo < 1.0, a
    assert a["applied_ms"] == a["offset_ms"]
    assert a["rms_after"] <= a["rms_before"]
    lm = report["sensors"]["lidar"]["metrics"]
    assert not [k for k, m in lm.items() if m["verdict"] == "fail"], lm
    assert lm["range_std"]["verdict"] == "pass" and lm["time_offset_ms"]["verdict"] == "pass"
    assert lm["time_offset_ms"]["tolerance"] == [-8.0, 8.0]  # 20 % of the spec's 40 ms latency
    check_provenance(manifest, tmp_path, bag, mp)


def check_provenance(manifest: dict, tmp: Path, bag: Path, mp: Path) -> None:
    """run.json and the report name the bag, map, spec, world and truth with their hashes."""
    prov = manifest["replay"]["provenance"]
    files = sorted(p for p in bag.rglob("*") if p.is_file())
    lines = "".join(
        f"{p.relative_to(bag).as_posix()} {hashlib.sha256(p.read_bytes()).hexdigest()}\n"
        for p in files
    )
    b = prov["bag"]
    assert b["path"] == str(bag.resolve()) and b["format"] == "rosbag2 (mcap)"
    assert b["sha256"] == hashlib.sha256(lines.encode()).hexdigest()
    assert b["bytes"] == sum(p.stat().st_size for p in files)
    assert b["log_start_ns"] >= tr.T0 and 2.8 < b["duration_s"] < 3.1
    for key, path in (("map", mp), ("spec", tmp / "spec.yaml"), ("world", tmp / "world.yaml")):
        assert prov[key]["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest(), key
    assert prov["truth"]["mode"] == "recompute" and prov["truth"]["pose_topic"] == "/gt/tf"
    assert len(prov["truth"]["sha256"]) == 64 and prov["truth"]["poses"] == 321
    md = (tmp / "out" / "report" / "report.md").read_text()
    assert b["sha256"] in md and prov["truth"]["sha256"] in md and str(mp.resolve()) in md


def test_offset_beyond_the_latency_tolerance_fails_with_the_reason(tmp_path: Path) -> None:
    """12 ms late poses, tolerance +-8 ms: the offset FAILs and says why, while the range
    metrics, judged with it compensated, pass."""
    bag, mp = foreign_bag(tmp_path, 12.0)
    manifest, report = replayed(tmp_path, bag, mp)
    lo, hi = manifest["replay"]["alignment"]["lidar"]["ci_ms"]
    assert lo <= 12.0 <= hi
    lm = report["sensors"]["lidar"]["metrics"]
    off = lm["time_offset_ms"]
    assert off["verdict"] == "fail" and off["ci"][0] > 8.0
    for words in ("earlier than the pose stream", "late", "beyond the latency tolerance +-8 ms"):
        assert words in off["note"], off["note"]
    assert lm["range_std"]["verdict"] == "pass" and lm["range_bias"]["verdict"] == "pass"
    assert report["verdict"] == "fail"


def test_cli_no_align_and_a_fixed_offset(tmp_path: Path) -> None:
    """--no-align keeps the stamps as given: with 0.5 ms late poses the rays at silhouettes
    hit the background in the recomputed truth (they failed range_std before edge outliers
    were left out, verify/lidar_edges.py; now they are counted there) and nothing judges the
    offset; --time-offset compensates a known offset without judging it."""
    bag, mp = foreign_bag(tmp_path, 0.5)
    base = ["replay", str(bag), "--map", str(mp)]
    off = CliRunner().invoke(app, [*base, "--out", str(tmp_path / "off"), "--no-align"])
    assert off.exit_code in (0, 1), off.output
    rep = json.loads((tmp_path / "off" / "report" / "report.json").read_text())
    lm = rep["sensors"]["lidar"]["metrics"]
    assert "time_offset_ms" not in lm and lm["range_edge_outliers"]["count"] > 0
    assert lm["range_std"]["verdict"] == "pass"
    fixed = CliRunner().invoke(
        app, [*base, "--out", str(tmp_path / "fixed"), "--time-offset", "lidar=0.5"]
    )
    rep = json.loads((tmp_path / "fixed" / "report" / "report.json").read_text())
    lm = rep["sensors"]["lidar"]["metrics"]
    assert lm["range_std"]["verdict"] == "pass", fixed.output
    assert lm["time_offset_ms"]["verdict"] == "not_applicable"
    assert "--time-offset" in lm["time_offset_ms"]["reason"]
    run = json.loads((tmp_path / "fixed" / "run.json").read_text())
    assert run["replay"]["alignment"]["lidar"]["mode"] == "fixed"


@pytest.mark.parametrize(
    ("values", "word"),
    [(["lidar=abc"], "MS or SENSOR=MS"), (["camera=1"], "mapped sensor"), (["1e9"], "60 s")],
)
def test_bad_time_offset_is_one_user_error(values: list[str], word: str) -> None:
    with pytest.raises(UserError) as exc:
        parse_offsets(values, ["lidar", "imu"])
    assert exc.value.field == "--time-offset" and word in str(exc.value)
    assert parse_offsets(["1.5", "imu=-2"], ["lidar", "imu"]) == {None: 1.5, "imu": -2.0}


def wiggly_motion(t_ns: np.ndarray) -> tuple[np.ndarray, Rotation]:
    """The foreign sim's circle with brisk yaw, roll and pitch oscillations: rates that
    change fast enough to time the IMU to a fraction of a millisecond."""
    pos, rot = BASE_MOTION(t_ns)
    s = (np.asarray(t_ns, dtype=np.int64) - tr.T0) * 1e-9
    wiggle = Rotation.from_euler(
        "xyz", np.c_[0.1 * np.sin(2.7 * s), 0.08 * np.sin(3.1 * s), 0.3 * np.sin(2.3 * s)]
    )
    return pos, rot * wiggle


def test_imu_offset_from_rates_and_specific_force(tmp_path: Path, monkeypatch) -> None:
    """An IMU 3 ms early against the poses (tolerance +-1 ms) on a lively trajectory: the
    estimate's interval covers 3 ms and excludes 0, the offset FAILs, and the IMU's noise,
    judged with it compensated, is recovered."""
    monkeypatch.setattr(tr, "base_motion", wiggly_motion)
    bag, mp = foreign_bag(tmp_path, 3.0, sensors=("imu",), seed=31)
    manifest, report = replayed(tmp_path, bag, mp)
    a = manifest["replay"]["alignment"]["imu"]
    lo, hi = a["ci_ms"]
    assert lo <= 3.0 <= hi and lo > 1.0, a
    im = report["sensors"]["imu"]["metrics"]
    assert im["time_offset_ms"]["verdict"] == "fail"
    assert im["gyro_std_x"]["verdict"] != "fail" and im["accel_std_z"]["verdict"] != "fail"
