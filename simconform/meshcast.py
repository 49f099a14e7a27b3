"""Exact ray casting against one triangle mesh: Embree proposes, float64 decides.

Testing every ray against every triangle (`BruteMesh`, kept as the oracle and the fallback)
costs rays x triangles: 384 rays/s on a 100,000-triangle terrain. Embree's BVH finds each
ray's nearest triangle in float32 instead; the range is then recomputed in float64 from the
original ray and the original triangle, so it stays as exact as the brute force. Where float32
could have picked the wrong triangle, more is tested (docs/raycast.md says why this is enough):

- a hit whose float64 point lies within the float32 error of its triangle's edges, scaled by
  the incidence angle (edges, vertices, grazing rays), or whose float64 test fails: every
  triangle sharing a vertex with it is re-tested in float64 and the nearest valid one wins;
  when none is valid, the brute force decides that ray;
- a float32 ray that slips past an open edge hits a thin guard quad along it (brute force);
- a miss that crosses the bounding box: three rays offset sideways by a few float32 errors are
  cast too; if any of them hits, the ray passed within float32 error of the mesh and the brute
  force decides it (over the triangles whose bounding sphere it crosses).

Known gap: a float32 ray passing over a ridge or a sharp vertex that the float64 ray touches
exactly can report a farther triangle. `Scene` therefore no longer casts meshes here: their
triangles are leaves of its float64 BVH (simconform/bvhcast.py), where these rays agree with
BruteMesh (tests/test_meshcast.py). MeshCaster stays as the Embree-based comparison of
bench/raycast_mesh.py; BruteMesh is `Scene(world, brute=True)`'s mesh oracle.

`embreex` is imported when the first mesh is cast, so worlds without meshes never load it. It
has wheels for x86-64 only; elsewhere (or uninstalled) `mesh_caster` returns the brute force,
exact and slow, and `simconform doctor` says so.
"""

from __future__ import annotations

from importlib.util import find_spec

import numpy as np

from simconform.slab import box_pad, slab

# Upper bound on ray x triangle pairs held in memory at once by the brute-force test.
_PAIR_CHUNK = 1 << 20
# Relative slack on barycentric bounds, so rays through a shared edge hit one of the triangles.
_BARY_EPS = 1e-12
# Float32 error of one Embree test, relative to the scene's scale (|origin| + mesh radius):
# float32 rounding of origin, direction and vertices is 2^-24 each; 64 ulps covers those and
# Embree's own arithmetic with a wide margin.
_F32_SLACK = 64.0 * 2.0**-24
# Sideways offset of the three probe rays cast for a miss, in units of that error: at least
# one of three offsets 120 degrees apart moves half of it towards any edge, past the error of
# both the ray and the probe.
_PROBE = 5.0
_DEVICE = None  # the process's Embree device, created with the first mesh scene


def _cross(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cross product of (P, 3) or (3,) with (P, 3); cheaper than np.cross for small P."""
    a0, a1, a2 = a[..., 0], a[..., 1], a[..., 2]
    b0, b1, b2 = b[:, 0], b[:, 1], b[:, 2]
    return np.stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], axis=1)


class BruteMesh:
    """Every ray that crosses the bounding box against every triangle: the oracle, and the
    fallback for doubtful rays.

    Triangles are re-centred on their bounding box for accuracy far from the origin.
    Möller–Trumbore is rewritten with scalar triple products so that, per chunk of rays, all of
    its determinants come from one (R, 9) x (9, 4T) matrix product of ray terms
    [o x d, d, o] with per-triangle terms.
    """

    def __init__(self, tri: np.ndarray) -> None:
        tri = np.asarray(tri, dtype=float)
        lo, hi = tri.reshape(-1, 3).min(axis=0), tri.reshape(-1, 3).max(axis=0)
        self.center = 0.5 * (lo + hi)
        self.half = 0.5 * (hi - lo)
        # The triangle terms, kept for MeshCaster's float64 re-intersection.
        self.v0 = v0 = tri[:, 0] - self.center
        self.e1 = e1 = tri[:, 1] - tri[:, 0]
        self.e2 = e2 = tri[:, 2] - tri[:, 0]
        self.n = n = np.cross(e1, e2)
        self.radius = float(np.max(np.linalg.norm(tri.reshape(-1, 3) - self.center, axis=1)))
        self.n_tri = len(tri)
        # Each triangle's bounds grown by half the BVH's padding (bvhcast._on_box): a hit
        # outside them is rounding noise of a ray lying in the triangle's plane.
        t_lo, t_hi = tri.min(axis=1), tri.max(axis=1)
        pad = 0.5 * box_pad(t_lo, t_hi)
        self.box_lo, self.box_hi = (t_lo - pad[:, None]).T, (t_hi + pad[:, None]).T  # (3, T)
        zero = np.zeros_like(n)
        # Rows multiply [o x d, d, o]; columns: u*det, v*det, det, t*det (+ t_off).
        w_u = np.concatenate([e2, -np.cross(e2, v0), zero], axis=1)
        w_v = np.concatenate([-e1, -np.cross(v0, e1), zero], axis=1)
        w_det = np.concatenate([zero, -n, zero], axis=1)
        w_t = np.concatenate([zero, zero, n], axis=1)
        self.w = np.ascontiguousarray(np.concatenate([w_u, w_v, w_det, w_t]).T)  # (9, 4T)
        self.t_off = -np.einsum("ti,ti->t", v0, n)
        norm = np.linalg.norm(n, axis=1, keepdims=True)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            self.unit_n = np.where(norm > 0, n / norm, 0.0)

    def cast(self, o, d, t_min, t_max):
        """Nearest triangle hit per ray in [t_min, t_max]: (t with inf for none, normal).

        o is (3,) shared by all rays or (P, 3), in the map frame.
        """
        t = np.full(len(d), np.inf)
        nrm = np.full((len(d), 3), np.nan)
        o = o - self.center
        # Bounding-box pre-test: only rays that cross the box within range go on.
        lo, hi = slab(np.broadcast_to(o, d.shape), d, self.half * (1 + 1e-9) + 1e-9)
        tn, tf = lo.max(axis=1), hi.min(axis=1)
        cand = np.flatnonzero((tn <= tf) & (tf >= t_min) & (tn <= t_max))
        step = max(1, _PAIR_CHUNK // self.n_tri)
        nt = self.n_tri
        for s in range(0, len(cand), step):
            idx = cand[s : s + step]
            di = np.take(d, idx, axis=0)
            oi = np.broadcast_to(o, di.shape) if o.ndim == 1 else np.take(o, idx, axis=0)
            prod = np.concatenate([_cross(oi, di), di, oi], axis=1) @ self.w
            udet, vdet, det = prod[:, :nt], prod[:, nt : 2 * nt], prod[:, 2 * nt : 3 * nt]
            tdet = prod[:, 3 * nt :] + self.t_off
            sgn = np.sign(det)
            ad = np.abs(det)
            us, vs = udet * sgn, vdet * sgn
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                tt = tdet / det
            eps = _BARY_EPS * ad
            ok = (ad > 0) & (us >= -eps) & (vs >= -eps) & (us + vs <= ad + eps)
            ok &= (tt >= t_min) & (tt <= t_max)
            with np.errstate(invalid="ignore", over="ignore"):
                for ax in range(3):  # the hit point in the triangle's grown bounds
                    x = (oi[:, ax : ax + 1] + self.center[ax]) + tt * di[:, ax : ax + 1]
                    ok &= (x >= self.box_lo[ax]) & (x <= self.box_hi[ax])
            tt = np.where(ok, tt, np.inf)
            k = np.argmin(tt, axis=1)
            tk = np.take_along_axis(tt, k[:, None], axis=1)[:, 0]
            t[idx] = tk
            nrm[idx] = np.where((tk < np.inf)[:, None], np.take(self.unit_n, k, axis=0), np.nan)
        return t, nrm


def _guards(pts: np.ndarray, vid: np.ndarray, width: float) -> tuple[np.ndarray, np.ndarray]:
    """Thin quads along the mesh's open edges, in the triangles' planes, outwards by `width`.

    A float32 ray that passes just outside an open edge it crosses in float64 hits the guard
    instead of missing the triangle (or of hitting one behind it): the ray is then decided by
    the brute force. Guard ends reach `width` past the edge's vertices too. `vid` holds the
    triangles of non-zero area only: a degenerate one lying on an edge does not close it.
    """
    a_i, b_i, c_i = vid[:, [0, 1, 2]].T.ravel(), vid[:, [1, 2, 0]].T.ravel(), vid[:, [2, 0, 1]].T
    c_i = c_i.ravel()
    key = np.sort(np.stack([a_i, b_i], axis=1), axis=1)
    _, inv, count = np.unique(key, axis=0, return_inverse=True, return_counts=True)
    open_ = np.flatnonzero(count[inv.ravel()] == 1)
    a, b, c = pts[a_i[open_]], pts[b_i[open_]], pts[c_i[open_]]
    e = b - a
    le = np.linalg.norm(e, axis=1, keepdims=True)
    ok = le[:, 0] > 0
    a, b, c, e, le = a[ok], b[ok], c[ok], e[ok], le[ok]
    eh = e / le
    out = a - c
    out -= np.einsum("pi,pi->p", out, eh)[:, None] * eh
    norm = np.linalg.norm(out, axis=1, keepdims=True)
    out = np.where(norm > 0, out / np.where(norm > 0, norm, 1.0), 0.0)
    a0, b0 = a - width * eh, b + width * eh
    quad = np.stack([a0, b0, b0 + width * out, a0 + width * out], axis=1).reshape(-1, 3)
    base = 4 * np.arange(len(a))[:, None]
    faces = np.concatenate([base + np.array([0, 1, 2]), base + np.array([0, 2, 3])])
    return quad, faces


class MeshCaster:
    """One mesh for `Scene`: Embree's float32 BVH picks, float64 Möller–Trumbore measures."""

    def __init__(self, tri: np.ndarray) -> None:
        self.brute = b = BruteMesh(tri)
        self.center, self.radius = b.center, b.radius
        tri = np.asarray(tri, dtype=float)
        self._v0, self._e1, self._e2, n = b.v0, b.e1, b.e2, b.n
        nn = np.linalg.norm(n, axis=1)
        self._nn = nn
        edges = np.stack([self._e2, self._e1, self._e2 - self._e1], axis=1)  # opposite v1, v2, v0
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            # Altitudes: distance from each edge to the opposite vertex (0 for degenerate ones).
            self._alt = np.nan_to_num(nn[:, None] / np.linalg.norm(edges, axis=2))
        inv_n = np.where(nn > 0, 1.0 / np.where(nn > 0, nn, 1.0), 0.0)
        self._pack = np.concatenate(
            [self._v0, self._e1, self._e2, inv_n[:, None], self._alt, n], axis=1
        )  # (T, 16): one gather per ray in `_exact`
        # Float32 error of a position in a ray started near the mesh (see `cast`), in metres.
        self._tol = _F32_SLACK * (4.0 * self.radius + 1e-3)
        self.n_tri = len(tri)
        self._scene = None
        self._tri = tri

    # ------------------------------------------------------------------ set-up (lazy)

    def _build(self) -> None:
        """Embree scene and vertex -> triangle adjacency, on the first cast."""
        global _DEVICE
        from embreex import mesh_construction, rtcore, rtcore_scene

        if _DEVICE is None:  # one device per process: each holds its own threads
            _DEVICE = rtcore.EmbreeDevice()

        pts, vid = np.unique(self._tri.reshape(-1, 3), axis=0, return_inverse=True)
        self._vid = vid.reshape(-1, 3)
        order = np.argsort(vid, kind="stable")
        self._star = order // 3  # triangles around each vertex, vertex by vertex
        self._star_start = np.searchsorted(vid[order], np.arange(len(pts) + 1))
        scene = rtcore_scene.EmbreeScene(_DEVICE, robust=True)
        gv, gf = _guards(pts - self.center, self._vid[self._nn > 0], _PROBE * self._tol)
        verts = np.ascontiguousarray(np.concatenate([pts - self.center, gv]), dtype=np.float32)
        faces = np.ascontiguousarray(np.concatenate([self._vid, gf + len(pts)]), dtype=np.int32)
        self._geometry = mesh_construction.TriangleMesh(scene, verts, faces)
        self._scene = scene
        cen = self._tri.mean(axis=1)
        self._cen = cen - self.center
        self._cen_r = np.linalg.norm(self._tri - cen[:, None], axis=2).max(axis=1)

    def _embree(self, o32, d32, far32) -> np.ndarray:
        return self._scene.run(o32, d32, dists=far32.copy(), query="INTERSECT")

    # ------------------------------------------------------------------ float64 tests

    def _exact(self, o, d, k, t_min, t_max):
        """Float64 Möller–Trumbore of rays (P, 3) against triangles k (P,): t (inf if none), margin.

        margin: distance of the hit point from the triangle's nearest edge times the cosine of
        incidence, i.e. how far the ray may move sideways and still hit this triangle.
        Written per component: this runs on every ray, and numpy's small-axis reductions and
        stacks would cost more than the arithmetic.
        """
        g = np.take(self._pack, k, axis=0).T  # rows: v0, e1, e2, 1/|n|, altitudes, n
        dx, dy, dz = d.T
        ox, oy, oz = (o - g[0:3].T).T if o.ndim == 2 else (o[:, None] - g[0:3])
        ax, ay, az, bx, by, bz = g[3:9]
        px, py, pz = dy * bz - dz * by, dz * bx - dx * bz, dx * by - dy * bx  # d x e2
        # det = e1 . (d x e2) = -d . n, from the stored normal as in BruteMesh: exactly 0 for a
        # degenerate triangle, whatever the rounding of the triple product.
        det = -(dx * g[13] + dy * g[14] + dz * g[15])
        qx, qy, qz = oy * az - oz * ay, oz * ax - ox * az, ox * ay - oy * ax  # s x e1
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            inv = 1.0 / det
            u = (ox * px + oy * py + oz * pz) * inv
            v = (dx * qx + dy * qy + dz * qz) * inv
            t = (bx * qx + by * qy + bz * qz) * inv
            w = 1.0 - u - v
            eps = _BARY_EPS
            ok = (det != 0) & (u >= -eps) & (v >= -eps) & (w >= -eps)
            ok &= (t >= t_min) & (t <= t_max)
            margin = np.minimum(np.minimum(u * g[10], v * g[11]), w * g[12])
            margin *= np.abs(det) * g[9]  # cosine of incidence: |d . n| / |n|
        return np.where(ok, t, np.inf), np.where(ok, margin, -1.0)

    def _neighbours(self, o, d, k, t_min, t_max):
        """Nearest float64 hit among the triangles sharing a vertex with k: (t, triangle)."""
        verts = self._vid[k]  # (R, 3)
        lo, hi = self._star_start[verts], self._star_start[verts + 1]
        count = (hi - lo).ravel()
        ray = np.repeat(np.repeat(np.arange(len(k)), 3), count)
        start = np.repeat(lo.ravel() - np.cumsum(count) + count, count)
        tri = self._star[start + np.arange(count.sum())]
        oo = o if o.ndim == 1 else o[ray]
        t, _ = self._exact(np.broadcast_to(oo, (len(ray), 3)), d[ray], tri, t_min, t_max)
        best = np.full(len(k), np.inf)
        np.minimum.at(best, ray, t)
        win = np.flatnonzero((t == best[ray]) & (t < np.inf))
        pick = np.full(len(k), -1, dtype=np.int64)
        pick[ray[win]] = tri[win]
        return best, pick

    # ------------------------------------------------------------------ cast

    def cast(self, o, d, t_min, t_max):
        """Nearest triangle hit per ray in [t_min, t_max]: (t with inf for none, normal).

        o is (3,) shared by all rays or (P, 3), in the map frame; d (P, 3) unit vectors.
        """
        if self._scene is None:
            self._build()
        n = len(d)
        o = o - self.center
        # Float32 rays start just before the mesh's bounding sphere (or t_min), so their
        # coordinates, and hence their rounding, stay within the mesh's own scale.
        tca = -(d @ o) if o.ndim == 1 else -np.einsum("pi,pi->p", d, o)
        tol = self._tol
        shift = np.maximum(t_min, tca - self.radius) - tol
        o_shift = o + shift[:, None] * d
        o32 = np.ascontiguousarray(o_shift, dtype=np.float32)
        d32 = np.ascontiguousarray(d, dtype=np.float32)
        far = np.minimum(t_max, tca + self.radius) - shift + tol
        far32 = np.ascontiguousarray(np.maximum(far, 0.0), dtype=np.float32)
        prim = self._embree(o32, d32, far32).astype(np.int64)

        t = np.full(n, np.inf)
        k = np.full(n, -1, dtype=np.int64)
        brute = []
        brute.append(np.flatnonzero(prim >= self.n_tri))  # guard hits: near an open edge
        hit = np.flatnonzero((prim >= 0) & (prim < self.n_tri))
        if len(hit):
            oh = o if o.ndim == 1 else o[hit]
            th, margin = self._exact(
                np.broadcast_to(oh, (len(hit), 3)), d[hit], prim[hit], t_min, t_max
            )
            sure = margin > tol
            t[hit[sure]], k[hit[sure]] = th[sure], prim[hit[sure]]
            doubt = hit[~sure]
            if len(doubt):
                od = o if o.ndim == 1 else o[doubt]
                tn, kn = self._neighbours(od, d[doubt], prim[doubt], t_min, t_max)
                found = kn >= 0
                t[doubt[found]], k[doubt[found]] = tn[found], kn[found]
                brute.append(doubt[~found])
        miss = np.flatnonzero(prim < 0)
        miss = miss[self._in_box(o, d, miss, tol, t_min, t_max)]
        if len(miss):
            brute.append(miss[self._probe(o32, d, far32, miss, tol)])
        idx = np.concatenate(brute) if brute else np.empty(0, dtype=np.int64)
        nrm = np.full((n, 3), np.nan)
        found = np.flatnonzero(k >= 0)
        nrm[found] = self.brute.unit_n[k[found]]
        if len(idx):
            t[idx], nrm[idx] = self._fallback(o if o.ndim == 1 else o[idx], d[idx], t_min, t_max)
        return t, nrm

    def _fallback(self, o, d, t_min, t_max):
        """The brute force for doubtful rays, over the triangles whose bounding sphere they cross.

        o is centred. The pre-test is conservative (spheres grown by the float32 error), so
        the result is the brute force's on the whole mesh.
        """
        r = self._cen_r + self._tol
        r2 = r * r
        keep = []
        groups = [(o, np.arange(len(d)))] if o.ndim == 1 else [(oi, [i]) for i, oi in enumerate(o)]
        for oi, rays in groups:
            oc = self._cen - oi  # (T, 3)
            oc2 = np.einsum("ti,ti->t", oc, oc)
            step = max(1, (1 << 21) // self.n_tri)  # (T, R) temporaries of at most 16 MB
            for s in range(0, len(rays), step):
                tc = oc @ d[rays[s : s + step]].T  # (T, R): one BLAS product
                near = (oc2[:, None] - tc * tc <= r2[:, None]) & (tc >= t_min - r[:, None])
                near &= tc <= t_max + r[:, None]
                keep.append(np.flatnonzero(near.any(axis=1)))
        sub = np.unique(np.concatenate(keep))
        if not len(sub):
            return np.full(len(d), np.inf), np.full((len(d), 3), np.nan)
        brute = BruteMesh(self._tri[sub])
        return brute.cast(o + self.center, d, t_min, t_max)

    def _in_box(self, o, d, miss, tol, t_min, t_max) -> np.ndarray:
        """Mask over `miss`: rays that cross the mesh's bounding box, grown by the probe step."""
        om = o if o.ndim == 1 else o[miss]
        lo, hi = slab(
            np.broadcast_to(om, (len(miss), 3)), d[miss], self.brute.half + 2 * _PROBE * tol
        )
        tn, tf = lo.max(axis=1, initial=-np.inf), hi.min(axis=1, initial=np.inf)
        return (tn <= tf) & (tf >= t_min - tol) & (tn <= t_max + tol)

    def _probe(self, o32, d, far32, miss, tol) -> np.ndarray:
        """Mask over `miss`: rays with a probe offset sideways by _PROBE x tol that hits."""
        dm = d[miss]
        axis = np.eye(3)[np.argmin(np.abs(dm), axis=1)]
        u = _cross(dm, axis)
        u /= np.linalg.norm(u, axis=1, keepdims=True)
        w = _cross(dm, u)
        step = _PROBE * tol
        near = np.zeros(len(miss), dtype=bool)
        d32, f32 = np.ascontiguousarray(d[miss], dtype=np.float32), far32[miss]
        for a in (0.0, 2 * np.pi / 3, 4 * np.pi / 3):
            off = (np.cos(a) * u + np.sin(a) * w) * step
            op = np.ascontiguousarray(o32[miss] + off, dtype=np.float32)
            near |= self._embree(op, d32, f32) >= 0
        return near


def mesh_caster(tri: np.ndarray) -> MeshCaster | BruteMesh:
    """Embree with the float64 re-test where `embreex` is installed; the brute force elsewhere."""
    return MeshCaster(tri) if find_spec("embreex") is not None else BruteMesh(tri)
