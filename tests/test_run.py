"""End to end on the reference backend: the bag read back with rosbags, determinism, seed
independence, reports, exit codes and the interrupted run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from xml.etree import ElementTree as ET

import numpy as np
import pytest
from rosbags.highlevel import AnyReader

from conftest import bag_digest, cli, demo_spec, write_yaml
from simconform.bag.messages import TYPESTORE, cloud_arrays, stamp_ns
from simconform.run import DEFAULT_EPOCH_S, RunConfig, run
from simconform.verify.verifier import verify_run

TOPICS = {
    "/lidar/points": "sensor_msgs/msg/PointCloud2",
    "/imu": "sensor_msgs/msg/Imu",
    "/gps/fix": "sensor_msgs/msg/NavSatFix",
    "/odom": "nav_msgs/msg/Odometry",
}


def read_bag(bag: Path) -> dict[str, list[tuple[int, object]]]:
    out: dict[str, list] = {}
    with AnyReader([bag], default_typestore=TYPESTORE) as reader:
        for conn, log_ns, raw in reader.messages():
            out.setdefault(conn.topic, []).append((log_ns, reader.deserialize(raw, conn.msgtype)))
    return out


def test_bag_layout_and_stamps(short_run: Path) -> None:
    msgs = read_bag(short_run / "bag")
    with AnyReader([short_run / "bag"]) as reader:
        types = {c.topic: c.msgtype for c in reader.connections}
    for topic, kind in TOPICS.items():
        assert types[topic] == kind and types["/truth" + topic] == kind
    assert types["/tf"] == types["/tf_static"] == "tf2_msgs/msg/TFMessage"
    rates = {"/lidar/points": 10, "/imu": 100, "/gps/fix": 10, "/odom": 20}
    latency_ms = {"/lidar/points": 200.0, "/imu": 2.0, "/odom": 10.0}
    for topic, rate in rates.items():
        truth = msgs["/truth" + topic]
        assert len(truth) == 3 * rate  # captures at k / rate in [0, 3 s), from the epoch
        stamps = [stamp_ns(m.header) for _, m in truth]
        epoch = DEFAULT_EPOCH_S * 1_000_000_000  # the demo trajectory's t = 0
        assert stamps == [epoch + round(k * 1e9 / rate) for k in range(3 * rate)]
        assert all(log == st for (log, _), st in zip(truth, stamps))  # truth logged at capture
        for log, m in msgs[topic]:
            delay_ms = (log - stamp_ns(m.header)) / 1e6
            if topic in latency_ms:
                assert delay_ms == latency_ms[topic]
            else:  # 100 ms +- 3 x 10 ms jitter
                assert 70.0 <= delay_ms <= 130.0
    logs = [log for topic in msgs for log, _ in msgs[topic]]
    assert len(logs) > 0


def test_every_topic_records_the_qos_its_publisher_offers(short_run: Path) -> None:
    """ROS 2 tools warn on an empty offered_qos_profiles and replay with defaults: sensor
    streams carry SensorDataQoS (best effort), /tf_static is latched, the rest reliable."""
    with AnyReader([short_run / "bag"]) as reader:
        qos = {c.topic: c.ext.offered_qos_profiles for c in reader.connections}
    assert all(len(profiles) == 1 for profiles in qos.values()), qos
    rel = {topic: p[0].reliability.name for topic, p in qos.items()}
    dur = {topic: p[0].durability.name for topic, p in qos.items()}
    for topic in TOPICS:
        expect = "RELIABLE" if topic == "/odom" else "BEST_EFFORT"
        assert rel[topic] == expect and rel["/truth" + topic] == "RELIABLE", topic
    assert rel["/tf"] == "RELIABLE" and dur["/tf"] == "VOLATILE"
    assert dur["/tf_static"] == "TRANSIENT_LOCAL"


def test_pointcloud_organized_with_nan_for_lost_points(short_run: Path) -> None:
    msgs = read_bag(short_run / "bag")
    _, pub = msgs["/lidar/points"][5]
    _, truth = msgs["/truth/lidar/points"][5]
    assert (pub.height, pub.width, pub.point_step) == (16, 360, 22)
    assert [f.name for f in pub.fields] == ["x", "y", "z", "intensity", "ring", "time"]
    assert pub.header.frame_id == "lidar_link" and not pub.is_dense
    p, t = cloud_arrays(pub), cloud_arrays(truth)
    assert np.array_equal(p["ring"][:, 0], np.arange(16))
    assert np.allclose(p["time"][0], np.arange(360) / 3600.0, atol=1e-7)  # rolling shutter
    tf, pf = np.isfinite(t["x"]), np.isfinite(p["x"])
    assert not np.any(pf & ~tf)  # a no-return ray is never published
    lost = (tf & ~pf).sum() / tf.sum()
    assert 0.05 < lost < 0.15  # 10 % configured point dropout


def test_camera_topics(short_run: Path) -> None:
    from simconform.bag.messages import image_array

    msgs = read_bag(short_run / "bag")
    _, comp = msgs["/camera/image/compressed"][0]
    assert comp.format == "rgb8; jpeg compressed bgr8" and bytes(comp.data[:2]) == b"\xff\xd8"
    assert image_array(comp).shape == (480, 640, 3)
    _, info = msgs["/camera/camera_info"][0]
    assert info.header.frame_id == "camera_optical_frame" and (info.width, info.height) == (
        640,
        480,
    )
    assert np.isclose(info.k[0], 320.0) and np.isclose(info.k[2], 319.5)
    _, truth = msgs["/truth/camera/image"][0]
    assert truth.encoding == "rgb8" and truth.step == 3 * 640
    _, depth = msgs["/truth/camera/depth"][0]
    assert depth.encoding == "32FC1"
    assert len(msgs["/truth/camera/image"]) == 30 == len(msgs["/truth/camera/depth"])
    assert len(msgs["/camera/camera_info"]) == len(msgs["/camera/image/compressed"])
    ((_, static),) = msgs["/tf_static"]
    pairs = {(t.header.frame_id, t.child_frame_id) for t in static.transforms}
    assert {
        ("map", "odom"),
        ("base_link", "lidar_link"),
        ("camera_link", "camera_optical_frame"),
    } <= pairs


def test_ground_truth_files_and_manifest(short_run: Path) -> None:
    manifest = json.loads((short_run / "run.json").read_text())
    assert manifest["complete"] is True and manifest["seed"] == 1234
    assert manifest["backend"] == "reference" and manifest["storage"] == "mcap"
    assert manifest["captures"] == {"lidar": 30, "imu": 300, "gnss": 30, "odom": 60, "camera": 30}
    for key in ("simconform", "git_commit", "spec_sha256", "world_sha256", "trajectory_sha256"):
        assert key in manifest
    base = np.loadtxt(short_run / "gt" / "base_link.tum")
    assert base.shape == (150, 8)  # /tf at 50 Hz
    lidar = np.loadtxt(short_run / "gt" / "lidar.tum")
    assert lidar.shape == (30, 8)
    assert np.allclose(np.linalg.norm(lidar[:, 4:], axis=1), 1.0)


def test_report_files_and_keys(short_run: Path) -> None:
    report = json.loads((short_run / "report" / "report.json").read_text())
    assert set(report) == {
        *("schema_version", "summary", "provenance"),  # tests/test_report.py checks these
        *("run", "confidence", "family", "sensors", "verdict"),
    }
    assert report["confidence"] == 0.95
    assert report["family"]["method"] == "holm" and report["family"]["alpha"] == 0.05
    assert {"backend", "seed", "complete", "spec", "world"} <= set(report["run"])
    m = report["sensors"]["lidar"]["metrics"]
    for name in (
        "range_std",
        "range_bias",
        "point_dropout",
        "sample_dropout",
        "latency_ms",
        "rate_hz",
        "range_lateral_rms",
    ):
        assert {"measured", "ci", "configured", "tolerance", "verdict", "n"} <= set(m[name])
        assert m[name]["family"]["family_size"] == report["family"]["size"]
    assert m["range_std"]["configured"] == 0.02
    assert m["range_std"]["ci"][0] <= 0.02 <= m["range_std"]["ci"][1]
    assert {"accel_bias_x", "gyro_std_z"} <= set(report["sensors"]["imu"]["metrics"])
    junit = ET.parse(short_run / "report" / "junit.xml").getroot()
    cases = junit.findall(".//testcase")
    n_metrics = sum(len(s["metrics"]) for s in report["sensors"].values())
    assert len(cases) == n_metrics
    for name in ("report.md", "report.html", "lidar_errors.png", "conformance.png"):
        assert (short_run / "report" / name).stat().st_size > 0


def test_same_seed_same_bytes_other_seed_differs(tmp_path: Path) -> None:
    a = run(RunConfig(out=tmp_path / "a", duration=1.0), progress=False)
    b = run(RunConfig(out=tmp_path / "b", duration=1.0), progress=False)
    c = run(RunConfig(out=tmp_path / "c", duration=1.0, seed=99), progress=False)
    assert bag_digest(a.out) == bag_digest(b.out)
    assert bag_digest(a.out) != bag_digest(c.out)


def test_the_bag_is_the_same_for_every_jobs(tmp_path: Path) -> None:
    """Workers render, add noise and JPEG-encode heavy captures (pipeline/chain.py FrameStage,
    one generator per capture): with 0, 1 or 2 of them the bag is the same, byte for byte."""
    digests = {
        jobs: bag_digest(
            run(RunConfig(out=tmp_path / f"j{jobs}", duration=1.5, jobs=jobs), progress=False).out
        )
        for jobs in (0, 1, 2)
    }
    assert len(set(digests.values())) == 1, digests


def test_adding_a_sensor_leaves_other_draws_alone(tmp_path: Path) -> None:
    spec = demo_spec()
    lidar_only = dict(spec, sensors={"lidar": spec["sensors"]["lidar"]})
    path = write_yaml(tmp_path / "lidar_only.yaml", lidar_only)
    a = run(RunConfig(out=tmp_path / "a", duration=1.0, spec=path), progress=False)
    b = run(RunConfig(out=tmp_path / "b", duration=1.0), progress=False)
    pa = [bytes(m.data) for _, m in read_bag(a.out / "bag")["/lidar/points"]]
    pb = [bytes(m.data) for _, m in read_bag(b.out / "bag")["/lidar/points"]]
    assert pa == pb and len(pa) == 10


def test_sqlite3_storage(tmp_path: Path) -> None:
    res = run(RunConfig(out=tmp_path / "s", duration=1.0, storage="sqlite3"), progress=False)
    assert (res.out / "bag" / "s.db3").exists() or list((res.out / "bag").glob("*.db3"))
    report = verify_run(res.out)
    assert report["sensors"]["lidar"]["metrics"]["latency_ms"]["verdict"] == "pass"


def test_verify_exit_codes(short_run: Path, tmp_path: Path) -> None:
    ok = cli("verify", str(short_run))
    assert ok.returncode in (0, 1) and "range_std" in ok.stdout
    # the same data judged against a spec that claims 50 % more range noise must fail
    import shutil

    wrong = tmp_path / "wrong"
    shutil.copytree(short_run, wrong)
    manifest = json.loads((wrong / "run.json").read_text())
    manifest["spec_content"]["sensors"]["lidar"]["noise"]["range"]["sigma"] = 0.03
    (wrong / "run.json").write_text(json.dumps(manifest))
    bad = cli("verify", str(wrong))
    assert bad.returncode == 1
    report = json.loads((wrong / "report" / "report.json").read_text())
    assert report["sensors"]["lidar"]["metrics"]["range_std"]["verdict"] == "fail"
    assert report["verdict"] == "fail"


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupted_run_keeps_what_was_recorded(tmp_path: Path, sig, code) -> None:
    out = tmp_path / "interrupted"
    proc = subprocess.Popen(
        [sys.executable, "-m", "simconform.cli", "run", "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 60
    bag = out / "bag" / "bag.mcap"
    while time.time() < deadline and not (bag.exists() and bag.stat().st_size > 2_000_000):
        time.sleep(0.05)
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == code, stderr
    assert "Traceback" not in stderr
    manifest = json.loads((out / "run.json").read_text())
    assert manifest["complete"] is False and manifest["stopped_by"] == sig.name
    assert 0 < manifest["captures"]["lidar"] < 2000
    msgs = read_bag(out / "bag")  # closed properly: readable with rosbags
    assert len(msgs["/truth/lidar/points"]) == manifest["captures"]["lidar"]
    report = json.loads((out / "report" / "report.json").read_text())
    assert report["run"]["complete"] is False
    assert "incomplete" in stdout.lower()


def test_progress_lines_when_stderr_is_not_a_terminal(tmp_path: Path, monkeypatch) -> None:
    """A CI log gets a line every 10 % (throttled), never a silent run; --no-progress: none."""
    import io

    from simconform.progress import Lines, progress_bar

    buf = io.StringIO()
    lines = Lines(1000, "capturing", every_s=0.0, stream=buf)
    for i in range(0, 1001, 7):
        lines.update(i)
    out = buf.getvalue().splitlines()
    assert [ln.split()[2] for ln in out] == [str(p) for p in range(10, 100, 10)]
    assert all(ln.startswith("simconform: capturing ") and "s left" in ln for ln in out)
    lines.update(1000)  # the caller says it is done: the 100 % line
    assert buf.getvalue().splitlines()[-1].startswith("simconform: capturing 100 % (done in ")
    # throttled: no line before the interval, but the 100 % line at once, and only once
    buf = io.StringIO()
    slow = Lines(1000, "verifying", every_s=3600.0, stream=buf)
    for i in (0, 500, 999, 1000, 1000):
        slow.update(i)
    assert [ln.split()[2] for ln in buf.getvalue().splitlines()] == ["100"]
    assert progress_bar(10, False) is None
    # a slow first step (kernels compiling, 100 s) does not inflate the time left: 1 s a step
    clock = iter([0.0, 100.0, 101.0, 102.0])
    buf = io.StringIO()
    with monkeypatch.context() as m:
        m.setattr("simconform.progress.time.monotonic", lambda: next(clock))
        first = Lines(10, "capturing", every_s=0.0, stream=buf)
        for i in (1, 2, 3):
            first.update(i)
    assert buf.getvalue().splitlines()[-1].endswith("(102 s elapsed, about 7 s left)")
    env = {**os.environ, "SIMCONFORM_PROGRESS_INTERVAL_S": "0"}  # short run: lines anyway
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "simconform.cli",
            "run",
            "--duration",
            "2",
            "--out",
            str(tmp_path / "run"),
        ],
        capture_output=True,  # stderr is a pipe
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert res.returncode in (0, 1), res.stderr
    assert "simconform: capturing" in res.stderr and "Traceback" not in res.stderr
    for step in ("capturing", "verifying"):  # each step's last line says it finished
        last = [ln for ln in res.stderr.splitlines() if ln.startswith(f"simconform: {step} ")]
        assert last and last[-1].split()[2] == "100", res.stderr
