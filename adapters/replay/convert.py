"""Source messages in our layout: field by field into our type store, clouds onto the rays."""

from __future__ import annotations

from typing import Any

import numpy as np
from rosbags.typesys.base import Nodetype

from simconform.adapters.base import LidarTruth, Motion
from simconform.adapters.replay.pairing import RayGrid, index_residuals, pair_by_direction
from simconform.adapters.replay.state import Sensor
from simconform.bag import messages
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


def truth_cloud(sn: Sensor, msg: Any) -> LidarTruth:
    """A truth PointCloud2 (our layout) as the LidarTruth it was written from."""
    f = cloud_arrays(msg)
    pts = np.stack([f["x"], f["y"], f["z"]], axis=-1).astype(np.float64)
    rng = np.linalg.norm(pts, axis=-1)
    ok = np.isfinite(rng) & (rng > 0)
    nominal = sn.s.directions()
    dirs = np.where(ok[..., None], pts / np.where(ok, rng, 1.0)[..., None], nominal)
    t_off = f["t"] if "t" in f else np.broadcast_to(sn.s.column_offsets_s(), rng.shape)
    return LidarTruth(
        points=np.where(ok[..., None], pts, np.nan),
        directions=dirs,
        ranges=np.where(ok, rng, np.nan),
        intensity=np.nan_to_num(f.get("intensity", np.zeros(rng.shape))).astype(np.float32),
        t_offset=np.asarray(t_off, dtype=np.float32),
    )


def published_cloud(
    sn: Sensor, msg: Any, st: int, grid: RayGrid | None, motion: Motion | None
) -> Any:
    """A published cloud in our layout: moved into the sensor frame where the map says its
    points are in the world frame, and organized onto the spec's rays (by index or by
    direction, as the map says; `grid` from the scan's truth, else the nominal rays)."""
    s: LidarSpec = sn.s
    f = cloud_arrays(msg)
    xyz = np.stack([f["x"], f["y"], f["z"]], axis=-1).astype(np.float64)
    inten = np.asarray(f.get("intensity", np.zeros(xyz.shape[:2])), dtype=np.float64)
    if sn.entry.points_frame == "world":
        pose = motion.pose_at(st).compose(sn.mount)
        xyz = pose.inverse().apply(xyz.reshape(-1, 3)).reshape(xyz.shape)
    if grid is None:
        grid = RayGrid(s.directions(), s.rings.elevations())
    if sn.entry.pair_by() == "index":
        cloud = index_residuals(xyz, grid, sn.stats)
        vals = inten
    else:
        cloud, vals = pair_by_direction(xyz.reshape(-1, 3), inten.ravel(), grid, sn.stats)
    ranges = np.linalg.norm(cloud, axis=-1)
    lt = LidarTruth(
        points=cloud,
        directions=grid.rays,
        ranges=ranges,
        intensity=np.nan_to_num(vals).astype(np.float32),
        t_offset=np.broadcast_to(s.column_offsets_s(), ranges.shape).astype(np.float32),
    )
    return messages.cloud(lt, st, sn.frame)
