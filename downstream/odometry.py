"""Lidar odometry on published clouds: one small interface, KISS-ICP (PyPI `kiss-icp`) behind it.

An odometry takes one sweep at a time (points in the sensor frame, each point's time) and
returns the sensor's pose relative to the first sweep, plus the instant that pose refers to:
KISS-ICP deskews every sweep to its latest point under a constant-velocity model (kiss-icp 1.x,
Preprocessor: exp((s - 1) * log(delta)) with s the point time normalised over the sweep), so its
pose is the sensor's at the sweep's last point time; without per-point times it does not deskew
and the pose is the sensor's at the cloud's stamp. Evaluating against truth at any other
instant would charge the odometry with the vehicle's motion during the sweep.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np


@dataclass(frozen=True)
class Sweep:
    points: np.ndarray  # (N, 3) float64, sensor frame, finite
    times_ns: np.ndarray | None  # (N,) absolute int64 time of each point; None: none published
    stamp_ns: int  # the cloud's header stamp


class LidarOdometry(Protocol):
    name: str

    def register(self, sweep: Sweep) -> tuple[np.ndarray, int]:
        """(4x4 sensor pose relative to the first sweep's, the instant it holds at, ns)."""
        ...


class KissIcp:
    """KISS-ICP with its defaults, the sensor's range limits, and deskewing when the cloud
    carries per-point time."""

    name = "kiss-icp"

    def __init__(self, min_range: float, max_range: float, deskew: bool = True) -> None:
        from kiss_icp.config import KISSConfig
        from kiss_icp.kiss_icp import KissICP

        cfg = KISSConfig()
        cfg.data.min_range, cfg.data.max_range, cfg.data.deskew = min_range, max_range, deskew
        cfg.mapping.voxel_size = max_range / 100.0  # KISS-ICP's own default rule
        cfg.registration.max_num_threads = 1  # deterministic, and CI has two cores
        self.deskew = deskew
        self.icp = KissICP(cfg)

    def register(self, sweep: Sweep) -> tuple[np.ndarray, int]:
        times = sweep.times_ns
        timed = self.deskew and times is not None and len(times) and times.max() > times.min()
        rel = (times - times.min()).astype(np.float64) if timed else np.zeros(0)
        self.icp.register_frame(sweep.points, rel)
        at = int(times.max()) if timed else sweep.stamp_ns
        return self.icp.last_pose.copy(), at
