"""Pairing a received lidar cloud with the spec's rays, and how well its points fit them.

A foreign cloud may be organized (rings x columns, paired by index) or unorganized (each
point paired with the ray nearest its direction); either way the angular residuals between
points and rays are summed up per lidar for run.json, so a wrong spec layout shows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy.spatial import cKDTree

from simconform.angles import wrap_angle

RESIDUAL_SAMPLE = 200_000  # angular residuals kept for the pairing quantiles


@dataclass
class PairStats:
    """How well received points fell onto the spec's rays, over all scans of one lidar."""

    method: str
    received: int = 0
    nonfinite: int = 0
    out_of_bin: int = 0
    duplicates: int = 0
    paired: int = 0
    _sum: float = 0.0
    _sum_sq: float = 0.0
    _max: float = 0.0
    _count: int = 0  # residuals summed: the paired points (a duplicate ray's extra point is not)
    _kept: list = field(default_factory=list)
    _stride: int = 1
    _n_kept: int = 0

    def add_residuals(self, angle: np.ndarray) -> None:
        if angle.size == 0:
            return
        self._count += angle.size
        self._sum += float(angle.sum())
        self._sum_sq += float(angle @ angle)
        self._max = max(self._max, float(angle.max()))
        part = angle[:: self._stride]
        self._kept.append(part)
        self._n_kept += len(part)
        if self._n_kept > RESIDUAL_SAMPLE:  # decimate: a fixed-size, evenly spread sample
            joined = np.concatenate(self._kept)[::2]
            self._kept, self._n_kept, self._stride = [joined], len(joined), self._stride * 2

    def summary(self, ring_bin_deg: float | None, column_bin_deg: float) -> dict:
        finite = self.received - self.nonfinite
        judged = self._count
        res = np.concatenate(self._kept) if self._kept else np.zeros(0)
        deg = float(np.rad2deg(1.0))

        def q(p: float) -> float | None:
            return float(np.quantile(res, p)) * deg if res.size else None

        return {
            "method": self.method,
            "points_received": self.received,
            "points_nonfinite": self.nonfinite,
            "points_paired": self.paired,
            "points_duplicate_ray": self.duplicates,
            "points_beyond_half_bin": self.out_of_bin,
            "share_beyond_half_bin": self.out_of_bin / finite if finite else None,
            "residual_deg": {
                "mean": self._sum / judged * deg if judged else None,
                "rms": math.sqrt(self._sum_sq / judged) * deg if judged else None,
                "p50": q(0.5),
                "p95": q(0.95),
                "max": self._max * deg if judged else None,
            },
            "ring_bin_deg": ring_bin_deg,
            "column_bin_deg": column_bin_deg,
        }


class RayGrid:
    """One scan's rays (rings x columns unit directions in the sensor frame at the scan stamp)
    with the spec's nominal layout, for pairing points with rays by direction."""

    @staticmethod
    def from_truth(points: np.ndarray, directions: np.ndarray, elevations: np.ndarray) -> RayGrid:
        """Rays as seen from the sensor origin at the scan stamp: the direction of each truth
        point where there is one, else the ray's own direction.

        With a rolling shutter the sensor moves during the sweep, so a ray starts away from
        that origin and a near point's direction from it differs from the ray's by the
        parallax (degrees at 1 m). Noise along the ray moves a point by only a tiny angle
        about the truth point, so the truth point's direction is the one to match.
        """
        rng = np.linalg.norm(points, axis=-1)
        ok = np.isfinite(rng) & (rng > 0)
        dirs = np.where(ok[..., None], points / np.where(ok, rng, 1.0)[..., None], directions)
        return RayGrid(dirs, elevations)

    def __init__(self, rays: np.ndarray, elevations: np.ndarray) -> None:
        self.rays = rays
        self.rings, self.cols = rays.shape[:2]
        self.elev = elevations
        self.col_bin = 2 * np.pi / self.cols
        self.ray_el = np.arcsin(np.clip(rays[..., 2], -1.0, 1.0))
        self.ray_az = np.arctan2(rays[..., 1], rays[..., 0])
        self._tree: cKDTree | None = None
        gaps = np.diff(elevations)
        if self.rings > 1:
            self.half_up = np.append(gaps, gaps[-1]) / 2
            self.half_down = np.insert(gaps, 0, gaps[0]) / 2
        else:  # a single ring has no ring spacing: use the column bin
            self.half_up = self.half_down = np.array([self.col_bin / 2])

    def nearest(self, d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(ring, column) of the ray nearest in angle to each unit direction d.

        With the nominal grid this is the nearest ring in elevation and the nearest column in
        azimuth. A rolling shutter under motion moves a scan's rays by up to several bins for
        near points (parallax), which no local search around the nominal bin follows
        reliably; a k-d tree over the scan's own rays finds the global nearest one.
        """
        if self._tree is None:
            self._tree = cKDTree(self.rays.reshape(-1, 3))
        _dist, cell = self._tree.query(d)
        return np.divmod(np.asarray(cell, dtype=np.int64), self.cols)

    def residuals(
        self, d: np.ndarray, r: np.ndarray, c: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """(angle between each direction and its ray, whether it lies within half a bin)."""
        ray = self.rays[r, c]
        cross = np.linalg.norm(np.cross(d, ray), axis=1)
        angle = np.arctan2(cross, np.einsum("ij,ij->i", d, ray))
        d_el = np.arcsin(np.clip(d[:, 2], -1.0, 1.0)) - self.ray_el[r, c]
        d_az = wrap_angle(np.arctan2(d[:, 1], d[:, 0]) - self.ray_az[r, c])
        half_el = np.where(d_el > 0, self.half_up[r], self.half_down[r])
        inside = (np.abs(d_el) <= half_el) & (np.abs(d_az) <= self.col_bin / 2)
        return angle, inside


def pair_by_direction(
    points: np.ndarray, values: np.ndarray, grid: RayGrid, stats: PairStats
) -> tuple[np.ndarray, np.ndarray]:
    """Organize an unorganized cloud (N, 3, sensor frame) onto the grid's rays.

    Each point goes to the ray nearest its direction (elevation -> nearest ring, azimuth ->
    nearest column, for the rays where the scan's motion put them). Points more than half a
    bin from their ray are left out (they belong to no ray of the spec), and of several
    points on one ray the closest in direction is kept. Returns the (rings, columns, 3) cloud
    with NaN for rays without a point, and the values per ray (values (N,) or (N, k)).
    """
    R, C = grid.rings, grid.cols
    stats.received += len(points)
    rng = np.linalg.norm(points, axis=1)
    ok = np.isfinite(rng) & (rng > 0)
    stats.nonfinite += int(len(points) - ok.sum())
    p, v = points[ok], values[ok]
    d = p / rng[ok, None]
    br, bc = grid.nearest(d)
    angle, inside = grid.residuals(d, br, bc)
    stats.out_of_bin += int((~inside).sum())
    cells = (br * C + bc)[inside]
    angle, p, v = angle[inside], p[inside], v[inside]
    order = np.lexsort((angle, cells))
    first = np.ones(len(order), dtype=bool)
    first[1:] = cells[order][1:] != cells[order][:-1]
    sel = order[first]
    stats.duplicates += int(len(order) - len(sel))
    stats.paired += len(sel)
    stats.add_residuals(angle[sel])
    cloud = np.full((R * C, 3), np.nan)
    cloud[cells[sel]] = p[sel]
    vals = np.zeros((R * C, *v.shape[1:]))
    vals[cells[sel]] = v[sel]
    return cloud.reshape(R, C, 3), vals.reshape(R, C, *v.shape[1:])


def index_residuals(cloud: np.ndarray, grid: RayGrid, stats: PairStats) -> np.ndarray:
    """Statistics of an organized cloud paired by index; returns it with NaN for no point."""
    flat = cloud.reshape(-1, 3)
    stats.received += len(flat)
    rng = np.linalg.norm(flat, axis=1)
    ok = np.isfinite(rng) & (rng > 0)
    stats.nonfinite += int(len(flat) - ok.sum())
    idx = np.flatnonzero(ok)
    r, c = np.divmod(idx, grid.cols)
    angle, inside = grid.residuals(flat[ok] / rng[ok, None], r, c)
    stats.out_of_bin += int((~inside).sum())
    stats.paired += len(idx)
    stats.add_residuals(angle)
    return np.where(ok[:, None], flat, np.nan).reshape(cloud.shape)
