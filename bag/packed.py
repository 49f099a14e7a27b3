"""The light sensors' messages (Imu, NavSatFix, Odometry, TFMessage) serialized with one
struct call each.

The run's process writes every light sample as it is recorded: on the demo 40,000 Imu,
8,000 Odometry, 4,000 NavSatFix and 14,000 TFMessage. rosbags builds each as message objects
and serializes them through its generic code for the type: 20-25 us a message. Their layouts
are fixed once the frame ids are (one per sensor), so each is one `struct.Struct`: 2-4 us.
bag/messages.py keeps the message definitions, and tests/test_packed.py checks every byte of
these against rosbags' serialization of the messages bag/messages.py builds.
"""

from __future__ import annotations

import struct

import numpy as np

from simconform.adapters.base import GnssTruth, ImuTruth, OdomTruth
from simconform.angles import se2_increment
from simconform.bag.geodetic import EnuToGeodetic
from simconform.bag.messages import diagonal_covariance, yaw_quat
from simconform.spec import GnssSpec, ImuSpec, OdomSpec

_CDR_LE = b"\x00\x01\x00\x00"  # encapsulation: plain CDR, little-endian


def _layout(parts: list) -> struct.Struct:
    """A message's CDR (after the encapsulation header) as a struct, the fields aligned to
    their size from the payload's start as CDR aligns them. A part is (code, count) or a
    frame id (bytes: its u32 length with the NUL, then its bytes and the NUL)."""
    fmt, at = ["<4s"], 0
    for p in parts:
        code, n = ("I", 1) if isinstance(p, bytes) else p
        size = struct.calcsize("<" + code)
        pad = -at % size
        fmt.append(f"{pad}x{n}{code}" if pad else f"{n}{code}")
        at += pad + size * n
        if isinstance(p, bytes):
            fmt.append(f"{len(p) + 1}s")
            at += len(p) + 1
    return struct.Struct("".join(fmt))


def _floats(v) -> list:
    """A vector's values as Python numbers: an array's tolist (3x faster than converting its
    elements one by one), any other sequence element by element."""
    return v.tolist() if isinstance(v, np.ndarray) else [float(x) for x in v]


def _stamp(stamp_ns: int) -> tuple[int, int]:
    return divmod(int(stamp_ns), 1_000_000_000)


def _header(frame: bytes) -> list:
    return [("i", 1), ("I", 1), frame]


class ImuPacker:
    """sensor_msgs/Imu of one sensor (bag/messages.py `imu`)."""

    _NO_ORIENTATION = (0.0, 0.0, 0.0, 1.0, -1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)

    def __init__(self, frame_id: str, accel_cov: np.ndarray, gyro_cov: np.ndarray) -> None:
        self.frame = frame_id.encode()
        self.st = _layout([*_header(self.frame), ("d", 37)])
        self.acov, self.gcov = tuple(accel_cov.tolist()), tuple(gyro_cov.tolist())

    def pack(self, s: ImuTruth, stamp_ns: int, with_orientation: bool) -> bytes:
        q = (*_floats(s.orientation), *(0.0,) * 9) if with_orientation else self._NO_ORIENTATION
        return self.st.pack(
            _CDR_LE, *_stamp(stamp_ns), len(self.frame) + 1, self.frame, *q,
            *_floats(s.gyro), *self.gcov, *_floats(s.accel), *self.acov,
        )  # fmt: skip


class NavSatPacker:
    """sensor_msgs/NavSatFix of one sensor (bag/messages.py `navsat`): status FIX, service
    GPS, covariance type DIAGONAL_KNOWN."""

    def __init__(self, frame_id: str, position_cov: np.ndarray) -> None:
        self.frame = frame_id.encode()
        self.st = _layout([*_header(self.frame), ("b", 1), ("H", 1), ("d", 12), ("B", 1)])
        self.cov = tuple(position_cov.tolist())

    def pack(self, lla, stamp_ns: int) -> bytes:
        return self.st.pack(
            _CDR_LE, *_stamp(stamp_ns), len(self.frame) + 1, self.frame, 0, 1,
            *(float(v) for v in lla), *self.cov, 2,
        )  # fmt: skip


class OdometryPacker:
    """nav_msgs/Odometry of one sensor (bag/messages.py `odometry`)."""

    def __init__(self, frame_id: str, child: str, var) -> None:
        """`var`: the (x, y, yaw) variances of the pose covariance, the same for every sample."""
        self.frame, self.child = frame_id.encode(), child.encode()
        self.st = _layout([*_header(self.frame), self.child, ("d", 85)])
        cov = [0.0] * 36
        cov[0], cov[7], cov[35] = float(var[0]), float(var[1]), float(var[2])
        self.cov = tuple(cov)

    def pack(self, s: OdomTruth, twist: np.ndarray, stamp_ns: int) -> bytes:
        t = _floats(twist)
        return self.st.pack(
            _CDR_LE, *_stamp(stamp_ns), len(self.frame) + 1, self.frame,
            len(self.child) + 1, self.child, float(s.x), float(s.y), 0.0,
            *yaw_quat(s.yaw).tolist(), *self.cov, t[0], t[1], 0.0, 0.0, 0.0, t[2], *(0.0,) * 36,
        )  # fmt: skip


class TfPacker:
    """tf2_msgs/TFMessage (bag/messages.py `transforms`), one layout per list of (parent,
    child) frames."""

    def __init__(self) -> None:
        self.layouts: dict[tuple, struct.Struct] = {}

    def pack(self, items: list[tuple[int, str, str, np.ndarray, np.ndarray]]) -> bytes:
        frames = tuple((parent.encode(), child.encode()) for _, parent, child, _, _ in items)
        st = self.layouts.get(frames)
        if st is None:
            parts: list = [("I", 1)]
            for parent, child in frames:
                parts += [*_header(parent), child, ("d", 7)]
            st = self.layouts[frames] = _layout(parts)
        values: list = [_CDR_LE, len(items)]
        for (stamp, _, _, xyz, q), (parent, child) in zip(items, frames):
            values += [*_stamp(stamp), len(parent) + 1, parent, len(child) + 1, child]
            values += _floats(xyz)
            values += _floats(q)
        return st.pack(*values)


class LightMessages:
    """A light sensor's samples (IMU, GNSS, odometry) as its messages' CDR bytes: what the
    recorder writes for truth and published, and replay for its recomputed truth."""

    def __init__(self, spec: ImuSpec | GnssSpec | OdomSpec, frame_id: str, base: str, origin):
        self.s = spec
        noise = spec.noise
        if isinstance(spec, ImuSpec):
            a, g = (diagonal_covariance(np.square(n.sigma)) for n in (noise.accel, noise.gyro))
            self.imu = ImuPacker(frame_id, a, g)
        elif isinstance(spec, GnssSpec):
            cov = diagonal_covariance(np.square(noise.position.sigma))
            self.navsat = NavSatPacker(frame_id, cov)
            self.to_geodetic = EnuToGeodetic(origin.lat, origin.lon, origin.alt)
        elif isinstance(spec, OdomSpec):
            var = np.square(noise.increment.sigma) * spec.rate_hz
            self.odom = OdometryPacker("odom", base, var)
        else:
            raise TypeError(type(spec).__name__)
        self.prev: dict[str, OdomTruth] = {}  # an odometry stream's previous sample

    def message(self, sample, t_ns: int, which: str = "truth") -> bytes:
        """`which`: the stream ("truth", "pub"); truth IMU messages carry the orientation, and
        each odometry stream's twist is its increment from that stream's previous sample."""
        if isinstance(sample, ImuTruth):
            return self.imu.pack(sample, t_ns, with_orientation=which == "truth")
        if isinstance(sample, GnssTruth):
            return self.navsat.pack(self.to_geodetic(*map(float, sample.enu)), t_ns)
        if isinstance(sample, OdomTruth):
            prev = self.prev.get(which)
            twist = np.zeros(3) if prev is None else se2_increment(prev, sample) * self.s.rate_hz
            self.prev[which] = sample
            return self.odom.pack(sample, twist, t_ns)
        raise TypeError(type(sample).__name__)
