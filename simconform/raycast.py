"""Exact, vectorised ray casting against a `World`: the reference backend's geometry.

Every primitive is intersected analytically in float64, so the reference lidar has no
geometric error of its own and other engines can be measured against it:

- plane: infinite and two-sided; a ray lying in the plane misses it;
- box: slab method in the box frame;
- cylinder: capped; quadratic in the local xy plane intersected with the slab of the end caps;
- sphere: quadratic;
- mesh: float64 Möller–Trumbore per triangle.

Box, cylinder and sphere are closed solids: a ray whose origin is inside one hits its inside
surface (the exit point), as a lidar inside a hollow shell would. More generally a ray hits the
nearest surface at a distance >= `t_min`, so a solid entered before `t_min` returns its exit.

By default boxes, cylinders, spheres and mesh triangles are leaves of one BVH walked in
compiled code (simconform/bvhcast.py, docs/raycast.md): O(log objects) per ray, O(rays) memory.
`Scene(world, brute=True)` keeps the earlier path as the oracle: one bounding-sphere test of
all bounded objects against all rays (a matrix product, O(objects x rays) time and memory),
then the exact tests below on the surviving pairs, and BruteMesh for meshes. Both paths do
the same float64 arithmetic in the same order, so they agree to the last bit on analytic
primitives.

Length: about our ~400 lines, because `Scene` keeps every primitive's exact test next to the
others; they share the slab, root and `t_min` conventions above, which must not drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.spatial.transform import Rotation

from simconform.meshcast import BruteMesh
from simconform.slab import slab
from simconform.world import Box, Cylinder, Mesh, Plane, Sphere, World

# Origins within this distance (m) of their mean share one bounding-sphere test, with every
# bounding sphere inflated by the actual spread; a lidar sweep moves far less than this.
_SHARED_ORIGIN_SPREAD = 0.5
_BOX, _CYL, _SPH, _MESH = range(4)
_COLUMN = np.array([0, 3, 6])  # flat offsets of one column in a row-major 3x3 matrix


@dataclass
class Hits:
    """Nearest hit per ray."""

    dist: np.ndarray  # (N,) float64 distance along the unit ray; np.inf where no hit
    index: np.ndarray  # (N,) int64 index into world.objects of the first hit; -1 for none
    normal: np.ndarray  # (N, 3) float64 unit normal facing against the ray; NaN rows for misses


def _dot3(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise dot product summed left to right, as the BVH caster sums it (einsum's order
    depends on its SIMD path), so that the oracle and the BVH round alike."""
    return a[..., 0] * b[..., 0] + a[..., 1] * b[..., 1] + a[..., 2] * b[..., 2]


def _matvec(m: np.ndarray, v: np.ndarray) -> np.ndarray:
    """(P, 3, 3) @ (P, 3) row by row, summed left to right (see _dot3)."""
    return m[:, :, 0] * v[:, 0, None] + m[:, :, 1] * v[:, 1, None] + m[:, :, 2] * v[:, 2, None]


def _rot(rpy: tuple[float, float, float]) -> np.ndarray:
    return Rotation.from_euler("xyz", rpy).as_matrix()


def _stable_roots(b: np.ndarray, c: np.ndarray, a: np.ndarray | float = 1.0):
    """Roots of a t^2 + 2 b t + c = 0 as (lo, hi, real), without cancellation.

    Uses q = -(b + sign(b) sqrt(b^2 - a c)), roots q / a and c / q, so that an origin close to
    the surface still gets an accurate near root. Non-real roots come back as (inf, -inf).
    """
    disc = b * b - a * c
    real = disc >= 0
    sq = np.sqrt(np.where(real, disc, 0.0))
    q = -(b + np.copysign(sq, b))
    with np.errstate(divide="ignore", invalid="ignore"):
        ra = q / a
        rb = c / q
    # q == 0 only when b == 0 and c == 0 (tangent through the origin): both roots are 0 and
    # rb is NaN, which fmin/fmax skip.
    lo = np.where(real, np.fmin(ra, rb), np.inf)
    hi = np.where(real, np.fmax(ra, rb), -np.inf)
    return lo, hi, real


def _pick(tn: np.ndarray, tf: np.ndarray, t_min: float, t_max: float):
    """Nearest of the interval ends [tn, tf] at or beyond t_min; inf when none within t_max."""
    use_near = tn >= t_min
    t = np.where(use_near, tn, tf)
    ok = (tn <= tf) & (t >= t_min) & (t <= t_max)
    return np.where(ok, t, np.inf), use_near, ok


UNIT_SAMPLE = 64  # directions checked per cast: about every (N / 63)-th, and the last


def _check_unit(d: np.ndarray) -> None:
    """ValueError where a sample of the directions is not unit length (|d|^2 within 2e-6 of
    1): every test measures distance along the ray and the spheres' assumes |d| = 1, so
    unnormalised directions would give wrong hits silently. A sample, not every ray: a full
    check is a pass over the rays (1.4 ms a 640 x 480 frame with einsum, half of the frame's
    cast); the sample catches directions that were never normalised, the usual mistake, in
    about 6 us a call (2026-12-07)."""
    if not len(d):
        return
    if not _off_unit(np.concatenate([d[:: max(1, len(d) // (UNIT_SAMPLE - 1))], d[-1:]])).any():
        return
    i = int(np.argmax(_off_unit(d)))  # the first one refused
    raise ValueError(
        f"directions must be unit vectors: ray {i} {d[i].tolist()} has length "
        f"{np.linalg.norm(d[i]):.9g}"
    )


def _off_unit(d: np.ndarray) -> np.ndarray:
    """Per direction: |d|^2 farther than 2e-6 from 1 (or NaN)."""
    return ~(np.abs(np.einsum("ij,ij->i", d, d) - 1.0) <= 2e-6)


class Scene:
    """A World prepared for ray casting: per-primitive arrays built once, then `cast` many times."""

    def __init__(self, world: World, brute: bool = False) -> None:
        """brute: the bounding-sphere pre-test of every object against every ray (O(objects x
        rays)) and BruteMesh for meshes, instead of the BVH: the oracle the BVH is tested
        against."""
        self.world = world
        self._bvh = None
        planes = [(i, o) for i, o in enumerate(world.objects) if isinstance(o, Plane)]
        self._plane_index = np.array([i for i, _ in planes], dtype=np.int64)
        self._plane_n = np.array([o.normal for _, o in planes], dtype=float).reshape(-1, 3)
        self._plane_d = np.array(
            [np.dot(o.normal, o.point) for _, o in planes], dtype=float
        ).reshape(-1)

        self._slot_index = np.empty(0, dtype=np.int64)
        if not brute:
            if any(type(o) in (Box, Cylinder, Sphere, Mesh) for o in world.objects):
                from simconform.bvhworld import BVHCaster  # loads numba only when needed

                self._bvh = BVHCaster(world)
            return
        # Bounded objects sorted by type, so the pairs that survive the bounding-sphere test
        # (ordered by object) come out grouped by type as contiguous slices.
        order = {Box: _BOX, Cylinder: _CYL, Sphere: _SPH, Mesh: _MESH}
        bounded = sorted(
            ((order[type(o)], i, o) for i, o in enumerate(world.objects) if type(o) in order),
            key=lambda x: (x[0], x[1]),
        )
        kinds = np.array([k for k, _, _ in bounded], dtype=np.int64)
        self._slot_index = np.array([i for _, i, _ in bounded], dtype=np.int64)
        self._type_bounds = np.searchsorted(kinds, np.arange(5))
        self._slot_local = np.arange(len(bounded)) - self._type_bounds[kinds]

        boxes = [o for k, _, o in bounded if k == _BOX]
        self._box_c = np.array([b.center for b in boxes], dtype=float).reshape(-1, 3)
        self._box_h = 0.5 * np.array([b.size for b in boxes], dtype=float).reshape(-1, 3)
        self._box_r = np.array([_rot(b.rpy) for b in boxes]).reshape(-1, 3, 3)
        self._box_rt = np.ascontiguousarray(self._box_r.transpose(0, 2, 1))

        cyls = [o for k, _, o in bounded if k == _CYL]
        self._cyl_c = np.array([c.center for c in cyls], dtype=float).reshape(-1, 3)
        self._cyl_rad = np.array([c.radius for c in cyls], dtype=float)
        self._cyl_hl = 0.5 * np.array([c.length for c in cyls], dtype=float)
        self._cyl_r = np.array([_rot(c.rpy) for c in cyls]).reshape(-1, 3, 3)
        self._cyl_rt = np.ascontiguousarray(self._cyl_r.transpose(0, 2, 1))

        sphs = [o for k, _, o in bounded if k == _SPH]
        self._sph_c = np.array([s.center for s in sphs], dtype=float).reshape(-1, 3)
        self._sph_rad = np.array([s.radius for s in sphs], dtype=float)

        self._meshes = [BruteMesh(world.mesh_triangles(i)) for k, i, _ in bounded if k == _MESH]

        mesh_c = np.array([m.center for m in self._meshes], dtype=float).reshape(-1, 3)
        centers = np.concatenate([self._box_c, self._cyl_c, self._sph_c, mesh_c])
        radii = np.concatenate(
            [
                np.linalg.norm(self._box_h, axis=1),
                np.hypot(self._cyl_rad, self._cyl_hl),
                self._sph_rad,
                [m.radius for m in self._meshes],
            ]
        )
        self._b_center = np.ascontiguousarray(centers, dtype=float)
        # Slightly inflated, so that rounding in the pre-test never rejects a true hit.
        self._b_radius = radii * (1 + 1e-9) + 1e-9

    # ------------------------------------------------------------------ public API

    def cast(
        self,
        origins: np.ndarray,
        directions: np.ndarray,
        t_min: float = 0.0,
        t_max: float = np.inf,
        width: int | None = None,
        packet: int | None = None,
    ) -> Hits:
        """Nearest surface along each ray at a distance in [t_min, t_max].

        origins (N, 3) or (3,) shared by all rays; directions (N, 3) unit vectors in the map
        frame (a sample of them is checked: ValueError if one is not, `_check_unit`). The
        nearest surface at or beyond t_min counts; when it lies beyond t_max the ray misses
        (it is never replaced by a farther one). `width`: the rays form a
        row-major grid that wide (a camera's pixels), which lets rays from one origin be
        culled in tiles (bvhcast._cast_tiles); the results are the same. `packet`: how many
        neighbouring rays may walk the tree together where they are coherent (default 32;
        1 walks them one by one, for comparison; with `width` the tiles decide); the
        results are the same.
        """
        if not 0 <= t_min <= t_max:
            raise ValueError(f"need 0 <= t_min <= t_max, got t_min={t_min}, t_max={t_max}")
        d = np.ascontiguousarray(directions, dtype=np.float64).reshape(-1, 3)
        n = len(d)
        _check_unit(d)
        o = np.asarray(origins, dtype=np.float64)
        o = o.reshape(3) if o.size == 3 else np.ascontiguousarray(np.broadcast_to(o, (n, 3)))
        best = np.empty(n)
        index = np.empty(n, dtype=np.int64)
        normal = np.empty((n, 3))
        if n == 0:
            return Hits(best, index, normal)

        self._cast_planes(o, d, t_min, t_max, best, index, normal)
        if self._bvh is not None:
            self._bvh.cast(o, d, t_min, t_max, best, index, normal, width, packet)
        elif len(self._slot_index):
            self._cast_bounded(o, d, t_min, t_max, best, index, normal)
        return Hits(best, index, normal)

    def ground_height(self, x: np.ndarray, y: np.ndarray, z_top: float = 1000.0) -> np.ndarray:
        """z of the first surface below (x, y, z_top), NaN where there is none.

        Puts 2D waypoint trajectories onto the ground plane and the ramps.
        """
        x, y = np.broadcast_arrays(np.asarray(x, dtype=float), np.asarray(y, dtype=float))
        shape = x.shape
        origins = np.stack([x.ravel(), y.ravel(), np.full(x.size, float(z_top))], axis=1)
        down = np.broadcast_to(np.array([0.0, 0.0, -1.0]), origins.shape)
        hits = self.cast(origins, down)
        return np.where(np.isfinite(hits.dist), z_top - hits.dist, np.nan).reshape(shape)

    # ------------------------------------------------------------------ planes

    def _cast_planes(self, o, d, t_min, t_max, best, index, normal) -> None:
        """Sets best/index/normal from the planes (simconform/bvhcast.py cast_planes): inf, -1
        and NaN where none is hit; ties go to the first plane."""
        from simconform.bvhcast import cast_planes

        o2 = np.ascontiguousarray(o, dtype=np.float64).reshape(-1, 3)
        pn, pd, pobj = self._plane_n, self._plane_d, self._plane_index
        cast_planes(o2, d, float(t_min), float(t_max), pn, pd, pobj, best, index, normal)

    # ------------------------------------------------------------------ bounded objects

    def _candidates(self, o, d, t_min, t_max):
        """(slot, ray) pairs whose ray passes through the slot's bounding sphere in range.

        Pairs come out sorted by slot, hence grouped by primitive type.
        """
        c, r = self._b_center, self._b_radius
        if o.ndim == 1:
            o0, spread = o, 0.0
        else:
            o0 = o.mean(axis=0)
            dev = o - o0
            spread = float(np.sqrt(np.max(np.einsum("ni,ni->n", dev, dev))))
        if spread <= _SHARED_ORIGIN_SPREAD:
            # A ray from o0 + delta through a sphere (c, R) has its parallel twin from o0
            # within R + |delta| of c at the same t, so one product tests all rays: from
            # outside, the twin meets the sphere iff (c - o0) . d >= sqrt(|c - o0|^2 - R^2).
            rp = r + spread
            oc = c - o0
            oc2 = np.einsum("ki,ki->k", oc, oc)
            dist = np.sqrt(oc2)
            keep = np.flatnonzero((dist - rp <= t_max) & (dist + rp >= t_min))
            if not len(keep):
                return keep, keep
            s = oc2[keep] - rp[keep] ** 2
            # float32 halves the cost of the product; its error (< 1e-6 |oc|) is allowed for.
            thr = np.where(s > 0, np.sqrt(np.maximum(s, 0.0)) - 1e-6 * (dist[keep] + 1), -np.inf)
            tca = oc[keep].astype(np.float32) @ d.T.astype(np.float32)  # (K', N)
            flat = np.flatnonzero(tca >= thr.astype(np.float32)[:, None])
            rows, rays = np.divmod(flat, len(d))
            return keep[rows], rays
        # Origins far apart (e.g. ground_height): test every pair, relative to o0 for accuracy.
        c, o = c - o0, o - o0
        cc = np.einsum("ki,ki->k", c, c)
        oo = np.einsum("ni,ni->n", o, o)
        tca = c @ d.T - np.einsum("ni,ni->n", o, d)
        oc2 = cc[:, None] - 2.0 * (c @ o.T) + oo
        slack = 1e-9 * (cc + float(oo.max()) + 1)  # rounding of oc2 - tca^2
        mask = oc2 - tca * tca <= (r * r + slack)[:, None]
        mask &= tca >= t_min - r[:, None]
        mask &= tca <= t_max + r[:, None]
        return np.divmod(np.flatnonzero(mask), len(d))

    def _cast_bounded(self, o, d, t_min, t_max, best, index, normal) -> None:
        slot, ray = self._candidates(o, d, t_min, t_max)
        if not len(slot):
            return
        pd = np.take(d, ray, axis=0)
        po = o if o.ndim == 1 else np.take(o, ray, axis=0)
        local = np.take(self._slot_local, slot)
        cuts = np.searchsorted(slot, self._type_bounds)
        tests = (self._boxes, self._cylinders, self._spheres, self._mesh_pairs)
        ts, ns = [], []
        for kind, test in enumerate(tests):
            a, b = cuts[kind], cuts[kind + 1]
            if a == b:
                continue
            t, nrm = test(po if o.ndim == 1 else po[a:b], pd[a:b], local[a:b], t_min, t_max)
            ts.append(t)
            ns.append(nrm)
        t = np.concatenate(ts) if len(ts) > 1 else ts[0]
        hit = np.flatnonzero(t < np.inf)
        if not len(hit):
            return
        t, ray = np.take(t, hit), np.take(ray, hit)
        np.minimum.at(best, ray, t)
        win = np.flatnonzero(t <= np.take(best, ray))
        pairs = np.take(hit, win)
        ray = np.take(ray, win)
        index[ray] = np.take(self._slot_index, np.take(slot, pairs))
        nrm = np.take(np.concatenate(ns) if len(ns) > 1 else ns[0], pairs, axis=0)
        # Face the ray: for an exit hit from inside a solid this is the inward normal.
        flip = _dot3(nrm, np.take(pd, pairs, axis=0)) > 0
        normal[ray] = np.where(flip[:, None], -nrm, nrm)

    @staticmethod
    def _frame(o, d, j, rot_t, center):
        """Pair origins and directions in their primitive's frame.

        A shared origin (3,) is transformed once per primitive rather than once per pair.
        """
        rt = np.take(rot_t, j, axis=0)
        if o.ndim == 1:
            ol = np.take(_matvec(rot_t, o - center), j, axis=0)
        else:
            ol = _matvec(rt, o - np.take(center, j, axis=0))
        return ol, _matvec(rt, d)

    def _boxes(self, o, d, j, t_min, t_max):
        ol, dl = self._frame(o, d, j, self._box_rt, self._box_c)
        lo, hi = slab(ol, dl, np.take(self._box_h, j, axis=0))
        ax_lo = np.argmax(lo, axis=1)
        ax_hi = np.argmin(hi, axis=1)
        tn = np.take_along_axis(lo, ax_lo[:, None], axis=1)[:, 0]
        tf = np.take_along_axis(hi, ax_hi[:, None], axis=1)[:, 0]
        t, use_near, _ = _pick(tn, tf, t_min, t_max)
        axis = np.where(use_near, ax_lo, ax_hi)
        sign = np.sign(np.take_along_axis(dl, axis[:, None], axis=1))
        # Column `axis` of the box rotation (flattened row-major) is that face's map normal.
        col = np.take(self._box_r.reshape(-1), (9 * j + axis)[:, None] + _COLUMN)
        return t, col * -sign

    def _cylinders(self, o, d, j, t_min, t_max):
        ol, dl = self._frame(o, d, j, self._cyl_rt, self._cyl_c)
        rad = np.take(self._cyl_rad, j)
        ox, oy, oz = ol.T
        dx, dy, dz = dl.T
        a = dx * dx + dy * dy
        b = ox * dx + oy * dy
        c = ox * ox + oy * oy - rad * rad
        axial = a == 0
        r0, r1, _ = _stable_roots(b, c, np.where(axial, 1.0, a))
        # Parallel to the axis: inside the infinite cylinder for all t, or never.
        r0 = np.where(axial, np.where(c <= 0, -np.inf, np.inf), r0)
        r1 = np.where(axial, np.where(c <= 0, np.inf, -np.inf), r1)
        z0, z1 = slab(oz, dz, np.take(self._cyl_hl, j))
        tn = np.maximum(r0, z0)
        tf = np.minimum(r1, z1)
        t, use_near, ok = _pick(tn, tf, t_min, t_max)
        radial = np.where(use_near, r0 >= z0, r1 <= z1)
        tt = np.where(ok, t, 0.0)
        zero = np.zeros_like(tt)
        nl = np.where(
            radial[:, None],
            np.stack([(ox + tt * dx) / rad, (oy + tt * dy) / rad, zero], axis=1),
            np.stack([zero, zero, np.sign(oz + tt * dz)], axis=1),
        )
        return t, _matvec(np.take(self._cyl_r, j, axis=0), nl)

    def _spheres(self, o, d, j, t_min, t_max):
        rad = np.take(self._sph_rad, j)
        if o.ndim == 1:
            rel = o - self._sph_c
            oc = np.take(rel, j, axis=0)
            c = np.take(_dot3(rel, rel) - self._sph_rad**2, j)
        else:
            oc = o - np.take(self._sph_c, j, axis=0)
            c = _dot3(oc, oc) - rad * rad
        b = _dot3(oc, d)
        tn, tf, _ = _stable_roots(b, c)
        t, _, ok = _pick(tn, tf, t_min, t_max)
        tt = np.where(ok, t, 0.0)
        return t, (oc + tt[:, None] * d) / rad[:, None]

    def _mesh_pairs(self, o, d, j, t_min, t_max):
        if len(self._meshes) == 1:
            return self._meshes[0].cast(o, d, t_min, t_max)
        t = np.full(len(j), np.inf)
        nrm = np.full((len(j), 3), np.nan)
        for m, mesh in enumerate(self._meshes):
            sel = np.flatnonzero(j == m)
            if len(sel):
                om = o if o.ndim == 1 else o[sel]
                t[sel], nrm[sel] = mesh.cast(om, d[sel], t_min, t_max)
        return t, nrm
