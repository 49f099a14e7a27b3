"""Source messages in our layout: field by field into our type store, clouds onto the rays
with each point's time (adapters/replay/pointtime.py) kept."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
from rosbags.typesys.base import Nodetype

from simconform.adapters.base import LidarTruth, Motion
from simconform.adapters.replay.pairing import RayGrid, index_residuals, pair_by_direction
from simconform.adapters.replay.state import Sensor
from simconform.bag import cloud
from simconform.bag.messages import TYPESTORE, cloud_arrays
from simconform.spec import LidarSpec


def to_ours(msg: Any, typename: str) -> Any:
    """A message from any type store (ROS 1 or another ROS 2 distro) as the same type in ours,
    field by field (ROS 1's header.seq has no place in ROS 2 and is dropped)."""
    _consts, fields = TYPESTORE.fielddefs[typename]
    kwargs = {name: _convert(getattr(msg, name), node, detail) for name, (node, detail) in fields}
    return TYPESTORE.types[typename](**kwargs)


def _convert(value: Any, node: Nodetype, detail: Any) -> Any:
    if node == Nodetype.NAME:
        return to_ours(value, detail)
    if node == Nodetype.BASE:
        return value
    (sub_node, sub_detail), _n = detail
    if sub_node == Nodetype.NAME:
        return [to_ours(v, sub_detail) for v in value]
    if sub_node == Nodetype.BASE and sub_detail[0] == "string":
        return list(value)
    return np.asarray(value)


def our_cloud(lt: LidarTruth, stamp: int, frame: str, timed: bool) -> Any:
    """A cloud re-recorded in our layout: velodyne's (`time` float32 s after header.stamp;
    `lt.t_offset` is relative to the stamp here) where points have their own times, else
    without a time field (deskewed clouds: all points in the frame at the stamp)."""
    return cloud.cloud(lt, stamp, frame, "velodyne" if timed else "deskewed", 0)


def schedule_s(s: LidarSpec) -> np.ndarray:
    """The spec's column times (s) relative to header.stamp."""
    return s.column_offsets_s() - s.stamp_offset_ns() * 1e-9


def point_times_s(sn: Sensor, f: dict[str, np.ndarray], st: int) -> np.ndarray | None:
    """Each point's time in s after header.stamp (float64, NaN where not finite), from the
    cloud's time field; None when the sensor's clouds have none."""
    pt = sn.point_time
    if pt is None or pt.field not in f:
        return None
    v = f[pt.field]
    ok = np.isfinite(v) if v.dtype.kind == "f" else np.ones(v.shape, dtype=bool)
    rel = np.full(v.shape, np.nan)
    rel[ok] = (pt.times_ns(v[ok], st) - st) * 1e-9
    return rel


def fill_times(rel: np.ndarray, have: np.ndarray, s: LidarSpec) -> np.ndarray:
    """Times (s after the stamp) for every ray: its point's, else the median of its column's
    points, else the spec's column schedule."""
    out = np.where(have, rel, np.nan)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        col = np.nanmedian(out, axis=0)
    col = np.where(np.isfinite(col), col, schedule_s(s))
    return np.where(np.isfinite(out), out, col[None, :])


def truth_cloud(sn: Sensor, msg: Any, st: int) -> LidarTruth:
    """A truth PointCloud2 (our layout, any driver's time field) as a LidarTruth, times
    relative to header.stamp."""
    f = cloud_arrays(msg)
    pts = np.stack([f["x"], f["y"], f["z"]], axis=-1).astype(np.float64)
    rng = np.linalg.norm(pts, axis=-1)
    ok = np.isfinite(rng) & (rng > 0)
    nominal = sn.s.directions()
    dirs = np.where(ok[..., None], pts / np.where(ok, rng, 1.0)[..., None], nominal)
    rel = point_times_s(sn, f, st)
    t_off = (
        fill_times(rel, np.isfinite(rel), sn.s)
        if rel is not None
        else np.broadcast_to(schedule_s(sn.s), rng.shape)
    )
    return LidarTruth(
        points=np.where(ok[..., None], pts, np.nan),
        directions=dirs,
        ranges=np.where(ok, rng, np.nan),
        intensity=np.nan_to_num(f.get("intensity", np.zeros(rng.shape))).astype(np.float32),
        t_offset=np.asarray(t_off, dtype=np.float64),
    )


def organize(
    sn: Sensor, msg: Any, st: int, grid: RayGrid | None, motion: Motion | None
) -> LidarTruth:
    """A published cloud in our layout: moved into the sensor frame where the map says its
    points are in the world frame (each at its own time where it has one), and organized onto
    the spec's rays (by index or by direction, as the map says; `grid` from the scan's truth,
    else the nominal rays: a point at its own time lies on its nominal ray). `t_offset` is
    each ray's time in s after the stamp (float64; see fill_times)."""
    s: LidarSpec = sn.s
    f = cloud_arrays(msg)
    xyz = np.stack([f["x"], f["y"], f["z"]], axis=-1).astype(np.float64)
    inten = np.asarray(f.get("intensity", np.zeros(xyz.shape[:2])), dtype=np.float64)
    rel = point_times_s(sn, f, st) if sn.time_mode == "points" else None
    if sn.entry.points_frame == "world":
        world = xyz
        pose = motion.pose_at(st).compose(sn.mount)
        xyz = pose.inverse().apply(world.reshape(-1, 3)).reshape(world.shape)
        guess = rel is None and sn.time_mode == "schedule" and s.shutter == "rolling"
        for _ in range(2 if guess else 1 if rel is not None else 0):
            if guess:  # no time field: the column each point's azimuth falls in
                az = np.arctan2(xyz[..., 1], xyz[..., 0]) % (2 * np.pi)
                col = np.round(az / (2 * np.pi / s.columns)).astype(np.int64) % s.columns
                rel = schedule_s(s)[col]
            t = st + np.round(np.nan_to_num(rel) * 1e9).astype(np.int64)
            t = np.clip(t, motion.start_ns, motion.end_ns).ravel()
            pose = motion.pose_at(t).compose(sn.mount)
            xyz = pose.inverse().apply(world.reshape(-1, 3)).reshape(world.shape)
    if grid is None:
        grid = RayGrid(s.directions(), s.rings.elevations())
    rel_in = rel if rel is not None else np.full(inten.shape, np.nan)
    if sn.entry.pair_by() == "index":
        points = index_residuals(xyz, grid, sn.stats)
        vals, times = inten, rel_in
    else:
        both = np.stack([inten.ravel(), rel_in.ravel()], axis=1)
        points, v = pair_by_direction(xyz.reshape(-1, 3), both, grid, sn.stats)
        vals, times = v[..., 0], v[..., 1]
    have = np.isfinite(points[..., 0])
    ranges = np.linalg.norm(points, axis=-1)
    return LidarTruth(
        points=points,
        directions=grid.rays,
        ranges=ranges,
        intensity=np.nan_to_num(vals).astype(np.float32),
        t_offset=fill_times(times, have & np.isfinite(times), s),
    )
