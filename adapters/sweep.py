"""The lidar sweep shared by every ray-casting backend: poses per column, the organized cloud in
the sensor frame at sweep start, ray directions for along-ray noise, and intensity.

A backend supplies only `cast`: origins (C, 3) one per column, world directions (R, C, 3) and
the maximum range, returning distance (R, C; inf on a miss), the hit's unit normal (R, C, 3)
and the world object index (R, C; -1 on a miss). Keeping the rest here means backends differ
only in their geometry, which is exactly what a cross-simulator comparison should see.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from simconform.adapters.base import LidarTruth, Motion
from simconform.frames import Pose
from simconform.spec import LidarSpec

Cast = Callable[[np.ndarray, np.ndarray, float], tuple[np.ndarray, np.ndarray, np.ndarray]]


def lidar_sweep(
    s: LidarSpec,
    mount: Pose,
    local: np.ndarray,
    t_ns: int,
    motion: Motion,
    cast: Cast,
    reflectivity: np.ndarray,
) -> LidarTruth:
    """reflectivity: per world object, with one extra trailing entry (0) for misses."""
    offsets = s.column_offsets_s()
    col_ns = np.minimum(t_ns + np.round(offsets * 1e9).astype(np.int64), motion.end_ns)
    sensor = motion.pose_at(col_ns).compose(mount)  # one pose per column
    rings, cols = local.shape[:2]
    d_world = np.einsum("cij,rcj->rci", sensor.rot.as_matrix(), local)
    dist, normal, index = cast(sensor.t, d_world, s.range.max)
    valid = np.isfinite(dist) & (dist >= s.range.min) & (dist <= s.range.max)
    ranges = np.where(valid, dist, np.nan)
    p_world = sensor.t[None, :, :] + d_world * ranges[..., None]
    inv = sensor[0].inverse()
    points = inv.apply(p_world.reshape(-1, 3)).reshape(rings, cols, 3)
    directions = inv.rot.apply(d_world.reshape(-1, 3)).reshape(rings, cols, 3)
    cos_inc = np.abs(np.einsum("rci,rci->rc", np.nan_to_num(normal), d_world))
    intensity = np.where(valid, reflectivity[index] * cos_inc, 0.0)
    return LidarTruth(
        points=points,
        directions=directions,
        ranges=ranges,
        intensity=intensity.astype(np.float32),
        t_offset=np.broadcast_to(offsets[None, :], (rings, cols)).astype(np.float32),
    )
