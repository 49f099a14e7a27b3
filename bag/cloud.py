"""Lidar sweeps as PointCloud2, in the layout of the driver the spec names (`point_time`).

A real spinning lidar's driver publishes the points of one sweep as measured: each in the
sensor frame at its own time, with that time in a field of its own. The drivers disagree on the
field's name, type, unit and origin, and SLAM front ends (KISS-ICP, LIO-SAM, FAST-LIO) read
them to deskew the sweep themselves; so we publish exactly what a driver publishes:

- velodyne: x y z intensity float32 (0, 4, 8, 12), ring uint16 (16), time float32 s after
  header.stamp (18); point_step 22 (velodyne_pointcloud's XYZIRT)
- ouster: x y z float32 (0, 4, 8), intensity float32 (16), t uint32 ns after header.stamp
  (20), reflectivity uint16 (24), ring uint16 (26), ambient uint16 (28), range uint32 mm (32);
  point_step 48 (ouster-ros' default point)
- hesai: x y z intensity float32, ring uint16 (16), timestamp float64 s absolute (18); 26
- livox: x y z intensity float32, tag uint8 (16), line uint8 (17), timestamp float64 ns
  absolute (18); 26 (livox_ros_driver2's PointCloud2 output)
- deskewed: x y z intensity float32, ring uint16 (16); 18; no time field

`deskewed` moves every point into the sensor frame at header.stamp (the sweep's motion from
the backend, LidarTruth.column_motion) and has no time field, so nothing deskews it twice.
Organized as height = rings, width = columns; a ray without a return is NaN in x y z.
"""

from __future__ import annotations

import numpy as np

from simconform.adapters.base import LidarTruth
from simconform.bag.messages import POINTCLOUD2, T, header

CONVENTIONS = ("velodyne", "ouster", "hesai", "livox", "deskewed")
_F4, _F8, _U1, _U2, _U4 = "<f4", "<f8", "<u1", "<u2", "<u4"
_DATATYPE = {_U1: 2, _U2: 4, _U4: 6, _F4: 7, _F8: 8}
_XYZI = [("x", 0, _F4), ("y", 4, _F4), ("z", 8, _F4), ("intensity", 12, _F4)]
LAYOUTS: dict[str, tuple[list[tuple[str, int, str]], int]] = {
    "velodyne": ([*_XYZI, ("ring", 16, _U2), ("time", 18, _F4)], 22),
    "ouster": (
        [
            ("x", 0, _F4),
            ("y", 4, _F4),
            ("z", 8, _F4),
            ("intensity", 16, _F4),
            ("t", 20, _U4),
            ("reflectivity", 24, _U2),
            ("ring", 26, _U2),
            ("ambient", 28, _U2),
            ("range", 32, _U4),
        ],
        48,
    ),
    "hesai": ([*_XYZI, ("ring", 16, _U2), ("timestamp", 18, _F8)], 26),
    "livox": ([*_XYZI, ("tag", 16, _U1), ("line", 17, _U1), ("timestamp", 18, _F8)], 26),
    "deskewed": ([*_XYZI, ("ring", 16, _U2)], 18),
}


def dtype_of(convention: str) -> np.dtype:
    fields, step = LAYOUTS[convention]
    return np.dtype(
        {
            "names": [f[0] for f in fields],
            "formats": [f[2] for f in fields],
            "offsets": [f[1] for f in fields],
            "itemsize": step,
        }
    )


def deskew(s: LidarTruth, target_column: int) -> np.ndarray:
    """The points moved into the sensor frame at one column's time (the header stamp's)."""
    if s.column_motion is None:
        return s.points
    rot, trans = s.column_motion
    p_start = np.einsum("cij,rcj->rci", rot, s.points) + trans[None, :, :]
    r_k, t_k = rot[target_column], trans[target_column]
    return (p_start - t_k) @ r_k  # R_k^T (p - t_k), row vectors


def cloud(s: LidarTruth, stamp_ns: int, frame_id: str, convention: str, stamp_offset_ns: int = 0):
    """The sweep as `convention`'s driver publishes it; header.stamp is `stamp_ns`, which lies
    `stamp_offset_ns` after the sweep start (0: the stamp is the first column's time)."""
    rings, cols = s.ranges.shape
    arr = np.zeros((rings, cols), dtype=dtype_of(convention))
    ok = np.isfinite(s.ranges)
    pts = s.points
    if convention == "deskewed":
        pts = deskew(s, 0 if stamp_offset_ns == 0 else cols - 1)
    arr["x"], arr["y"], arr["z"] = pts[..., 0], pts[..., 1], pts[..., 2]
    arr["intensity"] = np.where(ok, s.intensity, np.nan)
    ring = np.broadcast_to(np.arange(rings)[:, None], (rings, cols))
    # seconds after header.stamp, from the exact column times (ns) to keep ns integers exact
    rel_ns = np.round(s.t_offset.astype(np.float64) * 1e9).astype(np.int64) - stamp_offset_ns
    if convention in ("velodyne", "ouster", "hesai", "deskewed"):
        arr["ring"] = ring
    if convention == "velodyne":
        arr["time"] = rel_ns * 1e-9
    elif convention == "ouster":
        if rel_ns.min() < 0:
            raise ValueError("ouster's t is unsigned: header.stamp must be the sweep start")
        arr["t"] = rel_ns
        arr["reflectivity"] = np.clip(np.rint(np.where(ok, s.intensity, 0) * 255), 0, 65535)
        arr["range"] = np.where(ok, np.rint(np.nan_to_num(s.ranges) * 1000), 0)
    elif convention == "hesai":
        sec, nsec = divmod(int(stamp_ns), 1_000_000_000)
        arr["timestamp"] = sec + (nsec + rel_ns) * 1e-9
    elif convention == "livox":
        arr["line"] = ring % 256
        arr["timestamp"] = (int(stamp_ns) + rel_ns).astype(np.float64)
    fields, step = LAYOUTS[convention]
    pf = T["sensor_msgs/msg/PointField"]
    return T[POINTCLOUD2](
        header=header(stamp_ns, frame_id),
        height=rings,
        width=cols,
        fields=[pf(name=n, offset=o, datatype=_DATATYPE[d], count=1) for n, o, d in fields],
        is_bigendian=False,
        point_step=step,
        row_step=step * cols,
        data=np.frombuffer(arr.tobytes(), dtype=np.uint8),
        is_dense=False,
    )
