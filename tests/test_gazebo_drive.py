"""How Gazebo's vehicle is driven: the drive table (drive.py), the Python system that runs inside
the gz-sim server (driver_system.py, its real code) and the backend's stepping.

Gazebo cannot be installed here, so the server side is a model of what gz-sim 8 does with the
driver's commands, written from its sources (gz-sim8_8.9.0 src/systems/physics/Physics.cc
UpdatePhysics and its "Clear pending commands"; gz-physics7 dartsim FreeGroupFeatures; DART
FreeJoint::integratePositions; gz-sensors8 ImuSensor::Update):

- per iteration: link wrench, then the model's world pose command, then the link's angular and
  linear velocity commands, which are in the link frame and turned into world frame with the
  model's Pose component (the state *before* this iteration's pose command); then one
  semi-implicit Euler step of the free body (v' = v + a dt, omega' = omega + alpha dt,
  R' = exp(omega' dt) R, p' = p + v' dt);
- after the step: wrenches cleared, pose commands removed, velocity commands zeroed but kept;
- the IMU reads the engine's acceleration at its offset (rigid-body lever arm) minus gravity,
  rotated into the sensor frame, and the angular velocity in that frame.

The real Gazebo run is tests/test_gazebo.py::test_gazebo_against_reference_5s.
"""

from __future__ import annotations

import math
import sys
import types
from datetime import timedelta
from pathlib import Path
from typing import ClassVar

import numpy as np
import pymap3d
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.spatial.transform import Rotation

from simconform.adapters.gazebo import backend as gzb
from simconform.adapters.gazebo import decode, driver_system, sdf
from simconform.adapters.gazebo.drive import drive_rows, rows_bytes, table_header
from simconform.adapters.reference import ReferenceBackend
from simconform.demo import DEMO_SPEC, DEMO_TRAJECTORY, DEMO_WORLD
from simconform.frames import Pose
from simconform.pipeline.schedule import capture_times
from simconform.spec import load_spec
from simconform.trajectory import Trajectory, load_trajectory
from simconform.world import load_world

WORLD = load_world(DEMO_WORLD)
SPEC = load_spec(DEMO_SPEC)
STEP_NS = gzb.STEP_NS
DT = STEP_NS * 1e-9
GRAVITY = np.array([0.0, 0.0, -9.80665])

# ------------------------------------------------------------------ gz.math7 / gz.sim8 model


class Vector3d:
    def __init__(self, x: float = 0.0, y: float = 0.0, z: float = 0.0) -> None:
        self._v = np.array([x, y, z], dtype=float)

    def x(self) -> float:
        return float(self._v[0])

    def y(self) -> float:
        return float(self._v[1])

    def z(self) -> float:
        return float(self._v[2])


class Quaterniond:
    def __init__(self, w: float, x: float, y: float, z: float) -> None:
        self._r = Rotation.from_quat([x, y, z, w])

    def rotate_vector_reverse(self, v: Vector3d) -> Vector3d:
        return Vector3d(*self._r.inv().apply(v._v))

    def w(self) -> float:
        return float(self._r.as_quat()[3])

    def x(self) -> float:
        return float(self._r.as_quat()[0])

    def y(self) -> float:
        return float(self._r.as_quat()[1])

    def z(self) -> float:
        return float(self._r.as_quat()[2])


class Pose3d:
    def __init__(self, x, y, z, qw, qx, qy, qz) -> None:
        self._p, self._q = Vector3d(x, y, z), Quaterniond(qw, qx, qy, qz)

    def pos(self) -> Vector3d:
        return self._p

    def rot(self) -> Quaterniond:
        return self._q


class FreeBody:
    """The ECM and Physics system for the one free vehicle (see the module doc)."""

    def __init__(self) -> None:
        self.p, self.R = np.zeros(3), Rotation.identity()
        self.v, self.w = np.zeros(3), np.zeros(3)
        self.a, self.alpha = np.zeros(3), np.zeros(3)
        self.force, self.torque = np.zeros(3), np.zeros(3)
        self.pose_cmd: tuple[np.ndarray, Rotation] | None = None
        self.lin_cmd: np.ndarray | None = None
        self.ang_cmd: np.ndarray | None = None

    def step(self) -> None:
        pose_component = self.R  # what gz-sim converts link velocity commands with
        if self.pose_cmd is not None:
            self.p, self.R = self.pose_cmd
        if self.ang_cmd is not None:
            self.w = pose_component.apply(self.ang_cmd)
        if self.lin_cmd is not None:
            self.v = pose_component.apply(self.lin_cmd)
        self.a = self.force / sdf.VEHICLE_MASS  # gravity off on the vehicle link
        self.alpha = self.torque / sdf.VEHICLE_INERTIA  # isotropic: no gyroscopic term
        self.v = self.v + self.a * DT
        self.w = self.w + self.alpha * DT
        self.R = Rotation.from_rotvec(self.w * DT) * self.R
        self.p = self.p + self.v * DT
        self.force, self.torque, self.pose_cmd = np.zeros(3), np.zeros(3), None
        if self.lin_cmd is not None:
            self.lin_cmd = np.zeros(3)
        if self.ang_cmd is not None:
            self.ang_cmd = np.zeros(3)

    def imu(self, mount: Pose) -> tuple[np.ndarray, np.ndarray, Rotation]:
        r = self.R.apply(mount.t)
        acc = self.a + np.cross(self.alpha, r) + np.cross(self.w, np.cross(self.w, r))
        rot = self.R * mount.rot
        return rot.inv().apply(acc - GRAVITY), rot.inv().apply(self.w), rot


class Model:
    def __init__(self, entity: int) -> None:
        self.entity = entity

    def valid(self, ecm: FreeBody) -> bool:
        return self.entity == 1

    def name(self, ecm: FreeBody) -> str:
        return sdf.VEHICLE

    def canonical_link(self, ecm: FreeBody) -> int:
        return 2

    def set_world_pose_cmd(self, ecm: FreeBody, pose: Pose3d) -> None:
        q = pose.rot()
        ecm.pose_cmd = (pose.pos()._v.copy(), q._r)


class Link:
    def __init__(self, entity: int) -> None:
        assert entity == 2

    def world_pose(self, ecm: FreeBody) -> Pose3d:
        x, y, z, w = ecm.R.as_quat()
        return Pose3d(*ecm.p, w, x, y, z)

    def set_linear_velocity(self, ecm: FreeBody, v: Vector3d) -> None:
        ecm.lin_cmd = v._v.copy()

    def set_angular_velocity(self, ecm: FreeBody, v: Vector3d) -> None:
        ecm.ang_cmd = v._v.copy()

    def add_world_wrench(self, ecm: FreeBody, force: Vector3d, torque: Vector3d) -> None:
        ecm.force = ecm.force + force._v
        ecm.torque = ecm.torque + torque._v


PUBLISHED: dict[str, list[bytes]] = {}


class Node:
    def advertise(self, topic: str, msg_type):
        box = PUBLISHED.setdefault(topic, [])
        return types.SimpleNamespace(publish=lambda msg: box.append(msg.SerializeToString()))


class Info:
    def __init__(self, k: int, paused: bool = False) -> None:
        self.sim_time = timedelta(microseconds=k * STEP_NS // 1000)
        self.paused = paused


@pytest.fixture
def gz_model(monkeypatch, msgs) -> None:
    """gz.sim8, gz.math7, gz.transport13 and gz.msgs10 as the model above."""
    mods = {
        "gz": {},
        "gz.sim8": {"Model": Model, "Link": Link},
        "gz.math7": {"Vector3d": Vector3d, "Quaterniond": Quaterniond, "Pose3d": Pose3d},
        "gz.transport13": {"Node": Node},
        "gz.msgs10": {},
        "gz.msgs10.pose_pb2": {"Pose": msgs["Pose"]},
        "gz.msgs10.laserscan_pb2": {"LaserScan": msgs["LaserScan"]},
        "gz.msgs10.navsat_pb2": {"NavSat": msgs["NavSat"]},
        "gz.msgs10.imu_pb2": {"IMU": msgs["IMU"]},
        "gz.msgs10.image_pb2": {"Image": msgs["Image"]},
    }
    for name, attrs in mods.items():
        m = types.ModuleType(name)
        for k, v in attrs.items():
            setattr(m, k, v)
        monkeypatch.setitem(sys.modules, name, m)
    PUBLISHED.clear()


def _write_table(path: Path, motion, t0: int, steps: int, h_ns: int, mount, publish) -> Path:
    rows = drive_rows(motion, t0, 1, steps, STEP_NS, h_ns, mount, publish, 1.0, 1.0)
    path.write_bytes(table_header(STEP_NS) + rows_bytes(rows))
    return path


def _driver(monkeypatch, table: Path, body: FreeBody) -> driver_system.VehicleDriver:
    monkeypatch.setenv(driver_system.TABLE_ENV, str(table))
    drv = driver_system.get_system()
    drv.configure(1, None, body, None)
    return drv


# ------------------------------------------------------------------ trajectories


@st.composite
def trajectories(draw) -> Trajectory:
    """TUM-like paths starting at any nanosecond, spline (the default) or piecewise linear
    (sharp corners: rates that jump at every knot)."""
    n = draw(st.integers(5, 8))  # spans >= 60 ms: twice the longest IMU stencil step
    dt_ms = draw(st.lists(st.integers(15, 120), min_size=n - 1, max_size=n - 1))
    start = draw(st.integers(10**9, 10**12))
    t = start + 1_000_000 * np.concatenate([[0], np.cumsum(dt_ms)])
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    pos = np.cumsum(rng.normal(0.0, 0.3, (n, 3)), axis=0)
    rot = Rotation.from_rotvec(np.cumsum(rng.normal(0.0, 0.15, (n, 3)), axis=0))
    return Trajectory(t, pos, rot, draw(st.sampled_from(["spline", "linear"])))


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    traj=trajectories(),
    rate=st.sampled_from([50.0, 100.0, 200.0, 250.0]),
    mount_xyz=st.tuples(*[st.floats(-1.0, 1.0)] * 3),
    mount_rpy=st.tuples(*[st.floats(-0.5, 0.5)] * 3),
)
def test_driven_body_follows_the_trajectory_and_its_imu_reads_the_reference(
    gz_model, monkeypatch, tmp_path, traj, rate, mount_xyz, mount_rpy
) -> None:
    """Through the real driver and the gz-sim model: after every step inside the trajectory the
    body is at the trajectory's pose, and at every IMU capture Gazebo's IMU reads what the
    reference backend computes, corners included; before the start it holds still."""
    PUBLISHED.clear()  # one fixture for all examples
    imu = SPEC.sensors["imu"]
    new_mount = imu.mount.model_copy(update={"xyz": mount_xyz, "rpy": mount_rpy})
    imu = imu.model_copy(update={"rate_hz": rate, "mount": new_mount})
    spec = SPEC.model_copy(update={"sensors": {**SPEC.sensors, "imu": imu}})
    mount = Pose.from_xyz_rpy(imu.mount.xyz, imu.mount.rpy)
    h_ns = round(1e9 / rate)
    t0 = gzb.sim_offset_ns(traj.start_ns)
    steps = (traj.end_ns - t0) // STEP_NS
    caps = capture_times(rate, traj.start_ns, traj.end_ns)
    table = _write_table(tmp_path / "d.f64", traj, t0, steps, h_ns, mount, caps - t0)
    body = FreeBody()
    drv = _driver(monkeypatch, table, body)
    ref = ReferenceBackend()
    ref.open(WORLD, spec)
    want = {int(c): s for c, s in zip(caps, ref.capture_batch("imu", caps, traj))}
    checked = 0
    # every step sets the state afresh, so the warm-up's end is enough to check the hold
    first = max(1, (traj.start_ns - t0) // STEP_NS - 5)
    for k in range(first, steps + 1):
        drv.pre_update(Info(k), body)
        body.step()
        drv.post_update(Info(k), body)
        t = t0 + k * STEP_NS
        target = traj.pose_at(min(max(t, traj.start_ns), traj.end_ns))
        np.testing.assert_allclose(body.p, target.t, atol=1e-9)
        assert (target.rot.inv() * body.R).magnitude() < 1e-9
        if t < traj.start_ns:
            assert not body.v.any() and not body.w.any()
        if t in want:
            acc, gyro, rot = body.imu(mount)
            scale = 1.0 + np.abs(want[t].accel).max()
            np.testing.assert_allclose(acc, want[t].accel, atol=1e-7 * scale)
            np.testing.assert_allclose(gyro, want[t].gyro, atol=1e-9 * (1 + np.abs(gyro).max()))
            q = rot.as_quat()
            np.testing.assert_allclose(q * np.sign(q[3]), want[t].orientation, atol=1e-9)
            checked += 1
    assert checked == len(caps)
    # the driver published the body's pose exactly at the marked steps
    got = [decode.read_pose(raw) for raw in PUBLISHED[driver_system.POSE_TOPIC]]
    assert [g[0] for g in got] == list(caps - t0)
    for (_t, xyz, _q), c in zip(got, caps):
        np.testing.assert_allclose(xyz, traj.pose_at(int(c)).t, atol=1e-9)


def sharp_ramp_path(interpolation: str) -> Trajectory:
    """The demo's loop at 50 Hz put on the ground as a point (waypoints_to_trajectory), as the
    demo path was before it became a vehicle on two axles: it pitches 0.1 rad within 40 ms at
    the ramp's edge at 1.04 s, 61 m/s^2 at the IMU with the spline, 97 linear."""
    from simconform.trajectory import waypoints_to_trajectory

    t_ns = np.arange(151, dtype=np.int64) * 20_000_000
    th = 2 * np.pi * 2 * t_ns / 200e9
    x, y = 30 * np.cos(th), 18 * np.sin(th) + 4 * np.sin(3 * th)
    return waypoints_to_trajectory("demo", t_ns, x, y, WORLD, interpolation=interpolation)


@pytest.mark.parametrize("interpolation", ["spline", "linear"])
def test_sharp_corners_are_followed(gz_model, monkeypatch, tmp_path, interpolation) -> None:
    """A path with sharp corners (`sharp_ramp_path`: 20 ms knots, a ramp edge): 2.5 s of it
    through driver and model, pose exact and the IMU the reference's."""
    traj = sharp_ramp_path(interpolation)
    imu = SPEC.sensors["imu"]
    mount = Pose.from_xyz_rpy(imu.mount.xyz, imu.mount.rpy)
    t0 = gzb.sim_offset_ns(traj.start_ns)
    end = traj.start_ns + 2_500_000_000
    steps = (end - t0) // STEP_NS
    caps = capture_times(imu.rate_hz, traj.start_ns, end)
    table = _write_table(tmp_path / "d.f64", traj, t0, steps, round(1e9 / imu.rate_hz), mount, [])
    body = FreeBody()
    drv = _driver(monkeypatch, table, body)
    ref = ReferenceBackend()
    ref.open(WORLD, SPEC)
    want = dict(zip(caps.tolist(), ref.capture_batch("imu", caps, traj)))
    worst = 0.0
    for k in range(1, steps + 1):
        drv.pre_update(Info(k), body)
        body.step()
        drv.post_update(Info(k), body)
        t = t0 + k * STEP_NS
        if t in want:
            acc, gyro, _rot = body.imu(mount)
            worst = max(worst, np.abs(acc - want[t].accel).max())
            np.testing.assert_allclose(gyro, want[t].gyro, atol=1e-9)
            np.testing.assert_allclose(body.p, traj.pose_at(t).t, atol=1e-9)
    assert worst < 1e-6, worst
    assert max(np.abs(s.accel).max() for s in want.values()) > 50  # the bump is in there
    assert not PUBLISHED[driver_system.POSE_TOPIC]  # nothing marked, nothing published


def test_paused_and_out_of_table_iterations_leave_the_vehicle_alone(
    gz_model, monkeypatch, tmp_path
) -> None:
    traj = load_trajectory(DEMO_TRAJECTORY, WORLD)
    t0 = gzb.sim_offset_ns(traj.start_ns)
    table = _write_table(tmp_path / "d.f64", traj, t0, 3, 10_000_000, None, [3 * STEP_NS])
    body = FreeBody()
    drv = _driver(monkeypatch, table, body)
    drv.pre_update(Info(1, paused=True), body)
    assert body.pose_cmd is None and body.lin_cmd is None and not body.force.any()
    drv.pre_update(Info(4), body)  # past the rows written so far
    assert body.pose_cmd is None
    drv.pre_update(Info(3), body)
    assert body.pose_cmd is not None and body.lin_cmd is not None
    body.step()
    drv.post_update(Info(3), body)
    assert len(PUBLISHED[driver_system.POSE_TOPIC]) == 1
    (tmp_path / "bad.f64").write_bytes(b"\0" * 8 * driver_system.NCOL)
    monkeypatch.setenv(driver_system.TABLE_ENV, str(tmp_path / "bad.f64"))
    with pytest.raises(ValueError, match="not a simconform drive table"):
        driver_system.get_system().configure(1, None, body, None)


# ------------------------------------------------------------------ the backend's stepping


class ModelServer:
    """Stands in for GzSession: a paused world that runs the real driver and the model above
    per iteration, and publishes what Gazebo's sensors would at their update times."""

    instances: ClassVar[list[ModelServer]] = []

    def __init__(self, sdf_path: Path, world: str, env: dict, drive: bool = True) -> None:
        self.env, self.drive = env, drive
        assert (sdf_path.parent / f"{driver_system.MODULE_NAME}.py").is_file()
        self.table = driver_system.DriveTable(env[driver_system.TABLE_ENV])
        self.body = FreeBody()
        mp = pytest.MonkeyPatch()
        mp.setenv(driver_system.TABLE_ENV, env[driver_system.TABLE_ENV])
        self.driver = driver_system.get_system()
        self.driver.configure(1, None, self.body, None)
        mp.undo()
        self.k, self.subs, self.inbox, self.steps = 0, {}, {}, []
        self.log = types.SimpleNamespace(name=str(sdf_path.with_suffix(".log")))
        ModelServer.instances.append(self)

    def subscribe(self, topic: str, msg_class) -> None:
        self.subs[topic] = msg_class
        self.inbox[topic] = {}

    def step(self, n: int, proof: tuple[str, int] | None = None) -> None:
        self.steps.append(n)
        for _ in range(n):
            self.k += 1
            # the backend wrote every row before it asked for the step
            assert self.table.row(self.k) is not None, self.k
            if self.drive:
                self.driver.pre_update(Info(self.k), self.body)
            self.body.step()
            if self.drive:
                self.driver.post_update(Info(self.k), self.body)
            elif self.k * STEP_NS % 10_000_000 == 0:  # a pose stream from an undriven body
                self._publish_pose(self.k * STEP_NS)
            self._sensors(self.k * STEP_NS)
        published = PUBLISHED.setdefault(driver_system.POSE_TOPIC, [])
        raws, published[:] = published[:], []
        for raw in raws:
            self.inbox[driver_system.POSE_TOPIC][decode.message_stamp_ns(raw)] = raw

    def _publish_pose(self, sim_ns: int) -> None:
        m = self.subs[driver_system.POSE_TOPIC]()
        m.header.stamp.sec, m.header.stamp.nsec = divmod(sim_ns, 1_000_000_000)
        m.position.x, m.position.y, m.position.z = self.body.p
        self.inbox[driver_system.POSE_TOPIC][sim_ns] = m.SerializeToString()

    def _sensors(self, sim_ns: int) -> None:
        for topic, cls in self.subs.items():
            name = topic.split("/")[2]
            s = SPEC.sensors.get(name)
            if s is None or sim_ns % round(1e9 / s.rate_hz):
                continue
            m = cls()
            m.header.stamp.sec, m.header.stamp.nsec = divmod(sim_ns, 1_000_000_000)
            mount = Pose.from_xyz_rpy(s.mount.xyz, s.mount.rpy)
            if name == "lidar":
                m.count, m.vertical_count, m.range_min, m.range_max = 360, 16, 0.3, 100.0
                m.angle_max, m.vertical_angle_min, m.vertical_angle_max = 6.2, -0.26, 0.26
                m.ranges.extend([self.body.p[0]] * 360 * 16)  # range = x of the vehicle
            elif name == "gnss":
                enu = self.body.R.apply(mount.t) + self.body.p
                o = WORLD.origin
                m.latitude_deg, m.longitude_deg, m.altitude = pymap3d.enu2geodetic(
                    *enu, o.lat, o.lon, o.alt
                )
            elif name == "imu":
                acc, gyro, rot = self.body.imu(mount)
                la, av, q = m.linear_acceleration, m.angular_velocity, m.orientation
                la.x, la.y, la.z = acc
                av.x, av.y, av.z = gyro
                q.x, q.y, q.z, q.w = rot.as_quat()
            self.inbox[topic][sim_ns] = m.SerializeToString()

    def wait_stamp(self, topic: str, stamp_ns: int, timeout_s: float = 1.0) -> None:
        assert stamp_ns in self.inbox[topic], (topic, stamp_ns, sorted(self.inbox[topic])[-3:])

    def wait_for(self, topic: str, stamp_ns: int, timeout_s: float = 1.0) -> bytes:
        self.wait_stamp(topic, stamp_ns)
        box = self.inbox[topic]
        for old in [s for s in box if s < stamp_ns]:
            del box[old]
        return box.pop(stamp_ns)

    def close(self) -> None:
        self.closed = True


def _backend(monkeypatch, sensors: tuple[str, ...], drive: bool = True) -> gzb.GazeboBackend:
    spec = SPEC.model_copy(
        update={"sensors": {k: v for k, v in SPEC.sensors.items() if k in sensors}}
    )
    monkeypatch.setattr(gzb, "unavailable_message", lambda: None)
    monkeypatch.setattr(
        gzb, "GzSession", lambda path, world, env, **kw: ModelServer(path, world, env, drive)
    )
    ModelServer.instances.clear()
    b = gzb.GazeboBackend()
    b.open(WORLD, spec)
    return b


def test_backend_drives_steps_and_serves_captures_in_any_order(gz_model, monkeypatch) -> None:
    """The backend against the model server: the server starts at the first capture, every
    capture is a whole number of steps after T0, sensors are served by stamp whatever order
    they are asked in, the IMU is the reference's and odometry is Gazebo's own pose."""
    traj = load_trajectory(DEMO_TRAJECTORY, WORLD)
    b = _backend(monkeypatch, ("lidar", "gnss", "imu", "odom"))
    assert not ModelServer.instances  # nothing started before the trajectory is known
    ref = ReferenceBackend()
    ref.open(WORLD, b.spec)
    t = traj.start_ns + np.arange(0, 4) * 100_000_000
    gnss = b.capture_batch("gnss", t[:2], traj)  # GNSS first, then lidar, IMU, odom, GNSS
    lidar = b.capture_batch("lidar", t, traj)
    imu_t = capture_times(100.0, traj.start_ns, int(t[-1]))
    imu = b.capture_batch("imu", imu_t, traj)
    odom = b.capture_batch("odom", capture_times(20.0, traj.start_ns, int(t[-1])), traj)
    gnss += b.capture_batch("gnss", t[2:], traj)
    (server,) = ModelServer.instances
    b.close()
    t0 = gzb.sim_offset_ns(traj.start_ns)
    assert traj.start_ns - t0 == 1_000_000_000
    # one multi_step per block: the warm-up second plus one second of capture events
    assert server.steps == [2000]
    assert server.closed and b.tmp is None
    g = SPEC.sensors["gnss"].mount
    mount = Pose.from_xyz_rpy(g.xyz, g.rpy)
    for k, tt in enumerate(t):
        p = traj.pose_at(int(tt))
        np.testing.assert_allclose(np.nanmax(lidar[k].ranges), p.t[0], atol=1e-9)
        np.testing.assert_allclose(gnss[k].enu, p.compose(mount).t, atol=1e-6)
    for got, want in zip(imu, ref.capture_batch("imu", imu_t, traj)):
        np.testing.assert_allclose(got.accel, want.accel, atol=1e-7)
        np.testing.assert_allclose(got.gyro, want.gyro, atol=1e-9)
    for got, want in zip(odom, ref.capture_batch("odom", capture_times(20.0, t[0], t[-1]), traj)):
        assert math.isclose(got.x, want.x, abs_tol=1e-9) and math.isclose(
            got.y, want.y, abs_tol=1e-9
        )
        assert math.isclose(got.yaw, want.yaw, abs_tol=1e-9)
    assert b.max_pose_error[0] < 1e-9 and b.max_pose_error[1] < 1e-9


def test_backend_stops_when_the_drive_system_is_not_running(gz_model, monkeypatch) -> None:
    """A PythonSystemLoader that failed only logs; the vehicle then sits at the origin. The
    backend notices at the first capture and names the log instead of recording garbage."""
    traj = load_trajectory(DEMO_TRAJECTORY, WORLD)
    b = _backend(monkeypatch, ("gnss",), drive=False)
    with pytest.raises(RuntimeError, match="drive system is not moving it"):
        b.capture("gnss", traj.start_ns, traj)
    b.close()


def test_run_records_a_gazebo_bag_end_to_end(gz_model, monkeypatch, tmp_path) -> None:
    """`run` with --backend gazebo on the model server: one timeline in the main process (no
    worker pool, whatever --jobs says), a complete bag, and the verifier's IMU verdicts on the
    driven vehicle's truth."""
    from conftest import demo_spec, write_yaml
    from simconform import prefetch
    from simconform.run import RunConfig, run
    from simconform.verify.verifier import verify_run

    data = demo_spec()
    data["sensors"] = {k: v for k, v in data["sensors"].items() if k in ("imu", "gnss", "odom")}
    spec_path = write_yaml(tmp_path / "spec.yaml", data)
    monkeypatch.setattr(gzb, "unavailable_message", lambda: None)
    monkeypatch.setattr(
        gzb, "GzSession", lambda path, world, env, **kw: ModelServer(path, world, env)
    )

    def no_pool(*args, **kwargs):
        raise AssertionError("the gazebo backend must not be rendered ahead in workers")

    monkeypatch.setattr(prefetch, "CapturePool", no_pool)
    ModelServer.instances.clear()
    cfg = RunConfig(spec=spec_path, backend="gazebo", out=tmp_path / "run", duration=3.0, jobs=2)
    res = run(cfg, progress=False)
    assert res.complete and res.captures["imu"] == 300 and res.captures["odom"] == 60
    (server,) = ModelServer.instances
    assert server.closed
    report = verify_run(res.out)
    assert report["run"]["backend"] == "gazebo"
    imu = report["sensors"]["imu"]["metrics"]
    for axis in "xyz":  # the configured biases are recovered from Gazebo's (driven) truth
        assert imu[f"accel_bias_{axis}"]["verdict"] in ("pass", "inconclusive")
        assert imu[f"gyro_bias_{axis}"]["verdict"] in ("pass", "inconclusive")
