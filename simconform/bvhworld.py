"""The bounded objects of a World laid out as the leaves of one BVH, for simconform/bvhcast.py.

Boxes, cylinders and spheres become one parameter row each and every mesh triangle its own
row, in the compiled kernels' layout (bvhcast._hit), with a priority that sends equal
distances where the brute force sends them; the tree is built over their bounds
(simconform/bvh.py). Kept apart from the kernels because it is plain Python: numba's cache
is per source file, so the kernels' module holds only compiled code and what it inlines.
"""

from __future__ import annotations

import numpy as np
from scipy.spatial.transform import Rotation

from simconform.bvh import build
from simconform.bvhcast import (
    _BOX,
    _CYL,
    _PACKET,
    _SPH,
    _TIE,
    _TRI,
    _WIDTH,
    _cast,
    _cast_tiles,
)
from simconform.slab import box_pad
from simconform.world import Box, Cylinder, Mesh, Sphere, World


class BVHCaster:
    """The bounded objects of a World in one BVH; `cast` updates `Scene`'s plane results."""

    def __init__(self, world: World) -> None:
        order = {Box: 0, Cylinder: 1, Sphere: 2, Mesh: 3}
        bounded = sorted(
            ((order[type(o)], i) for i, o in enumerate(world.objects) if type(o) in order)
        )
        rows, kinds, objs, prios, los, his = [], [], [], [], [], []
        for slot, (_, i) in enumerate(bounded):
            ob = world.objects[i]
            if isinstance(ob, Mesh):
                p, lo, hi = _triangles(world.mesh_triangles(i))
                kinds.append(np.full(len(p), _TRI))
                prios.append(slot * _TIE + (_TIE - 1 - np.arange(len(p))))
            else:
                p, lo, hi = _solid(ob)
                kinds.append(np.array([(_BOX, _CYL, _SPH)[order[type(ob)]]]))
                prios.append(np.array([slot * _TIE]))
            rows.append(p)
            los.append(lo)
            his.append(hi)
            objs.append(np.full(len(p), i))
        cat = lambda xs, w: np.concatenate(xs) if xs else np.empty((0, w))  # noqa: E731
        self.par = np.ascontiguousarray(cat(rows, _WIDTH), dtype=np.float64)
        self.kind = cat(kinds, 0).reshape(-1).astype(np.int64)
        self.obj = cat(objs, 0).reshape(-1).astype(np.int64)
        self.prio = cat(prios, 0).reshape(-1).astype(np.int64)
        lo, hi = cat(los, 3), cat(his, 3)
        # Grown so that rounding in the traversal's box tests never drops a true hit.
        pad = box_pad(lo, hi)
        lo, hi = lo - pad[:, None], hi + pad[:, None]
        self.tree = build(lo, hi)
        # Primitives stored in leaf order, so a leaf's parameters are contiguous in memory.
        perm = self.tree.order
        self.kind, self.obj, self.prio = self.kind[perm], self.obj[perm], self.prio[perm]
        self.par = np.ascontiguousarray(self.par[perm])
        self._par_sphere = _spheres(lo[perm], hi[perm])  # the tiles' candidates, sorted
        self.tree.order = np.arange(len(perm), dtype=np.int64)
        # Node bounds as one row (lo, hi) per node: one cache line per box test.
        self._box = np.ascontiguousarray(np.hstack([self.tree.lo, self.tree.hi]))
        self._sphere = _spheres(self.tree.lo, self.tree.hi)  # the tiles' cone cull
        self._prims = (self.kind, self.obj, self.prio, self.par)

    def __len__(self) -> int:
        return len(self.kind)

    def cast(
        self, o, d, t_min, t_max, best, index, normal, width: int | None = None, packet=None
    ) -> None:
        """Nearer bounded hits replace (best, index, normal) in place; o is (3,) or (N, 3).
        `width`: the rays are a row-major grid that wide from one origin (a camera's pixels),
        cast in tiles (_cast_tiles) with the same results. `packet`: rays walked together
        where coherent (_cast; None: 32, 1: ray by ray), again with the same results."""
        if not len(self.kind):
            return
        tr = self.tree
        o2 = np.ascontiguousarray(o, dtype=np.float64).reshape(-1, 3)
        tree = (self._box, tr.left, tr.right, tr.start, tr.count)
        if width is not None and len(o2) == 1:
            _cast_tiles(o2, d, int(width), float(t_min), float(t_max), best, index, normal,
                        *tree, *self._prims, self._par_sphere, self._sphere)  # fmt: skip
        else:
            _cast(o2, d, float(t_min), float(t_max), best, index, normal, *tree, *self._prims,
                  _PACKET if packet is None else int(packet))  # fmt: skip


def _spheres(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """(centre, radius) rows of the spheres around boxes (lo, hi), the radius grown by 1e-9
    relative and absolute so that it holds the whole box whatever the rounding."""
    centre = 0.5 * (lo + hi)
    rad = 0.5 * np.linalg.norm(hi - lo, axis=1)
    rad = rad * (1 + 1e-9) + 1e-9 * (1 + np.abs(centre).max(axis=1, initial=0.0))
    return np.ascontiguousarray(np.hstack([centre, rad[:, None]]))


def _solid(ob) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Parameter row and bounds of one box, cylinder or sphere."""
    p = np.zeros((1, _WIDTH))
    c = np.asarray(ob.center, dtype=float)
    if isinstance(ob, Sphere):
        p[0, :4] = [*c, ob.radius]
        ext = np.full(3, float(ob.radius))
    else:
        rot = Rotation.from_euler("xyz", ob.rpy).as_matrix()
        if isinstance(ob, Box):
            h = 0.5 * np.asarray(ob.size, dtype=float)
            p[0, :15] = [*c, *h, *rot.ravel()]
            ext = np.abs(rot) @ h
        else:
            hl = 0.5 * float(ob.length)
            p[0, :14] = [*c, *rot.ravel(), ob.radius, hl]
            axis = rot[:, 2]
            ext = hl * np.abs(axis) + ob.radius * np.sqrt(np.maximum(0.0, 1.0 - axis**2))
    return p, (c - ext)[None], (c + ext)[None]


def _triangles(tri: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Parameter rows and bounds of a mesh's triangles, centred as BruteMesh centres them."""
    tri = np.asarray(tri, dtype=float)
    pts = tri.reshape(-1, 3)
    center = 0.5 * (pts.min(axis=0) + pts.max(axis=0))
    e1 = tri[:, 1] - tri[:, 0]
    e2 = tri[:, 2] - tri[:, 0]
    n = np.cross(e1, e2)
    norm = np.linalg.norm(n, axis=1, keepdims=True)
    unit_n = np.where(norm > 0, n / np.where(norm > 0, norm, 1.0), 0.0)
    c = np.broadcast_to(center, (len(tri), 3))
    p = np.concatenate([c, tri[:, 0] - center, e1, e2, n, unit_n], axis=1)
    return p, tri.min(axis=1), tri.max(axis=1)
