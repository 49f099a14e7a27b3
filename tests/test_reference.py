"""Reference backend kinematics and rolling-shutter geometry against closed forms."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from simconform.adapters.reference import ReferenceBackend
from simconform.bag.cloud import deskew
from simconform.spec import Spec
from simconform.trajectory import Trajectory
from simconform.world import World

G = 9.80665


def circle(
    radius: float, omega: float, seconds: float = 4.0, knot_hz: float = 1000.0
) -> Trajectory:
    t = np.arange(int(seconds * knot_hz) + 1) / knot_hz
    th = omega * t
    pos = np.c_[radius * np.cos(th), radius * np.sin(th), np.zeros_like(th)]
    rot = Rotation.from_euler("z", (th + np.pi / 2)[:, None])  # heading along the tangent (CCW)
    return Trajectory(np.round(t * 1e9).astype(np.int64), pos, rot)


def backend(sensors: dict, objects: list | None = None) -> ReferenceBackend:
    world = World.model_validate(
        {
            "name": "t",
            "origin": {"lat": 0, "lon": 0, "alt": 0},
            "objects": objects or [{"type": "plane", "point": [0, 0, -1]}],
        }
    )
    spec = Spec.model_validate({"name": "t", "sensors": sensors})
    b = ReferenceBackend()
    b.open(world, spec)
    return b


def test_imu_on_a_circle_gives_centripetal_force_and_yaw_rate() -> None:
    r, w = 5.0, 0.5
    b = backend({"imu": {"type": "imu", "rate_hz": 100}})
    traj = circle(r, w)
    samples = b.capture_batch("imu", np.arange(20, 380) * 10_000_000, traj)
    accel = np.array([s.accel for s in samples])
    gyro = np.array([s.gyro for s in samples])
    # body x along the tangent, y towards the centre (left of a CCW path), z up
    assert np.allclose(gyro, [0, 0, w], atol=1e-6)
    assert np.allclose(accel, [0, r * w**2, G], atol=1e-4)


def test_imu_lever_arm_on_a_vehicle_spinning_in_place() -> None:
    d, w = 0.8, 1.2
    t = np.arange(4001) / 1000.0
    traj = Trajectory(
        np.round(t * 1e9).astype(np.int64),
        np.zeros((len(t), 3)),
        Rotation.from_euler("z", (w * t)[:, None]),
    )
    b = backend({"imu": {"type": "imu", "rate_hz": 200, "mount": {"xyz": [d, 0, 0]}}})
    s = b.capture("imu", 2_000_000_000, traj)
    assert np.allclose(s.gyro, [0, 0, w], atol=1e-6)
    assert np.allclose(s.accel, [-d * w**2, 0, G], atol=1e-3)  # towards the spin axis


def test_gnss_and_odom_truth_follow_the_mount_and_base() -> None:
    traj = circle(5.0, 0.5)
    b = backend(
        {
            "gnss": {"type": "gnss", "rate_hz": 10, "mount": {"xyz": [0, 0, 1.5]}},
            "odom": {"type": "odom", "rate_hz": 20},
        }
    )
    t = 1_000_000_000
    pose = traj.pose_at(t)
    assert np.allclose(b.capture("gnss", t, traj).enu, pose.t + np.array([0, 0, 1.5]))
    o = b.capture("odom", t, traj)
    assert np.allclose([o.x, o.y], pose.t[:2]) and np.isclose(o.yaw, 0.5 + np.pi / 2)


@pytest.mark.parametrize("shutter", ["rolling", "global"])
def test_rolling_shutter_points_are_exact_at_their_own_time_and_deskewed(shutter: str) -> None:
    """Each point is in the sensor frame at its own time (as a driver publishes it); deskewed
    with the sweep's motion, every point lands on the wall from the sweep start's frame."""
    v, wall = 5.0, 10.0
    t = np.array([0.0, 2.0])
    traj = Trajectory(
        np.round(t * 1e9).astype(np.int64), np.c_[v * t, 0 * t, 0 * t], Rotation.identity(2)
    )
    b = backend(
        {
            "lidar": {
                "type": "lidar",
                "rate_hz": 10,
                "rings": {"angles_deg": [0.0]},
                "columns": 360,
                "range": {"min": 0.1, "max": 100},
                "shutter": shutter,
            }
        },
        objects=[{"type": "plane", "point": [wall, 0, 0], "normal": [-1, 0, 0]}],
    )
    t0 = 500_000_000
    s = b.capture("lidar", t0, traj)
    start = traj.pose_at(t0)
    world = start.apply(deskew(s, 0).reshape(-1, 3))
    hit = np.isfinite(world[:, 0])
    assert hit.sum() > 100
    assert np.allclose(world[hit, 0], wall, atol=1e-9)  # every point lies on the wall
    az = 2 * np.pi * np.arange(360) / 360
    dt = np.arange(360) / 3600 if shutter == "rolling" else np.zeros(360)
    own = traj.pose_at(t0 + np.round(dt * 1e9).astype(np.int64))  # pose at each column's time
    raw = own.t + own.rot.apply(s.points[0])
    assert np.allclose(raw[hit, 0], wall, atol=1e-9)  # raw points: each from its own pose
    assert np.allclose(s.points, s.directions * s.ranges[..., None], equal_nan=True)
    x_c = v * (0.5 + dt)  # sensor x when column c fires
    with np.errstate(divide="ignore"):
        expected = np.where(np.cos(az) > 0, (wall - x_c) / np.cos(az), np.nan)
    expected[expected > 100] = np.nan
    assert np.allclose(s.ranges[0], expected, equal_nan=True, atol=1e-9)
    assert np.allclose(s.t_offset[0], dt, atol=1e-7)
    assert np.allclose(np.linalg.norm(s.directions, axis=-1), 1.0)
