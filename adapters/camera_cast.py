"""The reference camera's global-shutter frame in one compiled pass, tile by tile.

Rendered as separate passes over the frame (rotate the pixel rays, cast the planes, cast the
tree in tiles, shade, take the depth), a 640 x 480 frame moved about 250 bytes a pixel through
memory, and on the 2-core build machine those passes cost more than the casting itself
(rotation 2.3 ms, planes 3.3 ms, tiles 6.8 ms a demo frame). Here each 8 x 8 tile of pixels
is rotated, cast against the planes and the tree (simconform/bvhcast.py `tile`) and shaded
while it is in cache. Every step is the band path's arithmetic in the same order, so the
image and depth are the same bits (tests/test_reference.py compares the two).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from simconform.bvhcast import _JIT, _MAX_CANDIDATES, _TILE, node_spheres, plane_hit, tile


@njit(**_JIT)
def frame(rays, rot, o, planes_n, planes_d, planes_obj, box, left, right, start, count, kind,
          obj, prio, par, albedo255, to_light, ambient, diffuse, image, depth):  # fmt: skip
    """Render pixel rays `rays` (H, W, 3, body frame) turned by `rot` (3, 3) from one origin
    o (1, 3) into `image` (H, W, 3) uint8 and, where it has H rows, `depth` (H, W) float32
    z-depth. The tree arrays as BVHCaster.arrays() gives them (empty: planes only)."""
    h, w = rays.shape[0], rays.shape[1]
    ox, oy, oz = o[0, 0], o[0, 1], o[0, 2]
    slack = 1e-9 * (1.0 + abs(ox) + abs(oy) + abs(oz))
    cand = np.empty(_MAX_CANDIDATES, dtype=np.int64)
    stack = np.empty(len(box) + 1, dtype=np.int64)
    sphere = node_spheres(box, o, slack)
    size = _TILE * _TILE
    d, best = np.empty((size, 3)), np.empty(size)
    index, normal = np.empty(size, dtype=np.int64), np.empty((size, 3))
    with_depth = depth.shape[0] == h
    one, zero, half = np.float32(1.0), np.float32(0.0), np.float32(0.5)
    for r0 in range(0, h, _TILE):
        r1 = min(r0 + _TILE, h)
        for c0 in range(0, w, _TILE):
            c1 = min(c0 + _TILE, w)
            m = 0
            for rr in range(r0, r1):
                for cc in range(c0, c1):
                    x, y, z = rays[rr, cc, 0], rays[rr, cc, 1], rays[rr, cc, 2]
                    dx = (rot[0, 0] * x + rot[0, 1] * y) + rot[0, 2] * z  # as reference._rotate
                    dy = (rot[1, 0] * x + rot[1, 1] * y) + rot[1, 2] * z
                    dz = (rot[2, 0] * x + rot[2, 1] * y) + rot[2, 2] * z
                    d[m, 0], d[m, 1], d[m, 2] = dx, dy, dz
                    best[m], index[m], normal[m, 0], normal[m, 1], normal[m, 2] = plane_hit(
                        ox, oy, oz, dx, dy, dz, 0.0, np.inf, planes_n, planes_d, planes_obj
                    )
                    m += 1
            if len(kind):
                tile(o, d, m, slack, 0.0, np.inf, best, index, normal, cand, stack, sphere, box,
                     left, right, start, count, kind, obj, prio, par)  # fmt: skip
            m = 0
            for rr in range(r0, r1):
                for cc in range(c0, c1):
                    k = index[m]  # reference._lambert's shading, written out: as a called
                    sh = one  # helper, numba's code for it ran 7x slower
                    if k >= 0:
                        n0, n1, n2 = (
                            np.float32(normal[m, 0]),
                            np.float32(normal[m, 1]),
                            np.float32(normal[m, 2]),
                        )
                        lit = n0 * to_light[0] + n1 * to_light[1] + n2 * to_light[2]
                        sh = min(ambient + diffuse * max(lit, zero), one)
                    else:
                        k = len(albedo255) - 1
                    for c in range(3):
                        image[rr, cc, c] = np.uint8(albedo255[k, c] * sh + half)
                    if with_depth:  # z-depth: the ray's component along the optical axis
                        depth[rr, cc] = np.float32(best[m] * rays[rr, cc, 0])
                    m += 1
