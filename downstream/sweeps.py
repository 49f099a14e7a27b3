"""A run's published lidar sweeps with each point's time, and its true sensor poses.

Per-point time comes under the names and types drivers publish it with (the names KISS-ICP's
own ROS reader looks for, plus Livox's): `t` as uint32 ns (Ouster) or float s (simconform, and
drivers that follow Velodyne's float convention), `time` float32 s (Velodyne), `timestamp`
float64 s (Hesai: absolute; a small value is taken as relative), `offset_time` uint32 ns
(Livox). Relative times count from the cloud's header stamp.
"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import numpy as np
from scipy.spatial.transform import Rotation, Slerp

from simconform.bag.messages import cloud_arrays, stamp_ns
from simconform.bag.reader import SourceBag
from simconform.downstream.odometry import Sweep
from simconform.errors import UserError
from simconform.frames import Pose

TIME_FIELDS = ("t", "time", "timestamp", "offset_time")
_ABSOLUTE_S = 1e6  # a per-point time in seconds above this is a clock reading, not an offset


def point_times_ns(fields: dict[str, np.ndarray], stamp: int) -> np.ndarray | None:
    """Absolute int64 ns of each point, or None when the cloud carries no per-point time."""
    for name in TIME_FIELDS:
        if name not in fields:
            continue
        v = fields[name]
        if v.dtype.kind in "ui":  # integer ticks are nanoseconds (Ouster t, Livox offset_time)
            return stamp + v.astype(np.int64)
        s = v.astype(np.float64)
        if np.nanmax(np.abs(s), initial=0.0) > _ABSOLUTE_S:
            return np.round(s * 1e9).astype(np.int64)
        return stamp + np.round(s * 1e9).astype(np.int64)
    return None


def decode_cloud(
    msg,
) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, int, np.ndarray | None]:
    """A PointCloud2's flat fields, float64 xyz (N, 3), the finite-point mask, the header stamp
    and each point's absolute ns (None without per-point time): one decoding for localize and
    the dataset exports."""
    f = {k: v.reshape(-1) for k, v in cloud_arrays(msg).items()}
    xyz = np.stack([f["x"], f["y"], f["z"]], axis=-1).astype(np.float64)
    stamp = stamp_ns(msg.header)
    return f, xyz, np.isfinite(xyz).all(axis=1), stamp, point_times_ns(f, stamp)


def sweeps(bag: SourceBag, topic: str) -> Iterator[Sweep]:
    """Every cloud on `topic` in log order, as finite points with their times."""
    for _topic, msgtype, _log, raw in bag.messages({topic}):
        _f, xyz, keep, stamp, times = decode_cloud(bag.deserialize(raw, msgtype))
        yield Sweep(xyz[keep], None if times is None else times[keep], stamp)


class TruePoses:
    """The sensor's true pose at any instant: gt/base_link.tum (the run's tf rate) interpolated
    (positions linearly, orientations by slerp), composed with the sensor's mount."""

    def __init__(self, tum: Path, mount: Pose) -> None:
        rows = []
        for line in tum.read_text().splitlines():
            if line.strip() and not line.startswith("#"):
                parts = line.split()
                rows.append((int(Decimal(parts[0]) * 1_000_000_000), *map(float, parts[1:8])))
        if len(rows) < 2:  # a run shorter than the tf period (20 ms) records one pose
            raise UserError(
                tum,
                "poses",
                f"{len(rows)} rows",
                "expected at least 2 poses: a run longer than one tf period (20 ms) records them",
            )
        self.t = np.array([r[0] for r in rows], dtype=np.int64)
        data = np.array([r[1:] for r in rows])
        self.xyz = data[:, :3]
        self.slerp = Slerp(self.t.astype(np.float64), Rotation.from_quat(data[:, 3:]))
        self.mount = mount

    def covers(self, t_ns: int) -> bool:
        return bool(self.t[0] <= t_ns <= self.t[-1])

    def at(self, t_ns: np.ndarray) -> Pose:
        t = np.asarray(t_ns, dtype=np.int64)
        xyz = np.stack([np.interp(t, self.t, self.xyz[:, k]) for k in range(3)], axis=-1)
        return Pose(xyz, self.slerp(t.astype(np.float64))).compose(self.mount)
