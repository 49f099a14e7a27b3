"""Real MuJoCo behind SensorBackend: the same run layout, and engine truth close to exact
geometry (differences documented in docs/backends.md)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from rosbags.highlevel import AnyReader

from conftest import bag_digest, cli
from simconform.bag.messages import TYPESTORE, cloud_arrays, image_array
from simconform.run import RunConfig, run
from simconform.verify.verifier import verify_run

mujoco = pytest.importorskip("mujoco", reason="the mujoco package is not installed")


def truth(run_dir: Path, topic: str) -> list:
    with AnyReader([run_dir / "bag"], default_typestore=TYPESTORE) as r:
        conns = [c for c in r.connections if c.topic == topic]
        return [r.deserialize(raw, c.msgtype) for c, _, raw in r.messages(connections=conns)]


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("mj")
    ref = run(RunConfig(out=root / "ref", duration=1.0), progress=False).out
    try:
        mj = run(RunConfig(out=root / "mj", duration=1.0, backend="mujoco"), progress=False).out
    except Exception as exc:  # pragma: no cover - only without OpenGL
        if "OpenGL" in str(exc):
            pytest.skip(f"no OpenGL context for MuJoCo's renderer here: {exc}")
        raise
    return ref, mj


def test_mujoco_lidar_matches_exact_geometry(pair) -> None:
    ref, mj = pair
    a, b = truth(ref, "/truth/lidar/points"), truth(mj, "/truth/lidar/points")
    assert len(a) == len(b) == 10
    agree, diffs = [], []
    for x, y in zip(a, b):
        pa = np.stack([cloud_arrays(x)[k] for k in "xyz"], -1)
        pb = np.stack([cloud_arrays(y)[k] for k in "xyz"], -1)
        fa, fb = np.isfinite(pa[..., 0]), np.isfinite(pb[..., 0])
        agree.append(np.mean(fa == fb))
        diffs.append(np.linalg.norm(pa[fa & fb] - pb[fa & fb], axis=1))
    d = np.concatenate(diffs)
    assert np.mean(agree) >= 0.995
    assert np.quantile(d, 0.999) < 1e-3 and abs(d.mean()) < 1e-4


def test_mujoco_imu_gnss_odom_close_to_reference(pair) -> None:
    ref, mj = pair

    def imu(run_dir):
        return np.array(
            [
                [
                    m.linear_acceleration.x,
                    m.linear_acceleration.y,
                    m.linear_acceleration.z,
                    m.angular_velocity.x,
                    m.angular_velocity.y,
                    m.angular_velocity.z,
                ]
                for m in truth(run_dir, "/truth/imu")
            ]
        )

    diff = imu(mj) - imu(ref)
    assert np.median(np.abs(diff[:, :3])) < 1e-2  # m/s^2, lever arm and gravity by MuJoCo
    assert np.median(np.abs(diff[:, 3:])) < 1e-4  # rad/s
    ga = [(m.latitude, m.longitude, m.altitude) for m in truth(ref, "/truth/gps/fix")]
    gb = [(m.latitude, m.longitude, m.altitude) for m in truth(mj, "/truth/gps/fix")]
    assert np.allclose(ga, gb, atol=1e-9)
    oa = [(m.pose.pose.position.x, m.pose.pose.position.y) for m in truth(ref, "/truth/odom")]
    ob = [(m.pose.pose.position.x, m.pose.pose.position.y) for m in truth(mj, "/truth/odom")]
    assert np.allclose(oa, ob, atol=1e-9)


def test_mujoco_camera_renders_the_same_scene(pair) -> None:
    ref, mj = pair
    a = image_array(truth(ref, "/truth/camera/image")[5]).astype(float)
    b = image_array(truth(mj, "/truth/camera/image")[5]).astype(float)
    psnr = 10 * np.log10(255**2 / np.mean((a - b) ** 2))
    assert psnr > 25.0  # same geometry and colours; lighting models differ slightly
    da = truth(ref, "/truth/camera/depth")[5]
    assert da.encoding == truth(mj, "/truth/camera/depth")[5].encoding == "32FC1"


def test_same_pipeline_and_report_on_mujoco(pair) -> None:
    _, mj = pair
    report = verify_run(mj)
    assert report["run"]["backend"] == "mujoco"
    m = report["sensors"]["lidar"]["metrics"]
    assert m["range_std"]["ci"][0] <= 0.02 <= m["range_std"]["ci"][1]
    assert m["latency_ms"]["verdict"] == "pass"


@pytest.mark.parametrize("jobs", [None, "2"], ids=["default-jobs", "jobs-2"])
def test_worker_processes_do_not_hang_and_write_the_same_bag(pair, tmp_path, jobs) -> None:
    """MuJoCo with render workers, as users run it (the default --jobs, then two workers so the
    pool is used on any machine): the pool once forked after the OSMesa context existed and
    every worker hung. The bag must be the in-process run's, byte for byte."""
    _, in_process = pair
    out = tmp_path / "mj"
    args = ["run", "--backend", "mujoco", "--duration", "1", "--out", str(out)]
    r = cli(*args, *(["--jobs", jobs] if jobs else []), timeout=300)
    assert r.returncode in (0, 1), r.stderr
    assert bag_digest(out) == bag_digest(in_process)


def test_an_opengl_that_cannot_load_is_backend_unavailable(tmp_path) -> None:
    """MuJoCo's renderer imports PyOpenGL at `import mujoco`; a missing libOSMesa (or a wrong
    MUJOCO_GL) once ended in a traceback deep inside it. Now: exit 2, one message naming
    MUJOCO_GL and what to install, nothing written."""
    import os
    import subprocess
    import sys

    out = tmp_path / "mj"
    env = dict(os.environ, MUJOCO_GL="nonsense", PYOPENGL_PLATFORM="nonsense")
    args = ["run", "--backend", "mujoco", "--duration", "1", "--out", str(out)]
    r = subprocess.run(
        [sys.executable, "-m", "simconform.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith("simconform: error: --backend mujoco could not load OpenGL")
    assert "MUJOCO_GL=nonsense" in r.stderr and "libosmesa6" in r.stderr
    assert not out.exists()
