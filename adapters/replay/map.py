"""Topic maps for `simconform replay` (MAP.yaml): which topic of a foreign bag is which sensor.

A bag recorded from another simulator or a real robot uses its own topic names, message
layouts and ground-truth format. The map says, for each sensor of the spec, where its messages
are and how to read them, and where the ground-truth pose of the vehicle is. Every field is
validated and unknown keys are rejected (a typo never silently falls back to a default).
See docs/replay.md for the format with examples.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Field, PrivateAttr, field_validator
from rosbags.typesys.msg import normalize_msgtype

from simconform.errors import UserError, load_yaml, validate
from simconform.fields import Strict
from simconform.registry import CONVENTIONS
from simconform.spec import GnssSpec, ImuSpec, LidarSpec, Mount, OdomSpec, Spec

Topic = Annotated[str, Field(pattern=r"^/[A-Za-z0-9_~{}/.-]*[A-Za-z0-9_}]$")]

SENSOR_TYPES = {
    LidarSpec: "sensor_msgs/msg/PointCloud2",
    ImuSpec: "sensor_msgs/msg/Imu",
    GnssSpec: "sensor_msgs/msg/NavSatFix",
    OdomSpec: "nav_msgs/msg/Odometry",
}
POSE_TYPES = {
    "tf": "tf2_msgs/msg/TFMessage",
    "odometry": "nav_msgs/msg/Odometry",
    "pose_stamped": "geometry_msgs/msg/PoseStamped",
    "json": "std_msgs/msg/String",
}
_LIDAR_ONLY = (
    "points_frame",
    "organized",
    "pairing",
    "point_time",
    "time_unit",
    "time_reference",
    "deskewed",
)
_STAMP_SCALE = {"s": 1e9, "ms": 1e6, "us": 1e3, "ns": 1.0}


def normalize_type(name: str) -> str:
    """'sensor_msgs/PointCloud2' (ROS 1 spelling) and 'sensor_msgs/msg/PointCloud2' are one."""
    return normalize_msgtype(name.strip())


class SensorTopic(Strict):
    """Where one sensor's published messages are in the source bag, and their layout."""

    topic: Topic
    type: str | None = None  # expected message type; default: the one of the spec sensor's type
    frame: str | None = None  # expected header.frame_id; None: not checked
    points_frame: Literal["sensor", "world"] = "sensor"  # lidar: points in sensor or map frame
    organized: bool = True  # lidar: height x width = rings x columns, NaN/inf where no return
    pairing: Literal["index", "direction"] | None = None  # lidar; default index if organized
    # lidar: each point's time (adapters/replay/pointtime.py): auto (time, t, timestamp,
    # offset_time), none (the spec's column schedule), or the field's name
    point_time: Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")] = "auto"
    time_unit: Literal["auto", "s", "ms", "us", "ns"] = "auto"
    time_reference: Literal["auto", "stamp", "absolute"] = "auto"
    deskewed: bool = False  # lidar: points motion-compensated to header.stamp

    @field_validator("type")
    @classmethod
    def _norm(cls, v: str | None) -> str | None:
        return None if v is None else normalize_type(v)

    def pair_by(self) -> str:
        return self.pairing or ("index" if self.organized else "direction")


class _PoseSource(Strict):
    topic: Topic
    base_in_body: Mount = Mount()  # base_link in the pose stream's body frame (xyz, rpy)


class TfPose(_PoseSource):
    """tf2_msgs/TFMessage transforms from `parent` to `child` (Gazebo's pose bridge, /tf)."""

    kind: Literal["tf"]
    topic: Topic = "/tf"
    parent: str
    child: str


class OdometryPose(_PoseSource):
    """nav_msgs/Odometry pose.pose, e.g. a simulator's ground-truth odometry plugin."""

    kind: Literal["odometry"]


class PoseStampedPose(_PoseSource):
    """geometry_msgs/PoseStamped pose."""

    kind: Literal["pose_stamped"]


class JsonEgo(Strict):
    """How to find the ego pose in a JSON document on a std_msgs/String topic.

    `list_key` is a dotted path to a list of entries (omit it when the document itself is the
    ego); the ego entry is the one whose keys equal every value in `match`. `pose_key` is an
    optional dotted path inside the entry to the object that holds the pose keys.
    """

    list_key: str | None = None
    match: dict[str, str | int | float | bool] = Field(default_factory=dict)
    pose_key: str | None = None
    position: tuple[str, str, str] = ("tx", "ty", "tz")
    orientation: tuple[str, str, str, str] = ("qw", "qx", "qy", "qz")  # keys of w, x, y, z
    stamp_key: str | None = None  # dotted path to the time in the document; None: log time
    stamp_unit: Literal["s", "ms", "us", "ns"] = "s"
    convention: str = "ros"  # a name in simconform.registry.CONVENTIONS

    @field_validator("convention")
    @classmethod
    def _known(cls, v: str) -> str:
        if v not in CONVENTIONS:
            raise ValueError(f"expected one of {', '.join(sorted(CONVENTIONS))}")
        return v

    def extract(self, text: str) -> tuple[np.ndarray, np.ndarray, int | None] | None:
        """(xyz, quaternion x y z w, stamp ns or None) in ROS axes, None for a document about
        another agent (no list_key, `match` unmet); ValueError says what is wrong."""
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not JSON ({exc.msg} at char {exc.pos})") from None
        entry = doc
        if self.list_key is not None:
            items = _dig(doc, self.list_key)
            if not isinstance(items, list):
                raise ValueError(f"'{self.list_key}' is not a list")
            found = [e for e in items if isinstance(e, dict) and _matches(e, self.match)]
            if len(found) != 1:
                raise ValueError(
                    f"{len(found)} entries of '{self.list_key}' match {self.match}; expected 1"
                )
            entry = found[0]
        elif self.match and not (isinstance(doc, dict) and _matches(doc, self.match)):
            return None
        if self.pose_key is not None:
            entry = _dig(entry, self.pose_key)
        xyz = np.array([_number(entry, k) for k in self.position])
        w, x, y, z = (_number(entry, k) for k in self.orientation)
        quat = np.array([x, y, z, w])
        xyz, quat = CONVENTIONS.load(self.convention)(xyz, quat)
        stamp = None
        if self.stamp_key is not None:
            t = _dig(doc, self.stamp_key)
            if isinstance(t, bool) or not isinstance(t, int | float):
                raise ValueError(f"'{self.stamp_key}' is {t!r}; expected a number")
            stamp = round(t * _STAMP_SCALE[self.stamp_unit])
        return xyz, quat, stamp


def ros_axes(xyz: np.ndarray, quat_xyzw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ROS axes (x forward, y left, z up) already: unchanged."""
    return xyz, quat_xyzw


def unity_to_ros(xyz: np.ndarray, quat_xyzw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Unity (x right, y up, z forward, left-handed) to ROS (x forward, y left, z up).

    A position maps as (z, -x, y); a rotation keeps its axis mapped the same way and flips its
    sense (left- to right-handed), which is the quaternion (z, -x, y, -w).
    """
    x, y, z = xyz
    qx, qy, qz, qw = quat_xyzw
    return np.array([z, -x, y]), np.array([qz, -qx, qy, -qw])


def _dig(obj: Any, path: str) -> Any:
    for part in path.split("."):
        if isinstance(obj, dict) and part in obj:
            obj = obj[part]
        elif isinstance(obj, list) and part.isdigit() and int(part) < len(obj):
            obj = obj[int(part)]
        else:
            raise ValueError(f"no key '{part}' (of '{path}')")
    return obj


def _matches(entry: dict, match: dict) -> bool:
    return all(k in entry and entry[k] == v for k, v in match.items())


def _number(entry: Any, key: str) -> float:
    value = _dig(entry, key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"'{key}' is {value!r}; expected a number")
    return float(value)


class JsonPose(_PoseSource):
    """A JSON std_msgs/String (one Unity-based recorder publishes /ground_truth/agents)."""

    kind: Literal["json"]
    json_ego: JsonEgo


PoseSource = Annotated[
    TfPose | OdometryPose | PoseStampedPose | JsonPose, Field(discriminator="kind")
]


class ReplayMap(Strict):
    """The whole map: spec and world (relative to the map file), truth source, topics."""

    spec: str | None = None
    world: str | None = None
    truth: Literal["auto", "topics", "recompute"] = "auto"
    sensors: dict[str, SensorTopic] = Field(min_length=1)
    ground_truth: PoseSource | None = None

    _source: Path | None = PrivateAttr(default=None)

    @property
    def source(self) -> Path | None:
        return self._source

    def path_of(self, key: str) -> Path | None:
        """spec/world path resolved against the map's folder."""
        value = getattr(self, key)
        if value is None:
            return None
        p = Path(value)
        base = self._source.parent if self._source is not None else Path.cwd()
        return p if p.is_absolute() else base / p


def load_map(path: str | Path) -> ReplayMap:
    path = Path(path)
    m: ReplayMap = validate(ReplayMap, load_yaml(path), path)
    m._source = path.resolve()
    return m


def expected_type(sensor: object) -> str | None:
    return SENSOR_TYPES.get(type(sensor))


def check_against_spec(m: ReplayMap, spec: Spec, file: str | Path) -> dict[str, str]:
    """Raise a UserError for a map that does not fit the spec; return sensor -> message type."""
    types = {}
    for name, entry in m.sensors.items():
        where = f"sensors.{name}"
        if name not in spec.sensors:
            raise UserError(
                file, where, name, f"expected a sensor of the spec ({', '.join(spec.sensors)})"
            )
        s = spec.sensors[name]
        want = expected_type(s)
        if want is None:
            raise UserError(
                file, where, s.type, "replay supports lidar, imu, gnss and odom sensors"
            )
        if entry.type is not None and entry.type != want:
            raise UserError(
                file, f"{where}.type", entry.type, f"a {s.type} sensor publishes {want}"
            )
        if not isinstance(s, LidarSpec):
            extra = sorted(set(_LIDAR_ONLY) & entry.model_fields_set)
            if extra:
                raise UserError(
                    file,
                    f"{where}.{extra[0]}",
                    getattr(entry, extra[0]),
                    "only lidar sensors take this key",
                )
        elif entry.pair_by() == "index" and not entry.organized:
            raise UserError(
                file,
                f"{where}.pairing",
                "index",
                "an unorganized cloud can only be paired by direction",
            )
        types[name] = want
    topics = [e.topic for e in m.sensors.values()]
    dup = sorted({t for t in topics if topics.count(t) > 1})
    if dup:
        raise UserError(file, "sensors", dup[0], "expected each topic for one sensor only")
    if m.truth == "recompute" and m.ground_truth is None:
        raise UserError(
            file,
            "ground_truth",
            None,
            "truth: recompute needs a ground-truth pose stream (ground_truth)",
        )
    world_points = [n for n, e in m.sensors.items() if e.points_frame == "world"]
    if world_points and m.ground_truth is None:
        raise UserError(
            file,
            f"sensors.{world_points[0]}.points_frame",
            "world",
            "points in the world frame need a ground-truth pose stream "
            "(ground_truth) to move them into the sensor frame",
        )
    return types
