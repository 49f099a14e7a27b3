"""Sensor specs (sensors_spec/*.yaml): geometry, rate, mount, error model and tolerances.

One file describes a vehicle's whole sensor set. Every field is validated and unknown keys are
rejected, so a typo never silently falls back to a default.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import numpy as np
from pydantic import Field, PrivateAttr, model_validator

from simconform.errors import FieldProblem, load_yaml, validate
from simconform.fields import (
    MAX_NOISE,
    RESERVED_TOPICS,
    TRAJECTORY_FRAMES,
    FrameId,
    MountXyz,
    Name,
    NonNeg,
    Prob,
    Rate,
    Rpy,
    Signed,
    Strict,
    Topic,
)


class Mount(Strict):
    """Sensor frame in base_link: xyz (m) and roll pitch yaw (rad, fixed axes, as URDF)."""

    xyz: MountXyz = (0.0, 0.0, 0.0)
    rpy: Rpy = (0.0, 0.0, 0.0)


class ScalarNoise(Strict):
    bias: Signed = 0.0
    sigma: NonNeg = 0.0


class AxisNoise(Strict):
    """Per-axis noise: bias, white Gaussian sigma and (IMU) bias random walk per sqrt(s)."""

    bias: tuple[Signed, Signed, Signed] = (0.0, 0.0, 0.0)
    sigma: tuple[NonNeg, NonNeg, NonNeg] = (0.0, 0.0, 0.0)
    bias_walk: tuple[NonNeg, NonNeg, NonNeg] = (0.0, 0.0, 0.0)


class Dropout(Strict):
    sample: Prob = 0.0  # whole sample not published (its truth is still recorded)
    point: Prob = 0.0  # lidar only: per-point return lost (NaN in the organized cloud)


class Latency(Strict):
    """Publish time = capture time + fixed + jitter, jitter ~ N(0, sigma) truncated to +-k sigma."""

    fixed_ms: Annotated[float, Field(ge=0, le=60000)] = 0.0
    jitter_ms: Annotated[float, Field(ge=0, le=10000)] = 0.0
    jitter_truncation: Annotated[float, Field(gt=0, le=10)] = 3.0

    @model_validator(mode="after")
    def _causal(self) -> Latency:
        if self.jitter_ms * self.jitter_truncation > self.fixed_ms:
            raise ValueError(
                f"jitter_ms * jitter_truncation ({self.jitter_ms * self.jitter_truncation:g}) must "
                f"not exceed fixed_ms ({self.fixed_ms:g}): a sample cannot be published before it "
                "is captured"
            )
        return self


class Tolerances(Strict):
    """Acceptance bands. Defaults follow the issue: sigma 10 %, dropout 2 points, latency
    20 % or 1 ms (the larger), rate 2 %; bias within 10 % of sigma (or `bias_abs`)."""

    sigma_rel: Annotated[float, Field(gt=0, le=10)] = 0.10
    bias_abs: NonNeg | None = None
    bias_sigma_rel: Annotated[float, Field(gt=0, le=10)] = 0.10
    dropout_abs: Annotated[float, Field(gt=0, le=1)] = 0.02
    latency_rel: Annotated[float, Field(gt=0, le=10)] = 0.20
    latency_abs_ms: Annotated[float, Field(gt=0, le=60000)] = 1.0
    rate_rel: Annotated[float, Field(gt=0, le=1)] = 0.02
    walk_rel: Annotated[float, Field(gt=0, le=10)] = 0.25


class _Sensor(Strict):
    rate_hz: Rate
    topic: Topic | None = None
    frame_id: FrameId | None = None
    mount: Mount = Mount()
    dropout: Dropout = Dropout()
    latency: Latency = Latency()
    tolerances: Tolerances = Tolerances()


class Rings(Strict):
    """Vertical beam layout: explicit angles, or count evenly spread over fov_deg."""

    angles_deg: list[Annotated[float, Field(ge=-90, le=90)]] | None = None
    count: Annotated[int, Field(ge=1, le=512)] | None = None
    fov_deg: tuple[
        Annotated[float, Field(ge=-90, le=90)], Annotated[float, Field(ge=-90, le=90)]
    ] = (-15.0, 15.0)

    @model_validator(mode="after")
    def _one_form(self) -> Rings:
        if (self.angles_deg is None) == (self.count is None):
            raise ValueError("give either angles_deg or count (with fov_deg), not both or neither")
        if self.angles_deg is not None and len(self.angles_deg) == 0:
            raise ValueError("angles_deg must list at least one angle")
        lo, hi = self.fov_deg
        if self.count is not None and (lo > hi or (self.count > 1 and lo == hi)):
            raise ValueError(
                "fov_deg must be [lower, upper] with lower < upper (lower <= upper for one ring)"
            )
        return self

    def elevations(self) -> np.ndarray:
        """Ring elevations in rad, ring 0 the lowest beam (Velodyne ring numbering)."""
        if self.angles_deg is not None:
            return np.sort(np.deg2rad(np.asarray(self.angles_deg, dtype=float)))
        if self.count == 1:
            return np.deg2rad(np.array([0.5 * (self.fov_deg[0] + self.fov_deg[1])]))
        return np.deg2rad(np.linspace(self.fov_deg[0], self.fov_deg[1], self.count))


class RangeLimits(Strict):
    min: Annotated[float, Field(ge=0, le=1e4)] = 0.3
    max: Annotated[float, Field(gt=0, le=1e4)] = 100.0

    @model_validator(mode="after")
    def _ordered(self) -> RangeLimits:
        if not self.min < self.max:
            raise ValueError(f"min ({self.min:g}) must be below max ({self.max:g})")
        return self


class LidarNoise(Strict):
    range: ScalarNoise = ScalarNoise()


class LidarSpec(_Sensor):
    """Rotating 3D lidar. Column c looks at azimuth 2*pi*c/columns (counter-clockwise from x)
    and, with a rolling shutter, is captured at c / (columns * rate_hz) after sweep start."""

    type: Literal["lidar"]
    rings: Rings
    columns: Annotated[int, Field(ge=1, le=100000)]
    range: RangeLimits = RangeLimits()
    shutter: Literal["global", "rolling"] = "rolling"
    # how the published cloud carries each point's time, as a driver writes it (bag/cloud.py):
    # velodyne `time` float32 s, ouster `t` uint32 ns (both after header.stamp), hesai
    # `timestamp` float64 s and livox `timestamp` float64 ns (absolute), or deskewed (points
    # motion-compensated to header.stamp, no time field)
    point_time: Literal["velodyne", "ouster", "hesai", "livox", "deskewed"] = "velodyne"
    header_stamp: Literal["start", "end"] = "start"  # header.stamp: first or last column's time
    noise: LidarNoise = LidarNoise()

    @model_validator(mode="after")
    def _unsigned_offsets(self) -> LidarSpec:
        if self.point_time == "ouster" and self.header_stamp == "end":
            raise FieldProblem(
                "header_stamp",
                "end",
                "expected start with point_time ouster: its t is an unsigned offset after "
                "header.stamp, so the stamp must be the sweep's first column",
            )
        return self

    def column_offsets_s(self) -> np.ndarray:
        """Each column's time after the sweep start (the capture time)."""
        if self.shutter == "global":
            return np.zeros(self.columns)
        return np.arange(self.columns) / (self.columns * self.rate_hz)

    def stamp_offset_ns(self) -> int:
        """header.stamp minus the capture (sweep start) time: 0, or the last column's time."""
        if self.header_stamp == "start":
            return 0
        return round(float(self.column_offsets_s()[-1]) * 1e9)

    def directions(self) -> np.ndarray:
        """Unit ray directions (rings, columns, 3) in the sensor frame."""
        el = self.rings.elevations()[:, None]
        az = (2 * np.pi * np.arange(self.columns) / self.columns)[None, :]
        ce = np.cos(el)
        return np.stack(np.broadcast_arrays(ce * np.cos(az), ce * np.sin(az), np.sin(el)), axis=-1)


class ImuNoise(Strict):
    accel: AxisNoise = AxisNoise()  # m/s^2, walk in m/s^2/sqrt(s)
    gyro: AxisNoise = AxisNoise()  # rad/s, walk in rad/s/sqrt(s)


class ImuSpec(_Sensor):
    type: Literal["imu"]
    gravity: Annotated[float, Field(ge=0, le=30)] = 9.80665
    noise: ImuNoise = ImuNoise()


class GnssNoise(Strict):
    position: AxisNoise = AxisNoise()  # per ENU axis, m


class GnssSpec(_Sensor):
    type: Literal["gnss"]
    noise: GnssNoise = GnssNoise()


class OdomNoise(Strict):
    """Noise on each capture-to-capture increment, in the previous base_link frame:
    (dx m, dy m, dyaw rad)."""

    increment: AxisNoise = AxisNoise()


class OdomSpec(_Sensor):
    type: Literal["odom"]
    noise: OdomNoise = OdomNoise()


class Intrinsics(Strict):
    """Pinhole intrinsics in pixels, ROS CameraInfo convention (pixel centres at integers)."""

    fx: Annotated[float, Field(gt=0, le=MAX_NOISE)]
    fy: Annotated[float, Field(gt=0, le=MAX_NOISE)]
    cx: Signed
    cy: Signed


class CameraNoise(Strict):
    intensity: ScalarNoise = ScalarNoise()  # per pixel and channel, in 8-bit intensity levels


class CameraSpec(_Sensor):
    """Pinhole camera. Rays are cast in the optical frame (z forward, x right, y down; REP 103
    `_optical` suffix); the mount gives the camera body frame (x forward, z up). With a rolling
    shutter, row r is exposed at r / height * readout_ms after the frame's capture time."""

    type: Literal["camera"]
    width: Annotated[int, Field(ge=1, le=8192)]
    height: Annotated[int, Field(ge=1, le=8192)]
    hfov_deg: Annotated[float, Field(gt=0, lt=180)] | None = None
    intrinsics: Intrinsics | None = None
    shutter: Literal["global", "rolling"] = "global"
    readout_ms: Annotated[float, Field(gt=0, le=1000)] = 20.0
    encoding: Literal["jpeg", "raw"] = "jpeg"
    jpeg_quality: Annotated[int, Field(ge=1, le=100)] = 90
    jpeg_subsampling: Literal["4:4:4", "4:2:2", "4:2:0"] = "4:2:0"
    depth: bool = True
    noise: CameraNoise = CameraNoise()

    @model_validator(mode="after")
    def _one_intrinsics(self) -> CameraSpec:
        if (self.hfov_deg is None) == (self.intrinsics is None):
            raise ValueError(
                "give either hfov_deg or intrinsics (fx fy cx cy), not both or neither"
            )
        if self.intrinsics is not None:  # a ray's direction (u - cx) / fx must stay finite
            i = self.intrinsics
            far = max(abs(i.cx), abs(self.width - 1 - i.cx), abs(i.cy), abs(self.height - 1 - i.cy))
            if far > 1e12 * min(i.fx, i.fy):
                raise ValueError(
                    f"intrinsics fx {i.fx:g}, fy {i.fy:g}: the farthest pixel lies {far:g} px "
                    "from (cx, cy); expected fx and fy at least 1e-12 of that (rays within "
                    "90 degrees of the optical axis)"
                )
        return self

    def k(self) -> tuple[float, float, float, float]:
        """(fx, fy, cx, cy); from hfov the outer pixel edges lie exactly on the FOV."""
        if self.intrinsics is not None:
            i = self.intrinsics
            return i.fx, i.fy, i.cx, i.cy
        fx = 0.5 * self.width / np.tan(np.deg2rad(self.hfov_deg) / 2)
        return fx, fx, (self.width - 1) / 2, (self.height - 1) / 2

    def rays_optical(self) -> np.ndarray:
        """Unit rays (height, width, 3) through the pixel centres, optical frame."""
        fx, fy, cx, cy = self.k()
        u = (np.arange(self.width) - cx) / fx
        v = (np.arange(self.height) - cy) / fy
        d = np.stack(np.broadcast_arrays(u[None, :], v[:, None], np.ones((1, 1))), axis=-1)
        return d / np.linalg.norm(d, axis=-1, keepdims=True)

    def row_offsets_s(self) -> np.ndarray:
        if self.shutter == "global":
            return np.zeros(self.height)
        return np.arange(self.height) / self.height * self.readout_ms * 1e-3


# optical frame (z forward, x right, y down) -> body frame (x forward, y left, z up)
OPTICAL_TO_BODY = np.array([[0.0, 0.0, 1.0], [-1.0, 0.0, 0.0], [0.0, -1.0, 0.0]])

SensorSpec = Annotated[
    LidarSpec | ImuSpec | GnssSpec | OdomSpec | CameraSpec, Field(discriminator="type")
]

DEFAULT_TOPICS = {
    "lidar": "/lidar/points",
    "imu": "/imu",
    "gnss": "/gps/fix",
    "odom": "/odom",
    "camera": "/camera",
}


class Localization(Strict):
    """What localization on this sensor model's lidar must achieve (`simconform localize`):
    APE RMSE in m (origin-aligned), and optionally KITTI-style RPE in % of distance."""

    ape_rmse_m: Annotated[float, Field(gt=0, le=1e4)]
    rpe_trans_pct: Annotated[float, Field(gt=0, le=100)] | None = None


class Spec(Strict):
    name: Name
    base_frame: FrameId = "base_link"
    localization: Localization | None = None
    sensors: dict[Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_]*$")], SensorSpec] = Field(
        min_length=1
    )

    _source: Path | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _unique_topics(self) -> Spec:
        """Every topic the bag will hold is written by one sensor only, and none is the bag's
        own (/tf, /clock, ...) or a truth topic."""
        seen: dict[str, str] = {}
        for name in self.sensors:
            topic, field = self.topic(name), f"sensors.{name}.topic"
            if topic == "/truth" or topic.startswith("/truth/"):
                raise FieldProblem(
                    field, topic, "expected a topic outside /truth/, which holds truth"
                )
            for t in self.all_topics(name):
                if t in RESERVED_TOPICS:
                    raise FieldProblem(field, topic, f"writes {t}, one of the bag's own topics")
                if t in seen:
                    raise FieldProblem(
                        field, topic, f"writes {t}, which sensor {seen[t]} writes too"
                    )
                seen[t] = name
        return self

    @model_validator(mode="after")
    def _tree(self) -> Spec:
        """The tf tree map -> odom -> base_frame -> one frame per sensor has no loop."""
        if self.base_frame in TRAJECTORY_FRAMES:
            raise FieldProblem(
                "base_frame", self.base_frame, "expected a frame other than map and odom"
            )
        seen: dict[str, str] = {}
        for name, s in self.sensors.items():
            frames = [self.frame(name)]
            if isinstance(s, CameraSpec):
                frames.append(f"{name}_optical_frame")
            for f in frames:
                field = f"sensors.{name}.frame_id"
                if f == self.base_frame or f in TRAJECTORY_FRAMES:
                    raise FieldProblem(
                        field,
                        f,
                        "expected a frame of its own, not map, odom or the base_frame "
                        f"({self.base_frame})",
                    )
                if f.startswith("truth/"):  # truth/<base_frame> is the truth pose's frame
                    raise FieldProblem(
                        field, f, "expected a frame outside truth/, which holds truth"
                    )
                if f in seen:
                    raise FieldProblem(field, f, f"expected a frame of its own; {seen[f]} uses it")
                seen[f] = name
        return self

    def all_topics(self, name: str) -> list[str]:
        """Every topic sensor `name` writes: published and truth data (and camera extras)."""
        pub, truth = self.data_topics(name)
        out = [pub, truth]
        if isinstance(self.sensors[name], CameraSpec):
            base = self.topic(name)
            out += [f"{base}/camera_info", f"/truth{base}/depth"]
        return out

    @property
    def source(self) -> Path | None:
        return self._source

    def topic(self, name: str) -> str:
        s = self.sensors[name]
        return s.topic or DEFAULT_TOPICS[s.type]

    def frame(self, name: str) -> str:
        return self.sensors[name].frame_id or f"{name}_link"

    def data_topics(self, name: str) -> tuple[str, str]:
        """(published topic, truth topic) whose messages pair by header.stamp."""
        s, base = self.sensors[name], self.topic(name)
        if isinstance(s, CameraSpec):
            pub = f"{base}/image/compressed" if s.encoding == "jpeg" else f"{base}/image"
            return pub, f"/truth{base}/image"
        return base, "/truth" + base


def load_spec(path: str | Path) -> Spec:
    path = Path(path)
    spec: Spec = validate(Spec, load_yaml(path), path)
    spec._source = path.resolve()
    return spec
