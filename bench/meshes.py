"""Deterministic test meshes for the mesh ray-casting bench and tests: no files, no randomness.

- `terrain`: a height field with relief on a regular grid (two triangles per cell), 300 m
  across; n=224 gives 98,568 triangles, the "100,000-triangle terrain" of issue 17;
- `scanned`: a subdivided icosphere with radial bumps, closed, like a scanned rock.
"""

from __future__ import annotations

import numpy as np


def terrain(n: int = 224, size: float = 300.0) -> np.ndarray:
    """(2 (n-1)^2, 3, 3) triangles of z = relief(x, y) over [-size/2, size/2]^2."""
    x, y = np.meshgrid(np.linspace(-size / 2, size / 2, n), np.linspace(-size / 2, size / 2, n))
    z = 3 * np.sin(x / 17) * np.cos(y / 23) + 0.5 * np.sin(x / 3.1 + y / 4.7) + 0.002 * x * y / 10
    v = np.stack([x, y, z], axis=-1).reshape(-1, 3)
    i = np.arange(n * n).reshape(n, n)
    a, b, c, d = i[:-1, :-1].ravel(), i[:-1, 1:].ravel(), i[1:, :-1].ravel(), i[1:, 1:].ravel()
    faces = np.concatenate([np.stack([a, b, d], axis=1), np.stack([a, d, c], axis=1)])
    return v[faces]


def scanned(subdivisions: int = 5, radius: float = 4.0) -> np.ndarray:
    """A closed, bumpy icosphere (20 * 4^subdivisions triangles) centred at (10, -5, 2)."""
    import trimesh

    m = trimesh.creation.icosphere(subdivisions=subdivisions, radius=1.0)
    v = np.asarray(m.vertices)
    bump = 1 + 0.08 * np.sin(7 * v[:, 0]) * np.cos(5 * v[:, 1]) + 0.05 * np.sin(11 * v[:, 2])
    v = v * (radius * bump)[:, None] + [10.0, -5.0, 2.0]
    return v[np.asarray(m.faces)]


def lidar_directions(rings: int, columns: int, fov_deg: tuple[float, float]) -> np.ndarray:
    """(rings * columns, 3) unit directions of a spinning lidar, rings over fov_deg."""
    el = np.radians(np.linspace(fov_deg[0], fov_deg[1], rings))
    az = np.linspace(0, 2 * np.pi, columns, endpoint=False)
    e, a = np.meshgrid(el, az, indexing="ij")
    return np.stack([np.cos(e) * np.cos(a), np.cos(e) * np.sin(a), np.sin(e)], -1).reshape(-1, 3)
