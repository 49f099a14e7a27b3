"""Replay backend: bags in foreign layouts, written here with rosbags itself (not with our
recorder), with a known error model injected; replay must recover it within its intervals.

The "foreign simulator" below computes exact truth with the reference backend on a densely
sampled trajectory (1 kHz) and publishes ground truth at 100 Hz in the foreign format; replay
sees only the bag and recomputes truth from the 100 Hz pose stream.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import jsonschema
import numpy as np
import pymap3d
import pytest
import yaml
from rosbags.rosbag1 import Writer as Writer1
from rosbags.rosbag2 import StoragePlugin
from rosbags.rosbag2 import Writer as Writer2
from rosbags.typesys import Stores, get_types_from_msg, get_typestore
from scipy.spatial.transform import Rotation
from scipy.stats import binom
from typer.testing import CliRunner

from conftest import REPO, cli, write_yaml
from simconform.adapters.reference import ReferenceBackend
from simconform.adapters.replay import ReplayConfig, replay
from simconform.adapters.replay.map import check_against_spec, load_map, unity_to_ros
from simconform.adapters.replay.pairing import PairStats, RayGrid, pair_by_direction
from simconform.bag.reader import SourceBag
from simconform.cli import app
from simconform.errors import UserError
from simconform.frames import Pose
from simconform.run import RunConfig, run
from simconform.spec import Spec, load_spec
from simconform.trajectory import Trajectory
from simconform.verify import stats
from simconform.verify.verifier import verify_run
from simconform.world import World

ROS2 = get_typestore(Stores.ROS2_JAZZY)
ROS1 = get_typestore(Stores.ROS1_NOETIC)
if "tf2_msgs/msg/TFMessage" not in ROS1.types:  # rosbags' Noetic store has tf's, not tf2's
    ROS1.register(
        get_types_from_msg("geometry_msgs/TransformStamped[] transforms", "tf2_msgs/msg/TFMessage")
    )
T0 = 1_000_000_000_000  # foreign clocks rarely start at zero: 1000 s
DURATION_NS = 3_000_000_000
EXAMPLES = REPO / "examples" / "replay"

WORLD = {
    "name": "replay-test",
    "origin": {"lat": 48.137, "lon": 11.575, "alt": 520.0},
    "objects": [
        {"type": "plane"},
        {"type": "box", "center": [9.0, 0.0, 1.0], "size": [2.0, 6.0, 2.0]},
        {"type": "box", "center": [-7.0, 4.0, 1.5], "size": [1.0, 8.0, 3.0]},
        {"type": "box", "center": [1.0, 10.0, 2.0], "size": [12.0, 1.0, 4.0]},
        {"type": "sphere", "center": [2.0, -8.0, 1.0], "radius": 2.0},
    ],
}
LIDAR = {"bias": 0.01, "sigma": 0.03, "point": 0.1, "sample": 0.1, "latency_ms": 40.0}
SPEC = {
    "name": "replay-test",
    "sensors": {
        "lidar": {
            "type": "lidar",
            "rate_hz": 10,
            "mount": {"xyz": [0.3, 0.0, 1.2], "rpy": [0.0, 0.0, 0.1]},
            "rings": {"count": 8, "fov_deg": [-25.0, 5.0]},
            "columns": 180,
            "range": {"min": 0.3, "max": 60.0},
            "shutter": "rolling",
            "noise": {"range": {"bias": LIDAR["bias"], "sigma": LIDAR["sigma"]}},
            "dropout": {"sample": LIDAR["sample"], "point": LIDAR["point"]},
            "latency": {"fixed_ms": LIDAR["latency_ms"], "jitter_ms": 2.0},
        },
        "imu": {
            "type": "imu",
            "rate_hz": 100,
            "mount": {"xyz": [0.1, -0.1, 0.5]},
            "noise": {
                "accel": {"bias": [0.05, -0.03, 0.02], "sigma": [0.02, 0.02, 0.02]},
                "gyro": {"bias": [0.001, -0.002, 0.0005], "sigma": [0.002, 0.002, 0.002]},
            },
            "latency": {"fixed_ms": 2.0},
        },
        "gnss": {
            "type": "gnss",
            "rate_hz": 10,
            "mount": {"xyz": [-0.2, 0.0, 1.5]},
            "noise": {"position": {"sigma": [0.5, 0.5, 1.0]}},
            "latency": {"fixed_ms": 100.0},
        },
        "odom": {
            "type": "odom",
            "rate_hz": 20,
            "noise": {"increment": {"sigma": [0.002, 0.001, 0.0005]}},
            "latency": {"fixed_ms": 10.0},
        },
    },
}


# --------------------------------------------------------------------------- the foreign sim


def base_motion(t_ns: np.ndarray) -> tuple[np.ndarray, Rotation]:
    """A circle of 6 m radius at 1.5 m/s with a slow pitch and heave (exercises the IMU)."""
    s = (np.asarray(t_ns, dtype=np.int64) - T0) * 1e-9
    w = 0.25
    pos = np.c_[6 * np.sin(w * s), 6 * (1 - np.cos(w * s)), 0.05 * np.sin(1.3 * s)]
    rpy = np.c_[0.02 * np.sin(0.9 * s), 0.03 * np.sin(1.1 * s), w * s]
    return pos, Rotation.from_euler("xyz", rpy)


def dense_trajectory() -> Trajectory:
    t = T0 - 200_000_000 + np.arange(0, DURATION_NS + 400_000_001, 1_000_000)
    pos, rot = base_motion(t)
    return Trajectory(t, pos, rot)


@dataclass
class Sim:
    """Exact truth, the injected errors and the messages a foreign recorder would log."""

    seed: int
    spec: Spec = field(default_factory=lambda: Spec.model_validate(SPEC))
    world: World = field(default_factory=lambda: World.model_validate(WORLD))

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.seed)
        self.traj = dense_trajectory()
        self.ref = ReferenceBackend()
        self.ref.open(self.world, self.spec)
        self.dropped_scans = 0

    def stamps(self, rate: float) -> np.ndarray:
        return T0 + np.arange(0, DURATION_NS, round(1e9 / rate), dtype=np.int64)

    def lidar(self):
        """(stamp, log, points (R,C,3) sensor frame, NaN where no return / dropped)."""
        s = self.spec.sensors["lidar"]
        out = []
        stamps = self.stamps(s.rate_hz)
        for k, st in enumerate(stamps):
            if 0 < k < len(stamps) - 1 and self.rng.random() < LIDAR["sample"]:
                self.dropped_scans += 1
                continue
            lt = self.ref.capture("lidar", int(st), self.traj)
            e = LIDAR["bias"] + LIDAR["sigma"] * self.rng.standard_normal(lt.ranges.shape)
            pts = lt.points + e[..., None] * lt.directions
            pts[self.rng.random(lt.ranges.shape) < LIDAR["point"]] = np.nan
            log = int(st) + round(1e6 * (LIDAR["latency_ms"] + 2.0 * self.rng.standard_normal()))
            out.append((int(st), log, pts, lt.intensity))
        return out

    def world_points(self, st: int, pts: np.ndarray) -> np.ndarray:
        """Each point from the sensor's pose at its column's time (points are not deskewed)."""
        s = self.spec.sensors["lidar"]
        mount = Pose.from_xyz_rpy(s.mount.xyz, s.mount.rpy)
        col = st + np.round(s.column_offsets_s() * 1e9).astype(np.int64)
        pose = self.traj.pose_at(col).compose(mount)
        return np.einsum("cij,rcj->rci", pose.rot.as_matrix(), pts) + pose.t[None]

    def imu(self):
        s = self.spec.sensors["imu"]
        stamps = self.stamps(s.rate_hz)
        truth = self.ref.capture_batch("imu", stamps, self.traj)
        n = s.noise
        out = []
        for st, t in zip(stamps, truth):
            a = t.accel + np.array(n.accel.bias) + 0.02 * self.rng.standard_normal(3)
            g = t.gyro + np.array(n.gyro.bias) + 0.002 * self.rng.standard_normal(3)
            out.append((int(st), int(st) + 2_000_000, a, g))
        return out

    def gnss(self):
        s = self.spec.sensors["gnss"]
        stamps = self.stamps(s.rate_hz)
        o = self.world.origin
        out = []
        for st, t in zip(stamps, self.ref.capture_batch("gnss", stamps, self.traj)):
            enu = t.enu + np.array([0.5, 0.5, 1.0]) * self.rng.standard_normal(3)
            lla = pymap3d.enu2geodetic(*enu, o.lat, o.lon, o.alt)
            out.append((int(st), int(st) + 100_000_000, lla))
        return out

    def odom(self):
        """Planar odometry integrating noisy increments (in an odom frame offset from map)."""
        stamps = self.stamps(self.spec.sensors["odom"].rate_hz)
        truth = self.ref.capture_batch("odom", stamps, self.traj)
        x, y, yaw = 3.0, -2.0, 0.4  # the odom frame's origin is arbitrary
        out, prev = [], None
        for st, t in zip(stamps, truth):
            if prev is not None:
                c, s_ = np.cos(prev.yaw), np.sin(prev.yaw)
                dx, dy = t.x - prev.x, t.y - prev.y
                inc = np.array([c * dx + s_ * dy, -s_ * dx + c * dy, t.yaw - prev.yaw])
                inc += np.array([0.002, 0.001, 0.0005]) * self.rng.standard_normal(3)
                x += np.cos(yaw) * inc[0] - np.sin(yaw) * inc[1]
                y += np.sin(yaw) * inc[0] + np.cos(yaw) * inc[1]
                yaw += inc[2]
            prev = t
            out.append((int(st), int(st) + 10_000_000, x, y, yaw))
        return out

    def poses(self, rate: float = 100.0):
        t = T0 - 100_000_000 + np.arange(0, DURATION_NS + 200_000_001, round(1e9 / rate))
        pos, rot = base_motion(t)
        return t, pos, rot.as_quat()


# --------------------------------------------------------------------------- message builders


class Msgs:
    """Messages of one type store (ROS 2 Jazzy or ROS 1 Noetic), as a foreign driver makes."""

    def __init__(self, store) -> None:
        self.store, self.T = store, store.types
        self.ros1 = store is ROS1

    def header(self, st: int, frame: str):
        sec, nsec = divmod(int(st), 1_000_000_000)
        stamp = self.T["builtin_interfaces/msg/Time"](sec=sec, nanosec=nsec)
        kw = {"seq": 0} if self.ros1 else {}
        return self.T["std_msgs/msg/Header"](stamp=stamp, frame_id=frame, **kw)

    def cloud(self, st, frame, pts, intensity=None, organized=True, layout="gazebo"):
        """PointCloud2 in another layout than ours: gazebo (x y z pad intensity ring, 24 B)
        or unity (x y z only, 12 B)."""
        pf = self.T["sensor_msgs/msg/PointField"]
        if layout == "gazebo":
            names = ["x", "y", "z", "intensity", "ring"]
            dtype = np.dtype(
                {
                    "names": names,
                    "formats": ["<f4", "<f4", "<f4", "<f4", "<u2"],
                    "offsets": [0, 4, 8, 16, 20],
                    "itemsize": 24,
                }
            )
            fields = [
                pf(name=n, offset=o, datatype=d, count=1)
                for n, o, d in zip(names, [0, 4, 8, 16, 20], [7, 7, 7, 7, 4])
            ]
        elif layout == "noxyz":
            dtype = np.dtype({"names": ["a", "b"], "formats": ["<f4", "<f4"], "itemsize": 8})
            fields = [pf(name=n, offset=4 * i, datatype=7, count=1) for i, n in enumerate("ab")]
        else:
            dtype = np.dtype({"names": ["x", "y", "z"], "formats": ["<f4"] * 3, "itemsize": 12})
            fields = [pf(name=n, offset=4 * i, datatype=7, count=1) for i, n in enumerate("xyz")]
        if organized:
            h, w = pts.shape[:2]
        else:
            h, w = 1, pts.reshape(-1, 3).shape[0]
        arr = np.zeros(h * w, dtype=dtype)
        flat = pts.reshape(-1, 3)
        if layout == "noxyz":
            arr["a"], arr["b"] = flat[:, 0], flat[:, 1]
        else:
            arr["x"], arr["y"], arr["z"] = flat[:, 0], flat[:, 1], flat[:, 2]
        if layout == "gazebo":
            arr["intensity"] = 0.0 if intensity is None else intensity.reshape(-1)
            rings = pts.shape[0] if organized else 1
            arr["ring"] = np.repeat(np.arange(rings), h * w // rings) if organized else 0
        return self.T["sensor_msgs/msg/PointCloud2"](
            header=self.header(st, frame),
            height=h,
            width=w,
            fields=fields,
            is_bigendian=False,
            point_step=dtype.itemsize,
            row_step=dtype.itemsize * w,
            data=np.frombuffer(arr.tobytes(), dtype=np.uint8),
            is_dense=not organized,
        )

    def vec(self, v):
        return self.T["geometry_msgs/msg/Vector3"](x=float(v[0]), y=float(v[1]), z=float(v[2]))

    def quat(self, q):
        return self.T["geometry_msgs/msg/Quaternion"](
            x=float(q[0]), y=float(q[1]), z=float(q[2]), w=float(q[3])
        )

    def imu(self, st, accel, gyro):
        z9 = np.zeros(9)
        return self.T["sensor_msgs/msg/Imu"](
            header=self.header(st, "imu"),
            orientation=self.quat((0, 0, 0, 1)),
            orientation_covariance=np.r_[-1.0, np.zeros(8)],
            angular_velocity=self.vec(gyro),
            angular_velocity_covariance=z9,
            linear_acceleration=self.vec(accel),
            linear_acceleration_covariance=z9,
        )

    def navsat(self, st, lla):
        status = self.T["sensor_msgs/msg/NavSatStatus"](status=0, service=1)
        return self.T["sensor_msgs/msg/NavSatFix"](
            header=self.header(st, "gps"),
            status=status,
            latitude=float(lla[0]),
            longitude=float(lla[1]),
            altitude=float(lla[2]),
            position_covariance=np.zeros(9),
            position_covariance_type=0,
        )

    def pose(self, xyz, q):
        p = self.T["geometry_msgs/msg/Point"](x=float(xyz[0]), y=float(xyz[1]), z=float(xyz[2]))
        return self.T["geometry_msgs/msg/Pose"](position=p, orientation=self.quat(q))

    def odometry(self, st, xyz, q, frame="odom"):
        T = self.T
        return T["nav_msgs/msg/Odometry"](
            header=self.header(st, frame),
            child_frame_id="base_link",
            pose=T["geometry_msgs/msg/PoseWithCovariance"](
                pose=self.pose(xyz, q), covariance=np.zeros(36)
            ),
            twist=T["geometry_msgs/msg/TwistWithCovariance"](
                twist=T["geometry_msgs/msg/Twist"](
                    linear=self.vec((0, 0, 0)), angular=self.vec((0, 0, 0))
                ),
                covariance=np.zeros(36),
            ),
        )

    def tf(self, st, parent, child, xyz, q):
        T = self.T
        ts = T["geometry_msgs/msg/TransformStamped"](
            header=self.header(st, parent),
            child_frame_id=child,
            transform=T["geometry_msgs/msg/Transform"](
                translation=self.vec(xyz), rotation=self.quat(q)
            ),
        )
        other = T["geometry_msgs/msg/TransformStamped"](
            header=self.header(st, parent),
            child_frame_id="npc",
            transform=T["geometry_msgs/msg/Transform"](
                translation=self.vec((50, 0, 0)), rotation=self.quat((0, 0, 0, 1))
            ),
        )
        return T["tf2_msgs/msg/TFMessage"](transforms=[other, ts])

    def string(self, text: str):
        return self.T["std_msgs/msg/String"](data=text)

    def pose_stamped(self, st, xyz, q):
        return self.T["geometry_msgs/msg/PoseStamped"](
            header=self.header(st, "map"), pose=self.pose(xyz, q)
        )


def yaw_quat(yaw: float) -> np.ndarray:
    return Rotation.from_euler("z", yaw).as_quat()


def write_bag(path: Path, fmt: str, items: list[tuple[str, str, int, object]], store) -> Path:
    """Write (topic, type, log_ns, msg) with rosbags' own writers, in log-time order."""
    items = sorted(items, key=lambda x: x[2])
    if fmt == "ros1":
        with Writer1(path) as w:
            conns = {}
            for topic, typ, log, msg in items:
                if topic not in conns:
                    conns[topic] = w.add_connection(topic, typ, typestore=store)
                w.write(conns[topic], log, store.serialize_ros1(msg, typ))
        return path
    plugin = StoragePlugin.MCAP if fmt == "mcap" else StoragePlugin.SQLITE3
    with Writer2(path, version=9, storage_plugin=plugin) as w:
        conns = {}
        for topic, typ, log, msg in items:
            if topic not in conns:
                conns[topic] = w.add_connection(topic, typ, typestore=store)
            w.write(conns[topic], log, store.serialize_cdr(msg, typ))
    return path


PC2, IMU, FIX, ODOM = (
    "sensor_msgs/msg/PointCloud2",
    "sensor_msgs/msg/Imu",
    "sensor_msgs/msg/NavSatFix",
    "nav_msgs/msg/Odometry",
)


def foreign_items(sim: Sim, m: Msgs, lidar: str, gt: str, sensors=("lidar", "imu", "gnss", "odom")):
    """Messages of a foreign recording.

    lidar: "organized-sensor" | "unorganized-world" | "unorganized-sensor";
    gt: "tf" | "json" | "odometry" | "pose_stamped".
    """
    items = []
    if "lidar" in sensors:
        for st, log, pts, inten in sim.lidar():
            if lidar == "organized-sensor":
                msg = m.cloud(st, "lidar", np.where(np.isnan(pts), np.inf, pts), inten)
            else:
                p = sim.world_points(st, pts) if lidar.endswith("world") else pts
                flat = p.reshape(-1, 3)
                flat = flat[np.all(np.isfinite(flat), axis=1)]
                flat = flat[sim.rng.permutation(len(flat))]
                msg = m.cloud(st, "lidar", flat, organized=False, layout="unity")
            items.append(("/sim/lidar", PC2, log, msg))
    if "imu" in sensors:
        items += [("/sim/imu", IMU, log, m.imu(st, a, g)) for st, log, a, g in sim.imu()]
    if "gnss" in sensors:
        items += [("/sim/gps", FIX, log, m.navsat(st, lla)) for st, log, lla in sim.gnss()]
    if "odom" in sensors:
        items += [
            ("/sim/odom", ODOM, log, m.odometry(st, (x, y, 0.0), yaw_quat(yaw)))
            for st, log, x, y, yaw in sim.odom()
        ]
    t, pos, q = sim.poses()
    for st, p, qq in zip(t.tolist(), pos, q):
        log = st + 1_000_000
        if gt == "tf":
            items.append(
                ("/gt/tf", "tf2_msgs/msg/TFMessage", log, m.tf(st, "world", "rover", p, qq))
            )
        elif gt == "odometry":
            items.append(("/gt/odom", ODOM, log, m.odometry(st, p, qq, frame="world")))
        elif gt == "pose_stamped":
            items.append(
                ("/gt/pose", "geometry_msgs/msg/PoseStamped", log, m.pose_stamped(st, p, qq))
            )
        elif gt == "json":
            # Unity axes, and the agent's pose is of its body: base_link is 0.3 m below it
            body = Pose.from_xyz_quat(p, qq).compose(Pose.from_xyz_rpy((0, 0, 0.3), (0, 0, 0)))
            x, y, z = body.t
            bq = body.quat()
            ux, uy, uz = -y, z, x
            uq = (-bq[1], bq[2], bq[0], -bq[3])
            doc = {
                "timestamp": st / 1e9,
                "agents": [
                    {
                        "id": "npc1",
                        "tx": 1.0,
                        "ty": 0.0,
                        "tz": 5.0,
                        "qw": 1,
                        "qx": 0,
                        "qy": 0,
                        "qz": 0,
                    },
                    {
                        "id": "ego",
                        "tx": ux,
                        "ty": uy,
                        "tz": uz,
                        "qw": uq[3],
                        "qx": uq[0],
                        "qy": uq[1],
                        "qz": uq[2],
                    },
                ],
            }
            items.append(
                ("/ground_truth/agents", "std_msgs/msg/String", log, m.string(json.dumps(doc)))
            )
    return items


GT_MAPS = {
    "tf": {"kind": "tf", "topic": "/gt/tf", "parent": "world", "child": "rover"},
    "odometry": {"kind": "odometry", "topic": "/gt/odom"},
    "pose_stamped": {"kind": "pose_stamped", "topic": "/gt/pose"},
    "json": {
        "kind": "json",
        "topic": "/ground_truth/agents",
        "json_ego": {
            "list_key": "agents",
            "match": {"id": "ego"},
            "stamp_key": "timestamp",
            "convention": "unity",
        },
        "base_in_body": {"xyz": [0.0, 0.0, -0.3]},
    },
}


def lidar_entry(lidar: str) -> dict:
    """The foreign clouds carry no per-point time: their points follow the spec's column
    schedule (`point_time: none`; tests/test_point_time.py covers time fields)."""
    if lidar == "organized-sensor":
        return {
            "topic": "/sim/lidar",
            "organized": True,
            "pairing": "direction",
            "frame": "lidar",
            "point_time": "none",
        }
    return {
        "topic": "/sim/lidar",
        "organized": False,
        "points_frame": "world" if lidar.endswith("world") else "sensor",
        "point_time": "none",
    }


def make_map(
    tmp: Path, lidar: str, gt: str, sensors=("lidar", "imu", "gnss", "odom"), **extra
) -> Path:
    entries = {
        "lidar": lidar_entry(lidar),
        "imu": {"topic": "/sim/imu", "type": "sensor_msgs/Imu"},  # ROS 1 spelling is fine
        "gnss": {"topic": "/sim/gps"},
        "odom": {"topic": "/sim/odom"},
    }
    data = {
        "spec": "spec.yaml",
        "world": "world.yaml",
        "truth": "recompute",
        "sensors": {k: v for k, v in entries.items() if k in sensors},
        "ground_truth": GT_MAPS[gt],
    }
    data.update(extra)
    write_yaml(tmp / "spec.yaml", SPEC)
    write_yaml(tmp / "world.yaml", WORLD)
    return write_yaml(tmp / f"map-{lidar}-{gt}.yaml", data)


def contains(metric: dict, value: float) -> bool:
    lo, hi = metric["ci"]
    return lo <= value <= hi


def run_replay(tmp: Path, bag: Path, mp: Path, name: str = "out") -> tuple[dict, dict]:
    out = tmp / name
    replay(ReplayConfig(bag=bag, map=mp, out=out))
    report = verify_run(out, 0.95, write=False)
    return json.loads((out / "run.json").read_text()), report


def check_recovered(
    report: dict, manifest: dict, sim: Sim, sensors=("lidar", "imu", "gnss", "odom")
):
    """The lidar's large samples must pass outright; every injected value must lie in its
    95 % interval, with misses allowed up to a binomial bound over all the intervals."""
    checks: list[tuple[str, dict, float]] = []
    if "lidar" in sensors:
        lm = report["sensors"]["lidar"]["metrics"]
        assert not [k for k, m in lm.items() if m["verdict"] == "fail"], lm
        for key in ("range_std", "range_bias", "point_dropout"):
            assert lm[key]["verdict"] == "pass", (key, lm[key])
        checks += [
            ("range_std", lm["range_std"], LIDAR["sigma"]),
            ("range_bias", lm["range_bias"], LIDAR["bias"]),
            ("point_dropout", lm["point_dropout"], LIDAR["point"]),
            ("latency_ms", lm["latency_ms"], LIDAR["latency_ms"]),
            ("sample_dropout", lm["sample_dropout"], LIDAR["sample"]),
        ]
        info = manifest["replay"]["sensors"]["lidar"]
        assert info["inferred_dropped"] == sim.dropped_scans
        sd = lm["sample_dropout"]
        assert sd["n"] == 30 and round(sd["measured"] * 30) == sim.dropped_scans
    if "imu" in sensors:
        im = report["sensors"]["imu"]["metrics"]
        noise = (("accel", (0.05, -0.03, 0.02), 0.02), ("gyro", (0.001, -0.002, 0.0005), 0.002))
        for q, bias, sigma in noise:
            for a, axis in enumerate("xyz"):
                checks.append((f"{q}_std_{axis}", im[f"{q}_std_{axis}"], sigma))
                checks.append((f"{q}_bias_{axis}", im[f"{q}_bias_{axis}"], bias[a]))
        assert im["latency_ms"]["measured"] == pytest.approx(2.0)
    if "gnss" in sensors:
        gm = report["sensors"]["gnss"]["metrics"]
        for axis, sigma in zip("enu", (0.5, 0.5, 1.0)):
            checks.append((f"position_std_{axis}", gm[f"position_std_{axis}"], sigma))
            checks.append((f"position_bias_{axis}", gm[f"position_bias_{axis}"], 0.0))
        assert gm["latency_ms"]["measured"] == pytest.approx(100.0)
    if "odom" in sensors:
        om = report["sensors"]["odom"]["metrics"]
        for axis, sigma in zip(("x", "y", "yaw"), (0.002, 0.001, 0.0005)):
            checks.append((f"increment_std_{axis}", om[f"increment_std_{axis}"], sigma))
            checks.append((f"increment_bias_{axis}", om[f"increment_bias_{axis}"], 0.0))
    misses = [(name, m["ci"], v) for name, m, v in checks if not contains(m, v)]
    assert len(misses) <= binom.ppf(0.999, len(checks), 0.05), misses


# --------------------------------------------------------------------------- maps


def test_example_maps_fit_the_rover_spec() -> None:
    spec = load_spec(REPO / "sensors_spec" / "rover.yaml")
    for path in sorted(EXAMPLES.glob("*.yaml")):
        m = load_map(path)
        check_against_spec(m, spec, path)
        assert m.path_of("spec").is_file() and m.path_of("world").is_file()
    assert {p.name for p in EXAMPLES.glob("*.yaml")} >= {
        "own_layout.yaml",
        "unity_json.yaml",
        "gazebo_tf.yaml",
    }


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"sensors": {"lidar": {"topic": "/l", "organised": True}}}, "sensors.lidar.organised"),
        (
            {"sensors": {"lidar": {"topic": "/l", "points_frame": "map"}}},
            "sensors.lidar.points_frame",
        ),
        ({"ground_truth": {"kind": "gps", "topic": "/x"}}, "ground_truth"),
        ({"sensors": {"imu": {"topic": "/i", "organized": False}}}, "sensors.imu.organized"),
        ({"sensors": {"camera": {"topic": "/c"}}}, "sensors.camera"),
        (
            {"sensors": {"lidar": {"topic": "/l", "type": "sensor_msgs/LaserScan"}}},
            "sensors.lidar.type",
        ),
        ({"truth": "recompute", "ground_truth": None}, "ground_truth"),
    ],
)
def test_bad_maps_are_one_user_error(tmp_path: Path, patch: dict, field: str) -> None:
    data = {"sensors": {"lidar": {"topic": "/l"}}, "ground_truth": GT_MAPS["tf"]}
    data.update(patch)
    path = write_yaml(tmp_path / "map.yaml", data)
    spec = Spec.model_validate(SPEC)
    with pytest.raises(UserError) as exc:
        check_against_spec(load_map(path), spec, path)
    assert exc.value.field.startswith(field), str(exc.value)


def test_unity_conversion_turns_right_handed() -> None:
    # a +30 deg turn about Unity's up axis (clockwise seen from above) is a -30 deg ROS yaw
    uq = Rotation.from_rotvec([0, np.deg2rad(30), 0]).as_quat()
    xyz, q = unity_to_ros(np.array([1.0, 2.0, 3.0]), uq)
    assert np.allclose(xyz, [3.0, -1.0, 2.0])
    assert np.isclose(Rotation.from_quat(q).as_euler("ZYX")[0], np.deg2rad(-30))


# --------------------------------------------------------------------------- pairing


def test_direction_pairing_recovers_range_noise_over_seeds() -> None:
    """Binomial bound over seeds: the 95 % intervals from direction-paired, shuffled,
    rolling-shutter clouds contain the injected sigma, bias and dropout about 95 % of the time."""
    spec = Spec.model_validate(SPEC)
    s = spec.sensors["lidar"]
    ref = ReferenceBackend()
    ref.open(World.model_validate(WORLD), spec)
    traj = dense_trajectory()
    seeds, misses = 24, {"sigma": 0, "bias": 0, "dropout": 0}
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        errs, lost, finite = [], 0, 0
        for k in range(3):
            lt = ref.capture("lidar", T0 + k * 100_000_000 + seed * 1_000_000, traj)
            e = LIDAR["bias"] + LIDAR["sigma"] * rng.standard_normal(lt.ranges.shape)
            drop = rng.random(lt.ranges.shape) < LIDAR["point"]
            pts = (lt.points + e[..., None] * lt.directions)[~drop & np.isfinite(lt.ranges)]
            pts = pts[rng.permutation(len(pts))]
            st = PairStats("direction")
            grid = RayGrid.from_truth(lt.points, lt.directions, s.rings.elevations())
            cloud, _ = pair_by_direction(pts, np.zeros(len(pts)), grid, st)
            assert st.out_of_bin == 0 and st.duplicates == 0
            tf = np.isfinite(lt.ranges)
            pf = np.isfinite(cloud[..., 0])
            finite += int(tf.sum())
            lost += int((tf & ~pf).sum())
            both = tf & pf
            delta = cloud[both] - lt.points[both]
            errs.append(np.einsum("ij,ij->i", delta, lt.directions[both]))  # along the ray
        e = np.concatenate(errs)
        misses["sigma"] += not contains_ci(stats.std_ci(e), LIDAR["sigma"])
        misses["bias"] += not contains_ci(stats.mean_ci(e), LIDAR["bias"])
        misses["dropout"] += not contains_ci(stats.wilson(lost, finite), LIDAR["point"])
    bound = binom.ppf(0.999, seeds, 0.05)  # a correct 95 % interval misses more than this 0.1 %
    assert max(misses.values()) <= bound, misses


def contains_ci(est: stats.Estimate, value: float) -> bool:
    return est.ci[0] <= value <= est.ci[1]


def test_points_off_the_rays_are_counted_not_paired() -> None:
    spec = Spec.model_validate(SPEC)
    s = spec.sensors["lidar"]
    dirs = s.directions()
    grid = RayGrid(dirs, s.rings.elevations())
    on = 10.0 * dirs[2:4, 10:20].reshape(-1, 3)
    above = Rotation.from_euler("y", -np.deg2rad(20)).apply(10.0 * dirs[-1, :5])  # 20 deg higher
    pts = np.concatenate([on, above, [[np.nan, 0, 0]]])
    st = PairStats("direction")
    cloud, _ = pair_by_direction(pts, np.zeros(len(pts)), grid, st)
    assert (st.paired, st.out_of_bin, st.nonfinite) == (len(on), 5, 1)
    assert np.isfinite(cloud[2:4, 10:20, 0]).all() and np.isfinite(cloud[..., 0]).sum() == len(on)
    summary = st.summary(30 / 7, 2.0)
    assert summary["share_beyond_half_bin"] == pytest.approx(5 / (len(on) + 5))
    assert summary["residual_deg"]["max"] < 1e-6


# --------------------------------------------------------------------------- end to end


def test_own_layout_replay_reproduces_the_run(tmp_path: Path) -> None:
    """A `simconform run` bag replayed with the example own-layout map gives the same report."""
    spec = dict(SPEC)
    write_yaml(tmp_path / "spec.yaml", spec)
    world = write_yaml(tmp_path / "world.yaml", WORLD)
    traj = tmp_path / "traj.tum"
    dense = dense_trajectory()
    Trajectory(
        dense.times_ns[::10] - T0 + 200_000_000, dense.positions[::10], dense.rotations[::10]
    ).write_tum(traj)
    src = tmp_path / "src"
    run(
        RunConfig(world=world, spec=tmp_path / "spec.yaml", trajectory=traj, out=src, duration=2.0),
        progress=False,
    )
    original = verify_run(src, write=False)
    out = tmp_path / "replayed"
    res = replay(
        ReplayConfig(
            src / "bag", EXAMPLES / "own_layout.yaml", out, world=world, spec=tmp_path / "spec.yaml"
        )
    )
    assert res.truth == "topics" and res.complete
    again = verify_run(out, write=False)
    for sname, sensor in original["sensors"].items():
        for mname, m in sensor["metrics"].items():
            assert again["sensors"][sname]["metrics"][mname].get("measured") == m.get("measured"), (
                sname,
                mname,
            )
    manifest = json.loads((out / "run.json").read_text())
    assert manifest["backend"] == "replay" and manifest["complete"] is True
    assert manifest["replay"]["ground_truth"]["kind"] == "tf"
    assert (out / "gt" / "base_link.tum").is_file() and (out / "gt" / "lidar.tum").is_file()
    # its own files are recorded as a run's are: one changed afterwards is damage, not judged
    assert {"bag/metadata.yaml", "gt/lidar.tum"} <= set(manifest["outputs"])
    assert again["provenance"]["inputs"]["bag"]["files"].keys() >= {"bag/metadata.yaml"}
    with (out / "gt" / "lidar.tum").open("a") as fh:
        fh.write("# edited\n")
    integ = verify_run(out, write=False)["run"]["integrity"]
    assert integ["status"] == "damaged" and integ["outputs_changed"] == ["gt/lidar.tum"]
    # refused before anything is written: an offset that truth recorded in the bag would not
    # use (it was recorded as applied), and an --out holding the bag (--force deleted it)
    common = {"world": world, "spec": tmp_path / "spec.yaml"}
    own = EXAMPLES / "own_layout.yaml"
    for cfg, words in (
        (ReplayConfig(src / "bag", own, tmp_path / "o2", time_offsets=["2"], **common), "truth"),
        (ReplayConfig(src / "bag", own, src, force=True, **common), "does not hold the bag"),
    ):
        with pytest.raises(UserError, match=words):
            replay(cfg)
    assert not (tmp_path / "o2").exists()
    assert json.loads((src / "run.json").read_text())["backend"] == "reference"
    assert sorted(p.name for p in (src / "bag").iterdir())  # the source bag is still there


def test_unity_json_mcap_unorganized_world_frame(tmp_path: Path) -> None:
    sim = Sim(seed=11)
    bag = write_bag(
        tmp_path / "unity",
        "mcap",
        foreign_items(sim, Msgs(ROS2), "unorganized-world", "json"),
        ROS2,
    )
    manifest, report = run_replay(tmp_path, bag, make_map(tmp_path, "unorganized-world", "json"))
    check_recovered(report, manifest, sim)
    pairing = manifest["replay"]["sensors"]["lidar"]["pairing"]
    assert pairing["method"] == "direction" and pairing["share_beyond_half_bin"] < 1e-3
    assert pairing["residual_deg"]["p95"] < 0.1  # column bins are 2 deg
    assert (
        manifest["replay"]["truth"] == "recompute"
        and manifest["replay"]["ground_truth"]["kind"] == "json"
    )


def test_gazebo_tf_sqlite_organized_sensor_frame(tmp_path: Path) -> None:
    sim = Sim(seed=12)
    bag = write_bag(
        tmp_path / "gz", "sqlite3", foreign_items(sim, Msgs(ROS2), "organized-sensor", "tf"), ROS2
    )
    manifest, report = run_replay(tmp_path, bag, make_map(tmp_path, "organized-sensor", "tf"))
    check_recovered(report, manifest, sim)
    assert manifest["replay"]["source_format"] == "rosbag2 (sqlite3)"
    assert (
        manifest["replay"]["sensors"]["lidar"]["pairing"]["points_nonfinite"] > 0
    )  # inf = no return


@pytest.mark.parametrize("gt", ["odometry", "pose_stamped"])
def test_ros1_bag_unorganized_sensor_frame(tmp_path: Path, gt: str) -> None:
    sim = Sim(seed=13 if gt == "odometry" else 14)
    sensors = ("lidar", "imu", "gnss", "odom") if gt == "odometry" else ("lidar", "gnss")
    bag = write_bag(
        tmp_path / "robot.bag",
        "ros1",
        foreign_items(sim, Msgs(ROS1), "unorganized-sensor", gt, sensors),
        ROS1,
    )
    manifest, report = run_replay(
        tmp_path, bag, make_map(tmp_path, "unorganized-sensor", gt, sensors)
    )
    check_recovered(report, manifest, sim, sensors)
    assert manifest["replay"]["source_format"] == "rosbag1"


def test_cli_command_writes_reports_and_exit_code(tmp_path: Path) -> None:
    sim = Sim(seed=15)
    items = foreign_items(sim, Msgs(ROS2), "unorganized-sensor", "tf", ("lidar",))
    bag = write_bag(tmp_path / "b", "mcap", items, ROS2)
    mp = make_map(tmp_path, "unorganized-sensor", "tf", ("lidar",))
    args = ["replay", str(bag), "--map", str(mp), "--out", str(tmp_path / "o")]
    res = CliRunner().invoke(app, args)
    assert res.exit_code in (0, 1), res.output
    report = json.loads((tmp_path / "o" / "report" / "report.json").read_text())
    assert report["run"]["backend"] == "replay"
    assert res.exit_code == (0 if report["verdict"] in ("pass", "not_applicable") else 1)
    schema = json.loads((REPO / "docs" / "report.schema.json").read_text())
    jsonschema.validate(report, schema)  # a replay's report follows the documented schema too
    source = report["provenance"]["inputs"]["source_bag"]
    assert source["sha256"] == report["run"]["provenance"]["bag"]["sha256"]
    manifest = json.loads((tmp_path / "o" / "run.json").read_text())
    unmapped = manifest["replay"]["sensors_not_mapped"]
    assert unmapped  # the map has the lidar only: the report says the rest was not checked
    listed = {g["sensor"] for g in report["summary"]["not_checked"] if g["what"] == "every metric"}
    assert set(unmapped) <= listed
    assert (tmp_path / "o" / "report" / "report.md").is_file()
    again = CliRunner().invoke(app, args)  # an existing run is not replaced without --force
    assert isinstance(again.exception, UserError) and "--force" in str(again.exception)
    forced = CliRunner().invoke(app, [*args, "--force"])
    assert forced.exit_code in (0, 1)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".o.replay-")]
    # --json: stdout is the verdict alone, as `run --json`; -q: nothing but the exit code
    as_json = cli(*args, "--force", "--json")
    doc = json.loads(as_json.stdout)
    assert doc["verdict"] == report["verdict"] and doc["exit_code"] == as_json.returncode
    quiet = cli(*args, "--force", "-q")
    assert quiet.returncode == as_json.returncode and quiet.stdout == quiet.stderr == ""


# --------------------------------------------------------------------------- bad bags


@pytest.fixture(scope="module")
def small_bag(tmp_path_factory) -> tuple[Path, list]:
    """Items of a short lidar + IMU recording with tf ground truth (MCAP written per test)."""
    tmp = tmp_path_factory.mktemp("bad")
    sim = Sim(seed=21)
    items = foreign_items(sim, Msgs(ROS2), "unorganized-sensor", "tf", ("lidar", "imu"))
    mp = make_map(tmp, "unorganized-sensor", "tf", ("lidar", "imu"))
    return mp, items


def expect_user_error(tmp: Path, bag: Path, mp: Path, *words: str) -> UserError:
    out = tmp / "never"
    with pytest.raises(UserError) as exc:
        replay(ReplayConfig(bag=bag, map=mp, out=out))
    assert not out.exists() and not list(tmp.glob(".never.*"))
    text = str(exc.value)
    for w in words:
        assert w in text, text
    assert "\n" not in text
    return exc.value


def test_missing_topic(tmp_path: Path, small_bag) -> None:
    mp, items = small_bag
    bag = write_bag(tmp_path / "b", "mcap", [i for i in items if i[0] != "/sim/imu"], ROS2)
    expect_user_error(tmp_path, bag, mp, "/sim/imu", "sensor_msgs/msg/Imu", "expected the topic")


def test_wrong_type(tmp_path: Path, small_bag) -> None:
    mp, items = small_bag
    m = Msgs(ROS2)
    items = [i for i in items if i[0] != "/sim/imu"]
    items.append(("/sim/imu", "std_msgs/msg/String", T0, m.string("not an imu")))
    bag = write_bag(tmp_path / "b", "mcap", items, ROS2)
    expect_user_error(
        tmp_path, bag, mp, "/sim/imu", "std_msgs/msg/String", "expected sensor_msgs/msg/Imu"
    )


def test_missing_ground_truth_pair(tmp_path: Path, small_bag) -> None:
    mp, items = small_bag
    data = yaml.safe_load(mp.read_text())
    data["ground_truth"]["child"] = "base_footprint"
    mp2 = write_yaml(tmp_path / "map.yaml", data)
    shutil.copy(mp.parent / "spec.yaml", tmp_path / "spec.yaml")
    shutil.copy(mp.parent / "world.yaml", tmp_path / "world.yaml")
    bag = write_bag(tmp_path / "b", "mcap", items, ROS2)
    expect_user_error(tmp_path, bag, mp2, "/gt/tf", "world -> base_footprint")


@pytest.mark.parametrize("kind", ["garbage-bag", "garbage-mcap", "empty-dir"])
def test_corrupt_file(tmp_path: Path, small_bag, kind: str) -> None:
    mp, _items = small_bag
    if kind == "garbage-bag":
        bag = tmp_path / "x.bag"
        bag.write_bytes(b"this is not a bag" * 100)
    elif kind == "garbage-mcap":
        bag = tmp_path / "d"
        bag.mkdir()
        (bag / "d_0.mcap").write_bytes(np.random.default_rng(0).bytes(5000))
        (bag / "metadata.yaml").write_text("rosbag2_bagfile_information: {version: 9}\n")
    else:
        bag = tmp_path / "d"
        bag.mkdir()
    expect_user_error(tmp_path, bag, mp, "expected a rosbag2 folder")


def test_unsorted_stamps(tmp_path: Path, small_bag) -> None:
    mp, items = small_bag
    m = Msgs(ROS2)
    imu = [i for i in items if i[0] == "/sim/imu"]
    _, typ, log, _msg = imu[50]
    early = m.imu(T0 + 100_000_000, (0, 0, 9.8), (0, 0, 0))  # stamp 0.4 s before its neighbours
    items = [i for i in items if i is not imu[50]] + [("/sim/imu", typ, log, early)]
    bag = write_bag(tmp_path / "b", "mcap", items, ROS2)
    expect_user_error(tmp_path, bag, mp, "/sim/imu", "strictly increasing")


def test_cloud_without_xyz(tmp_path: Path, small_bag) -> None:
    mp, items = small_bag
    m = Msgs(ROS2)
    i = next(k for k, it in enumerate(items) if it[0] == "/sim/lidar")
    _, typ, log, _msg = items[i]
    bad = m.cloud(T0, "lidar", np.zeros((10, 3)), organized=False, layout="noxyz")
    items = [*items[:i], ("/sim/lidar", typ, log, bad), *items[i + 1 :]]
    bag = write_bag(tmp_path / "b", "mcap", items, ROS2)
    err = expect_user_error(tmp_path, bag, mp, "/sim/lidar", "x, y and z")
    assert "'a', 'b'" in str(err)


def test_organized_cloud_of_the_wrong_shape(tmp_path: Path, small_bag) -> None:
    mp, items = small_bag
    data = yaml.safe_load(mp.read_text())
    data["sensors"]["lidar"]["organized"] = True
    data["sensors"]["lidar"]["pairing"] = "direction"
    mp2 = write_yaml(mp.parent / "map-organized.yaml", data)
    bag = write_bag(tmp_path / "b", "mcap", items, ROS2)
    expect_user_error(tmp_path, bag, mp2, "/sim/lidar", "8 rings x 180 columns", "organized: false")


def cut(path: Path, share: float) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * share)])


@pytest.mark.parametrize("fmt", ["mcap", "sqlite3", "ros1"])
def test_truncated_bag_is_verified_up_to_the_last_message(
    tmp_path: Path, small_bag, fmt: str
) -> None:
    mp, items = small_bag
    store = ROS1 if fmt == "ros1" else ROS2
    if fmt == "ros1":
        sim = Sim(seed=21)
        items = foreign_items(sim, Msgs(ROS1), "unorganized-sensor", "tf", ("lidar", "imu"))
    bag = write_bag(tmp_path / ("b.bag" if fmt == "ros1" else "b"), fmt, items, store)
    whole = SourceBag(bag)
    total = sum(1 for _ in whole.messages({"/sim/lidar", "/sim/imu", "/gt/tf"}))
    whole.close()
    data_file = (
        bag if fmt == "ros1" else next(p for p in bag.iterdir() if p.suffix in (".mcap", ".db3"))
    )
    cut(data_file, 0.7)
    out = tmp_path / "out"
    res = replay(ReplayConfig(bag=bag, map=mp, out=out))
    manifest = json.loads((out / "run.json").read_text())
    assert res.complete is False and manifest["complete"] is False
    assert "truncated" in manifest["incomplete_reason"]
    sec = manifest["replay"]
    assert sec["read_with"] == "salvage scan" and sec["source_complete"] is False
    assert 0.4 * total < sec["messages_read"] < total
    report = verify_run(out, write=False)
    assert report["run"]["complete"] is False
    assert report["sensors"]["lidar"]["captures"] > 5
    lm = report["sensors"]["lidar"]["metrics"]
    assert contains(lm["range_std"], LIDAR["sigma"]) and contains(lm["range_bias"], LIDAR["bias"])


def test_replay_bad_map_through_the_real_entry_point(tmp_path: Path) -> None:
    from conftest import cli

    bad = tmp_path / "map.yaml"
    bad.write_text("sensors: {lidar: {topic: /points, colour: red}}\n")
    res = cli("replay", str(tmp_path / "nope"), "--map", str(bad), "--out", str(tmp_path / "o"))
    assert res.returncode == 2 and res.stderr.startswith("simconform: error:")
    assert "Traceback" not in res.stderr and not (tmp_path / "o").exists()


def test_truth_lost_in_a_damaged_chunk_is_named_as_damage(tmp_path: Path) -> None:
    """A published cloud whose truth was in a chunk skipped for its CRC was refused as "expected
    a truth message ... logged before it", with no word of the damage."""
    from mcap.reader import make_reader

    src = run(
        RunConfig(out=tmp_path / "src", duration=2.0, spec=REPO / "sensors_spec/rover_core.yaml"),
        progress=False,
    ).out
    bag = next((src / "bag").glob("*.mcap"))
    with bag.open("rb") as fh:
        summary = make_reader(fh).get_summary()
    assert summary is not None
    truth = {i for i, c in summary.channels.items() if c.topic == "/truth/lidar/points"}
    chunks = [c for c in summary.chunk_indexes if truth & set(c.message_index_offsets)]
    data = bag.read_bytes()
    found = []
    for k, chunk in enumerate(chunks):  # damage each truth-holding chunk in turn
        at = chunk.chunk_start_offset + chunk.chunk_length // 2
        bag.write_bytes(data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1 :])
        core = REPO / "sensors_spec/rover_core.yaml"
        cfg = ReplayConfig(src / "bag", EXAMPLES / "own_layout.yaml", tmp_path / f"o{k}", spec=core)
        try:
            replay(cfg)
        except UserError as exc:
            found.append(str(exc))
            assert not cfg.out.exists()
    bag.write_bytes(data)
    # a chunk whose truth clouds are published from the next chunk: the damage is named
    assert any("damaged chunk(s) that were skipped" in m and "CRC" in m for m in found), found
