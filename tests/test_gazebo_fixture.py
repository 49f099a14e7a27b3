"""Real Gazebo output on any machine: the fixture in tests/data/gazebo/ was recorded from a real
gz-sim 8 server (tests/data/record_gazebo_fixture.py), so decoding and `simconform compare`'s
engine model are tested against what the engine really sends, with or without Gazebo here."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO, cli
from simconform.adapters.gazebo import decode
from simconform.adapters.gazebo.backend import sim_offset_ns
from simconform.spec import Spec

FIXTURE = REPO / "tests" / "data" / "gazebo"
RUN = FIXTURE / "run"


@pytest.fixture(scope="module")
def wire() -> dict[str, dict[int, bytes]]:
    """topic -> {simulation-time stamp ns: wire bytes}."""
    z = np.load(FIXTURE / "wire.npz")
    out: dict[str, dict[int, bytes]] = {}
    for key in z.files:
        topic, stamp = key.rsplit("|", 1)
        out.setdefault(topic, {})[int(stamp)] = z[key].tobytes()
    return out


@pytest.fixture(scope="module")
def manifest() -> dict:
    return json.loads((RUN / "run.json").read_text())


def bag_truth(topic: str) -> dict[int, object]:
    """header.stamp -> message of one truth topic of the fixture's bag."""
    from simconform.bag.messages import stamp_ns
    from simconform.verify.compare.streams import _open_bag

    reader = _open_bag(RUN / "bag")
    try:
        conns = [c for c in reader.connections if c.topic == topic]
        return {
            stamp_ns(m.header): m
            for m in (reader.deserialize(raw, c.msgtype) for c, _, raw in reader.messages(conns))
        }
    finally:
        reader.close()


def test_fixture_is_small_and_complete(manifest) -> None:
    size = sum(p.stat().st_size for p in FIXTURE.rglob("*") if p.is_file())
    assert size < 4e6
    assert manifest["backend"] == "gazebo" and manifest["complete"]
    assert (RUN / "gazebo" / "server.log").is_file()  # kept by the backend, as in every run


def test_laserscans_decode_to_the_recorded_truth(wire, manifest) -> None:
    """Every real LaserScan decodes to the spec's organized layout, and to exactly the cloud the
    run recorded as truth (the decoder is the one the backend used)."""
    from simconform.verify.metrics import LidarAccumulator

    spec = Spec.model_validate(manifest["spec_content"])
    s = spec.sensors["lidar"]
    t0 = sim_offset_ns(manifest["start_ns"])
    truth = bag_truth("/truth/lidar/points")
    scans = wire["/simconform/lidar"]
    assert len(scans) == len(truth) == 20
    for stamp, raw in scans.items():
        assert decode.message_stamp_ns(raw) == stamp
        t = decode.laserscan_to_truth(raw)
        assert t.points.shape == (len(s.rings.elevations()), s.columns, 3)
        hit = np.isfinite(t.ranges)
        assert 0.3 < hit.mean() < 0.9  # ground and objects below, sky above
        assert np.all((t.ranges[hit] >= s.range.min) & (t.ranges[hit] <= s.range.max))
        # directions are the spec's (decode puts Gazebo's ranges on the nominal rays)
        np.testing.assert_allclose(t.directions, s.directions(), atol=1e-9)
        recorded = LidarAccumulator.decode(truth[stamp + t0])
        np.testing.assert_allclose(recorded, t.points.astype(np.float32), rtol=0, atol=0)


def test_imu_navsat_pose_and_images_decode(wire, manifest) -> None:
    from simconform.world import Origin

    origin = Origin.model_validate(manifest["world_content"]["origin"])
    imu = [decode.imu_to_truth(r) for r in wire["/simconform/imu"].values()]
    assert len(imu) == 200
    g = np.array([np.linalg.norm(i.accel) for i in imu])
    assert np.all(np.abs(g - 9.80665) < 2.0)  # gravity plus the demo's gentle motion
    for i in imu:
        assert abs(np.linalg.norm(i.orientation) - 1) < 1e-9
    # the antenna where the driven vehicle carried it: the trajectory's pose, the spec's mount
    from simconform.frames import Pose
    from simconform.trajectory import load_trajectory
    from simconform.world import load_world

    world = load_world(REPO / manifest["world"])
    motion = load_trajectory(REPO / manifest["trajectory"], world, manifest["interpolation"])
    g = Spec.model_validate(manifest["spec_content"]).sensors["gnss"].mount
    mount = Pose.from_xyz_rpy(g.xyz, g.rpy)
    t0 = sim_offset_ns(manifest["start_ns"])
    gnss = wire["/simconform/gnss"]
    assert len(gnss) == 20
    for stamp, raw in gnss.items():
        want = motion.pose_at(stamp + t0).compose(mount).t
        np.testing.assert_allclose(decode.navsat_to_truth(raw, origin).enu, want, atol=1e-6)
    for raw in wire["/simconform/vehicle/pose"].values():
        _, xyz, quat = decode.read_pose(raw)
        assert np.isfinite(xyz).all() and abs(np.linalg.norm(quat) - 1) < 1e-9
    depth = wire["/simconform/camera/depth"]
    for stamp, raw in wire["/simconform/camera"].items():
        cam = decode.image_to_truth(raw, depth[stamp])
        assert cam.image.shape == (120, 160, 3) and cam.image.dtype == np.uint8
        assert cam.depth.shape == (120, 160)
        assert np.isfinite(cam.depth).mean() > 0.3  # the ground fills the lower half


@pytest.mark.slow
def test_compare_explains_the_real_gazebo_lidar(tmp_path: Path) -> None:
    """A fresh reference run against the recorded Gazebo run: the engine model explains the
    metres of raw lidar difference, and the 45-degree column is reported as an anomaly with the
    texel-wrap hypothesis as its evidence."""
    ref, out = tmp_path / "reference", tmp_path / "compare"
    r = cli(
        "run", "--spec", "tests/data/gazebo/spec.yaml", "--duration", "2", "--out", str(ref),
        "--epoch", "0",  # the fixture was recorded on the trajectory's own clock
        cwd=REPO,
    )  # fmt: skip
    assert r.returncode in (0, 1), r.stderr
    c = cli("compare", str(ref), str(RUN), "--out", str(out), cwd=REPO)
    assert c.returncode in (0, 1), c.stderr
    report = json.loads((out / "compare.json").read_text())
    lidar = report["truth"]["lidar"]
    assert lidar["range_diff_p99"]["measured"] > 1.0  # raw: metres, as the issue measured
    assert lidar["engine_model_agreement"]["measured"] >= 0.95
    assert lidar["engine_model_agreement"]["verdict"] == "pass"
    for key in ("range_diff_std", "range_diff_p99"):
        assert lidar[f"predicted_{key}"]["measured"] == pytest.approx(
            lidar[key]["measured"], rel=0.1
        )
    ex = report["explained"]["lidar"]
    assert [a.get("column") for a in ex["anomalies"]] == [45]
    assert ex["anomalies"][0]["hypothesis_reproduced"] > 0.8
    assert ex["unexplained_outside_anomalies"] / ex["rays"] < 0.002
    assert sum(ex["classes"].values()) == ex["rays"]  # every ray is in exactly one class
    for axis in "enu":
        assert report["truth"]["gnss"][f"position_diff_maxabs_{axis}"]["measured"] < 1e-6
    assert report["truth"]["camera"]["depth_finite_agreement"]["measured"] > 0.99


@pytest.mark.slow
def test_reference_emulating_gazebo_matches_the_real_engine(tmp_path: Path) -> None:
    """`run --backend reference --emulate gazebo` renders the lidar and camera as Gazebo does,
    on the exact geometry: against the real engine the raw difference shrinks from metres to
    millimetres (the 45-degree column aside) and the camera to within a grey level or two."""
    emu, out = tmp_path / "emulated", tmp_path / "compare"
    r = cli(
        "run", "--emulate", "gazebo", "--spec", "tests/data/gazebo/spec.yaml",
        "--duration", "2", "--out", str(emu), "--epoch", "0", cwd=REPO,
    )  # fmt: skip
    assert r.returncode in (0, 1), r.stderr
    assert json.loads((emu / "run.json").read_text())["emulate"] == "gazebo"
    c = cli("compare", str(emu), str(RUN), "--out", str(out), cwd=REPO)
    assert c.returncode in (0, 1), c.stderr
    truth = json.loads((out / "compare.json").read_text())["truth"]
    assert truth["lidar"]["hit_agreement"]["measured"] > 0.999
    assert truth["lidar"]["range_diff_p99"]["measured"] < 0.01
    # it is the model (to the bag's float32 points)
    assert truth["lidar"]["predicted_range_diff_p99"]["measured"] < 1e-5
    assert truth["camera"]["psnr_mean"]["measured"] > 45.0
    for axis in "xyz":  # the smooth demo path: the driven IMU agrees far below its noise
        assert truth["imu"][f"accel_diff_maxabs_{axis}"]["measured"] < 1e-4
        assert truth["imu"][f"gyro_diff_maxabs_{axis}"]["measured"] < 1e-6


def test_emulate_is_refused_for_other_backends(tmp_path: Path) -> None:
    for args, line in (
        (
            ("--backend", "mujoco", "--emulate", "gazebo"),
            "--backend: got 'mujoco'; expected reference with --emulate gazebo (it renders as "
            "that engine does; --backend mujoco is the engine itself)",
        ),
        (("--emulate", "unity"), "--emulate: got 'unity'; expected gazebo"),
    ):
        r = cli("run", *args, "--out", str(tmp_path / "never"))
        assert r.returncode == 2, r.stderr
        assert r.stderr.strip().splitlines() == [f"simconform: error: {line}"]
        assert not (tmp_path / "never").exists()
