"""gz.msgs10 sensor messages -> simconform truth samples, without needing Gazebo installed.

The messages are read from their protobuf wire bytes with a tiny decoder, so the same code path
serves real `gz.msgs10` objects (serialized with `SerializeToString()`) and bytes built in tests
from the public schema. Field numbers are those of gz-msgs 10 (proto/gz/msgs/*.proto, tag
gz-msgs10_10.4.0; unchanged on main):

- Header {Time stamp = 1; repeated Map data = 2}, Time {int64 sec = 1; int32 nsec = 2}
- LaserScan {header 1, frame 2, world_pose 3, angle_min 4, angle_max 5, angle_step 6,
  range_min 7, range_max 8, count 9, vertical_angle_min 10, vertical_angle_max 11,
  vertical_angle_step 12, vertical_count 13, repeated double ranges 14, intensities 15}
- PointCloudPacked {header 1, repeated Field field 2 (name 1, offset 2, datatype 3, count 4),
  height 3, width 4, is_bigendian 5, point_step 6, row_step 7, bytes data 8, is_dense 9}
- Image {header 1, width 2, height 3, step 4, bytes data 5, pixel_format_type 6 (RGB_INT8 = 3,
  R_FLOAT32 = 13)}
- Pose {header 1, name 2, id 3, Vector3d position 4, Quaternion orientation 5}
- IMU {header 1, entity_name 2, Quaternion orientation 3, Vector3d angular_velocity 5,
  Vector3d linear_acceleration 7}; Quaternion {x 2, y 3, z 4, w 5}; Vector3d {x 2, y 3, z 4}
- NavSat {header 1, latitude_deg 2, longitude_deg 3, altitude 4, velocity_east 5,
  velocity_north 6, velocity_up 7, frame_id 8}

Lidar ray order (gz-sensors 8 Lidar::PublishLidarScan): ranges[j * count + i], i the
horizontal sample from angle_min counter-clockwise about +z, j the vertical sample from
vertical_angle_min (the lowest beam) upwards; angle step (max - min) / (count - 1). With
clamping off (GpuLidarSensor), gz-rendering returns +inf beyond the far clip (range_max) and
-inf inside the near clip (range_min), and gz-sensors' Clamp turns NaN into range_max: all of
these become NaN here, matching the reference backend's validity test.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import numpy as np
import pymap3d

from simconform.adapters.base import CameraTruth, GnssTruth, ImuTruth, LidarTruth
from simconform.world import Origin

Fields = dict[int, list[Any]]  # field number -> values in order (int, bytes, or float bits)

RGB_INT8 = 3
R_FLOAT32 = 13
POINT_FIELD_DTYPES = {0: "i1", 1: "u1", 2: "i2", 3: "u2", 4: "i4", 5: "u4", 6: "f4", 7: "f8"}


# ------------------------------------------------------------------ wire format


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")


def parse(buf: bytes) -> Fields:
    """One protobuf message's fields; fixed64 kept as 8 raw bytes, fixed32 as 4, so the caller
    picks double/int from the schema (proto3 packs repeated doubles as one length field)."""
    out: Fields = {}
    pos, n = 0, len(buf)
    while pos < n:
        key, pos = _varint(buf, pos)
        num, wire = key >> 3, key & 7
        if wire == 0:
            val, pos = _varint(buf, pos)
        elif wire == 1:
            val, pos = buf[pos : pos + 8], pos + 8
        elif wire == 2:
            length, pos = _varint(buf, pos)
            val, pos = buf[pos : pos + length], pos + length
        elif wire == 5:
            val, pos = buf[pos : pos + 4], pos + 4
        else:
            raise ValueError(f"unsupported wire type {wire} for field {num}")
        if pos > n:
            raise ValueError(f"truncated field {num}")
        out.setdefault(num, []).append(val)
    return out


def _bytes_of(msg: Any) -> bytes:
    """Wire bytes of a gz.msgs10 object (anything with SerializeToString) or bytes as given."""
    if isinstance(msg, bytes | bytearray | memoryview):
        return bytes(msg)
    return msg.SerializeToString()


def _double(f: Fields, num: int, default: float = 0.0) -> float:
    v = f.get(num)
    return struct.unpack("<d", v[-1])[0] if v else default


def _uint(f: Fields, num: int, default: int = 0) -> int:
    v = f.get(num)
    return int(v[-1]) if v else default


def _int64(f: Fields, num: int) -> int:
    v = _uint(f, num)
    return v - (1 << 64) if v >= 1 << 63 else v


def _sub(f: Fields, num: int) -> Fields:
    v = f.get(num)
    return parse(v[-1]) if v else {}


def _blob(f: Fields, num: int) -> bytes:
    v = f.get(num)
    return bytes(v[-1]) if v else b""


def _doubles(f: Fields, num: int) -> np.ndarray:
    """Repeated double, packed (length-delimited) or not (one fixed64 per element)."""
    parts = [np.frombuffer(bytes(v), dtype="<f8") for v in f.get(num, [])]
    return np.concatenate(parts) if parts else np.zeros(0)


def stamp_ns(f: Fields) -> int:
    """header.stamp of a parsed message in integer ns (simulation time)."""
    t = _sub(_sub(f, 1), 1)
    nsec = _uint(t, 2)
    nsec = nsec - (1 << 64) if nsec >= 1 << 63 else nsec  # int32 negatives are 10-byte varints
    return _int64(t, 1) * 1_000_000_000 + nsec


# ------------------------------------------------------------------ messages


@dataclass
class LaserScan:
    stamp_ns: int
    frame: str
    angle_min: float
    angle_max: float
    count: int
    vertical_angle_min: float
    vertical_angle_max: float
    vertical_count: int
    range_min: float
    range_max: float
    ranges: np.ndarray  # (vertical_count, count)
    intensities: np.ndarray  # (vertical_count, count)


def read_laserscan(msg: Any) -> LaserScan:
    f = parse(_bytes_of(msg))
    count, vcount = _uint(f, 9), max(_uint(f, 13), 1)
    ranges = _doubles(f, 14)
    if ranges.size != count * vcount:
        raise ValueError(f"LaserScan has {ranges.size} ranges, expected {count} x {vcount}")
    inten = _doubles(f, 15)
    inten = inten.reshape(vcount, count) if inten.size == ranges.size else np.zeros((vcount, count))
    return LaserScan(
        stamp_ns=stamp_ns(f),
        frame=_blob(f, 2).decode(),
        angle_min=_double(f, 4),
        angle_max=_double(f, 5),
        count=count,
        vertical_angle_min=_double(f, 10),
        vertical_angle_max=_double(f, 11),
        vertical_count=vcount,
        range_min=_double(f, 7),
        range_max=_double(f, 8),
        ranges=ranges.reshape(vcount, count),
        intensities=inten,
    )


def _angles(lo: float, hi: float, n: int) -> np.ndarray:
    """Gazebo's beam angles: n evenly from lo to hi inclusive (one beam: lo)."""
    return np.array([lo]) if n == 1 else lo + (hi - lo) * np.arange(n) / (n - 1)


def laserscan_to_truth(msg: Any) -> LidarTruth:
    """Organized (rings, columns) truth in the sensor frame; NaN where no return.

    gpu_lidar renders the whole sweep at one instant (a global shutter), so t_offset is 0.
    """
    s = read_laserscan(msg)
    az = _angles(s.angle_min, s.angle_max, s.count)[None, :]
    el = _angles(s.vertical_angle_min, s.vertical_angle_max, s.vertical_count)[:, None]
    ce = np.cos(el)
    dirs = np.stack(np.broadcast_arrays(ce * np.cos(az), ce * np.sin(az), np.sin(el)), axis=-1)
    r = s.ranges
    # +inf = beyond range; range_max = NaN clamped by gz-sensors; below min = no valid return
    valid = np.isfinite(r) & (r >= s.range_min) & (r < s.range_max)
    ranges = np.where(valid, r, np.nan)
    return LidarTruth(
        points=dirs * ranges[..., None],
        directions=dirs,
        ranges=ranges,
        intensity=np.where(valid, s.intensities, 0.0).astype(np.float32),
        t_offset=np.zeros(r.shape, dtype=np.float32),
    )


def read_pointcloud_packed(msg: Any) -> tuple[int, dict[str, np.ndarray]]:
    """(stamp_ns, {field name: (height, width) array}) of a PointCloudPacked."""
    f = parse(_bytes_of(msg))
    height, width = _uint(f, 3), _uint(f, 4)
    step, big = _uint(f, 6), bool(_uint(f, 5))
    data = _blob(f, 8)
    if len(data) < height * width * step:
        raise ValueError(
            f"PointCloudPacked data has {len(data)} bytes, expected {height * width * step}"
        )
    out: dict[str, np.ndarray] = {}
    for raw in f.get(2, []):
        fd = parse(raw)
        name, offset, dtype = _blob(fd, 1).decode(), _uint(fd, 2), _uint(fd, 3)
        dt = np.dtype(POINT_FIELD_DTYPES[dtype]).newbyteorder(">" if big else "<")
        rec = np.frombuffer(data, dtype=np.uint8)[: height * width * step].reshape(-1, step)
        col = rec[:, offset : offset + dt.itemsize].copy().view(dt)[:, 0]
        out[name] = col.reshape(height, width).astype(dt.newbyteorder("="))
    return stamp_ns(f), out


def _pixel_rows(msg: Any, kind: str, fmt: int, fmt_name: str, bpp: int) -> tuple[int, np.ndarray]:
    """(stamp_ns, (height, width * bpp) uint8) of an Image in pixel format `fmt`, rows
    row-major with their padding (`step`) cut off."""
    f = parse(_bytes_of(msg))
    w, h = _uint(f, 2), _uint(f, 3)
    step = _uint(f, 4) or bpp * w
    got = _uint(f, 6)
    if got != fmt:
        raise ValueError(f"{kind} pixel_format_type {got}, expected {fmt_name} ({fmt})")
    data = np.frombuffer(_blob(f, 5), dtype=np.uint8)
    if data.size < step * h:
        raise ValueError(f"{kind} data has {data.size} bytes, expected {step * h}")
    return stamp_ns(f), data[: step * h].reshape(h, step)[:, : bpp * w].copy()


def read_image(msg: Any) -> tuple[int, np.ndarray]:
    """(stamp_ns, (height, width, 3) uint8) of an R8G8B8 (RGB_INT8) Image, row-major."""
    stamp, rows = _pixel_rows(msg, "Image", RGB_INT8, "RGB_INT8", 3)
    return stamp, rows.reshape(rows.shape[0], -1, 3)


def read_depth(msg: Any) -> tuple[int, np.ndarray]:
    """(stamp_ns, (height, width) float32 metres) of a depth_camera's R_FLOAT32 Image.

    gz-rendering's depth camera gives z-depth (along the optical axis), +inf beyond the far
    clip and -inf inside the near clip."""
    stamp, rows = _pixel_rows(msg, "depth Image", R_FLOAT32, "R_FLOAT32", 4)
    return stamp, rows.view("<f4").astype(np.float32)


def image_to_truth(msg: Any, depth_msg: Any = None) -> CameraTruth:
    """Gazebo's camera image, and its depth_camera twin's z-depth when there is one.

    Depth keeps +inf for nothing within the far clip (as the reference backend's misses);
    -inf (closer than the near clip) becomes NaN: no measurement."""
    depth = None
    if depth_msg is not None:
        depth = read_depth(depth_msg)[1]
        depth[np.isneginf(depth)] = np.nan
    return CameraTruth(image=read_image(msg)[1], depth=depth)


def read_pose(msg: Any) -> tuple[int, np.ndarray, np.ndarray]:
    """(stamp_ns, position (3,), orientation x y z w (4,)) of a gz.msgs.Pose."""
    f = parse(_bytes_of(msg))
    q = _sub(f, 5)
    quat = np.array([_double(q, 2), _double(q, 3), _double(q, 4), _double(q, 5, 1.0)])
    return stamp_ns(f), _xyz(_sub(f, 4)), quat


def _xyz(f: Fields) -> np.ndarray:
    return np.array([_double(f, 2), _double(f, 3), _double(f, 4)])


def imu_to_truth(msg: Any) -> ImuTruth:
    """Specific force and rate in the IMU frame; orientation (x y z w, w >= 0) in the world
    (ENU) frame, which is simconform's map frame."""
    f = parse(_bytes_of(msg))
    q = _sub(f, 3)
    quat = np.array([_double(q, 2), _double(q, 3), _double(q, 4), _double(q, 5, 1.0)])
    quat = quat / np.linalg.norm(quat)
    if quat[3] < 0:
        quat = -quat
    return ImuTruth(accel=_xyz(_sub(f, 7)), gyro=_xyz(_sub(f, 5)), orientation=quat)


def read_navsat(msg: Any) -> tuple[int, float, float, float]:
    """(stamp_ns, latitude_deg, longitude_deg, altitude m)."""
    f = parse(_bytes_of(msg))
    return stamp_ns(f), _double(f, 2), _double(f, 3), _double(f, 4)


def navsat_to_truth(msg: Any, origin: Origin) -> GnssTruth:
    """Antenna position in the map frame: WGS84 -> ENU about the world origin (pymap3d), the
    inverse of what gz-sim's NavSat system does with <spherical_coordinates>."""
    _t, lat, lon, alt = read_navsat(msg)
    e, n, u = pymap3d.geodetic2enu(lat, lon, alt, origin.lat, origin.lon, origin.alt)
    return GnssTruth(enu=np.array([e, n, u], dtype=float))


def message_stamp_ns(msg: Any) -> int:
    """header.stamp (field 1 in every gz sensor message) in ns, for any of the messages above."""
    return stamp_ns(parse(_bytes_of(msg)))
