"""Exact float64 ray casting of bounded primitives through a BVH (simconform/bvh.py).

Boxes, capped cylinders, spheres and the triangles of every mesh are leaves of one tree; each
ray walks it nearest child first and skips every node that starts beyond its nearest hit so
far, so a ray costs about log(primitives) node tests and a few exact tests, and a scan holds
O(rays) memory. The exact tests repeat `Scene`'s brute-force arithmetic (simconform/raycast.py,
and `MeshCaster._exact` for triangles) operation for operation, with the same conventions:
a distance >= t_min counts, a closed solid entered before t_min returns its exit, the nearest
surface beyond t_max is a miss, normals face the ray. Equal distances go to the primitive
the brute force would keep (the later object; within a mesh the first triangle), so both
report the same object.

One compiled entry point (`_cast`) with one signature: origins always come as (M, 3), M = 1
for a shared origin, so numba compiles (or loads from its cache) a single specialisation.
It walks coherent packets of 32 neighbouring rays (a lidar's) together, one vectorised box
test for all of them a node, and other rays one by one. A camera's pixels (one origin, a grid
of rays) go through `_cast_tiles`, which culls the tree once per 16 x 16 tile. Both give the
one-by-one walk's results bit for bit (docs/raycast.md has the figures). The world's objects
become the tree's leaves in simconform/bvhworld.py.

Length: about 550 lines, because the exact primitive tests, the walks and the tiled cast
share inlined helpers that must sit in one module: numba's cache notices a change to the
module of the function it compiled, not to a callee inlined from another one.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_BOX, _CYL, _SPH, _TRI = range(4)
_WIDTH = 18  # float64 parameters per primitive (the triangle's need the most)
_TIE = 1 << 31  # priority units per object: triangles of one mesh rank below it
_JIT = {"cache": True, "nogil": True, "error_model": "numpy"}


@njit(**_JIT, inline="always")
def _pick(tn, tf, t_min, t_max):
    """As raycast._pick: (t or inf, use_near)."""
    use_near = tn >= t_min
    t = tn if use_near else tf
    if tn <= tf and t >= t_min and t <= t_max:
        return t, use_near
    return np.inf, use_near


@njit(**_JIT, inline="always")
def _slab(o, d, h):
    """As slab.slab for one axis: (entry, exit)."""
    if abs(d) < 1e-300:
        if abs(o) <= h:
            return -np.inf, np.inf
        return np.inf, -np.inf
    inv = 1.0 / d
    t1 = (-h - o) * inv
    t2 = (h - o) * inv
    return min(t1, t2), max(t1, t2)


@njit(**_JIT, inline="always")
def _fmin(a, b):
    return b if a != a else (a if b != b else min(a, b))


@njit(**_JIT, inline="always")
def _fmax(a, b):
    return b if a != a else (a if b != b else max(a, b))


@njit(**_JIT, inline="always")
def _roots(b, c, a):
    """As raycast._stable_roots: (lo, hi) of a t^2 + 2 b t + c = 0, (inf, -inf) if not real."""
    disc = b * b - a * c
    if not disc >= 0:
        return np.inf, -np.inf
    q = -(b + np.copysign(np.sqrt(disc), b))
    ra = q / a
    rb = c / q
    return _fmin(ra, rb), _fmax(ra, rb)


@njit(**_JIT, inline="always")
def _local(p, w0, w1, w2):
    """R^T w for the row-major rotation stored at p[0:9]."""
    return (
        p[0] * w0 + p[3] * w1 + p[6] * w2,
        p[1] * w0 + p[4] * w1 + p[7] * w2,
        p[2] * w0 + p[5] * w1 + p[8] * w2,
    )


@njit(**_JIT, inline="always")
def _hit(k, p, ox, oy, oz, dx, dy, dz, t_min, t_max):
    """Exact test of one primitive (kind k, parameters p): (t or inf, normal not yet faced)."""
    if k == _BOX:  # p: centre, half sizes, rotation
        r = p[6:15]
        lx, ly, lz = _local(r, ox - p[0], oy - p[1], oz - p[2])
        ex, ey, ez = _local(r, dx, dy, dz)
        lo0, hi0 = _slab(lx, ex, p[3])
        lo1, hi1 = _slab(ly, ey, p[4])
        lo2, hi2 = _slab(lz, ez, p[5])
        a_lo, tn = 0, lo0
        if lo1 > tn:
            a_lo, tn = 1, lo1
        if lo2 > tn:
            a_lo, tn = 2, lo2
        a_hi, tf = 0, hi0
        if hi1 < tf:
            a_hi, tf = 1, hi1
        if hi2 < tf:
            a_hi, tf = 2, hi2
        t, use_near = _pick(tn, tf, t_min, t_max)
        axis = a_lo if use_near else a_hi
        s = -np.sign(ex if axis == 0 else (ey if axis == 1 else ez))
        return t, r[axis] * s, r[3 + axis] * s, r[6 + axis] * s
    if k == _CYL:  # p: centre, rotation, radius, half length
        r = p[3:12]
        rad = p[12]
        lx, ly, lz = _local(r, ox - p[0], oy - p[1], oz - p[2])
        ex, ey, ez = _local(r, dx, dy, dz)
        a = ex * ex + ey * ey
        b = lx * ex + ly * ey
        c = lx * lx + ly * ly - rad * rad
        if a == 0:
            r0, r1 = (-np.inf, np.inf) if c <= 0 else (np.inf, -np.inf)
        else:
            r0, r1 = _roots(b, c, a)
        z0, z1 = _slab(lz, ez, p[13])
        tn = max(r0, z0)
        tf = min(r1, z1)
        t, use_near = _pick(tn, tf, t_min, t_max)
        radial = (r0 >= z0) if use_near else (r1 <= z1)
        tt = t if t < np.inf else 0.0
        if radial:
            n0, n1, n2 = (lx + tt * ex) / rad, (ly + tt * ey) / rad, 0.0
        else:
            n0, n1, n2 = 0.0, 0.0, np.sign(lz + tt * ez)
        return (
            t,
            r[0] * n0 + r[1] * n1 + r[2] * n2,
            r[3] * n0 + r[4] * n1 + r[5] * n2,
            r[6] * n0 + r[7] * n1 + r[8] * n2,
        )
    if k == _SPH:  # p: centre, radius
        rad = p[3]
        cx, cy, cz = ox - p[0], oy - p[1], oz - p[2]
        c = (cx * cx + cy * cy + cz * cz) - rad * rad
        b = cx * dx + cy * dy + cz * dz
        tn, tf = _roots(b, c, 1.0)
        t, _ = _pick(tn, tf, t_min, t_max)
        tt = t if t < np.inf else 0.0
        return t, (cx + tt * dx) / rad, (cy + tt * dy) / rad, (cz + tt * dz) / rad
    # Triangle, p: mesh centre, v0 - centre, e1, e2, e1 x e2, unit normal (MeshCaster._exact).
    sx = (ox - p[0]) - p[3]
    sy = (oy - p[1]) - p[4]
    sz = (oz - p[2]) - p[5]
    ax, ay, az, bx, by, bz = p[6], p[7], p[8], p[9], p[10], p[11]
    px, py, pz = dy * bz - dz * by, dz * bx - dx * bz, dx * by - dy * bx
    det = -(dx * p[12] + dy * p[13] + dz * p[14])
    if det == 0:
        return np.inf, 0.0, 0.0, 0.0
    eps = 1e-12  # meshcast._BARY_EPS
    inv = 1.0 / det
    u = (sx * px + sy * py + sz * pz) * inv
    if not (u >= -eps and u <= 1.0 + 2 * eps):  # early exit; the full test follows
        return np.inf, 0.0, 0.0, 0.0
    qx, qy, qz = sy * az - sz * ay, sz * ax - sx * az, sx * ay - sy * ax
    v = (dx * qx + dy * qy + dz * qz) * inv
    t = (bx * qx + by * qy + bz * qz) * inv
    w = 1.0 - u - v
    ok = u >= -eps and v >= -eps and w >= -eps and t >= t_min and t <= t_max
    if ok and _on_box(p, ox + t * dx, oy + t * dy, oz + t * dz):
        return t, p[15], p[16], p[17]
    return np.inf, 0.0, 0.0, 0.0


@njit(**_JIT, inline="always")
def _on_box(p, x, y, z):
    """Whether (x, y, z) lies in the bounds of triangle p grown by half the tree's padding
    (slab.box_pad: 1e-9 (1 + largest |coordinate|)). A true hit always does; a ray lying, to
    rounding, in the triangle's plane makes det noise and u, v, t garbage, and such a "hit"
    outside the box would make the result depend on the order the walk meets primitives."""
    a0, a1, a2 = p[0] + p[3], p[1] + p[4], p[2] + p[5]
    b0, b1, b2 = a0 + p[6], a1 + p[7], a2 + p[8]
    c0, c1, c2 = a0 + p[9], a1 + p[10], a2 + p[11]
    lo0, hi0 = min(a0, b0, c0), max(a0, b0, c0)
    lo1, hi1 = min(a1, b1, c1), max(a1, b1, c1)
    lo2, hi2 = min(a2, b2, c2), max(a2, b2, c2)
    big = max(abs(lo0), abs(hi0), abs(lo1), abs(hi1), abs(lo2), abs(hi2))
    pad = 0.5e-9 * (1.0 + big)
    return (
        lo0 - pad <= x <= hi0 + pad and lo1 - pad <= y <= hi1 + pad and lo2 - pad <= z <= hi2 + pad
    )


@njit(**_JIT, inline="always")
def _enter(box, j, ox, oy, oz, ix, iy, iz, sx, sy, sz, t0, t1):
    """Entry distance of the ray into node j's box, clipped to [t0, t1]; inf if it misses.

    sx, sy, sz are 0 where the direction's inverse is >= 0 and 3 otherwise: the near face
    is then column s and the far one 3 - s, which saves the min/max of every slab.
    """
    tn = max(t0, (box[j, sx] - ox) * ix, (box[j, 1 + sy] - oy) * iy, (box[j, 2 + sz] - oz) * iz)
    tf = min(t1, (box[j, 3 - sx] - ox) * ix, (box[j, 4 - sy] - oy) * iy, (box[j, 5 - sz] - oz) * iz)
    return tn if tn <= tf else np.inf


@njit(**_JIT, inline="always")
def _inv(d):
    """1 / d, with +-1e300 for (near) zero so that box tests never form 0 * inf."""
    return 1.0 / d if abs(d) >= 1e-300 else np.copysign(1e300, d)


_PACKET = 32  # rays walked together when they are coherent (docs/raycast.md)
_PACKET_COS = 0.94  # coherent: every direction within about 20 degrees of the packet's mean
_PACKET_SPREAD = 1.0  # and every origin within 1 m (each axis) of the first's


@njit(**_JIT, inline="always")
def _walk_ray(r, o, d, t_min, t_max, best, index, normal, box, left, right, start, count,
              kind, obj, prio, par, stack, stack_t):  # fmt: skip
    """One ray down the tree, nearest child first; best/index/normal[r] updated."""
    q = 0 if len(o) == 1 else r
    ox, oy, oz = o[q, 0], o[q, 1], o[q, 2]
    dx, dy, dz = d[r, 0], d[r, 1], d[r, 2]
    ix, iy, iz = _inv(dx), _inv(dy), _inv(dz)
    sx, sy, sz = (0 if ix >= 0 else 3), (0 if iy >= 0 else 3), (0 if iz >= 0 else 3)
    bt = min(best[r], t_max)
    bp = -1  # planes and "nothing yet" rank below every primitive
    bk = -1
    slack = 1e-9 * (1.0 + abs(ox) + abs(oy) + abs(oz))
    t0 = t_min - slack
    sp = 0
    te = _enter(box, 0, ox, oy, oz, ix, iy, iz, sx, sy, sz, t0, bt + slack * (1 + bt))
    node = 0 if te < np.inf else -1
    while node >= 0:
        if left[node] < 0:
            for i in range(start[node], start[node] + count[node]):
                t, _, _, _ = _hit(kind[i], par[i], ox, oy, oz, dx, dy, dz, t_min, t_max)
                if t < bt or (t == bt and t < np.inf and prio[i] > bp):
                    bt, bp, bk = t, prio[i], i
            node = -1
        else:
            t1 = bt + 1e-9 * (1.0 + bt) + slack
            a, b = left[node], right[node]
            ta = _enter(box, a, ox, oy, oz, ix, iy, iz, sx, sy, sz, t0, t1)
            tb = _enter(box, b, ox, oy, oz, ix, iy, iz, sx, sy, sz, t0, t1)
            if tb < ta:
                a, b, ta, tb = b, a, tb, ta
            if ta < np.inf:
                if tb < np.inf:
                    stack[sp] = b
                    stack_t[sp] = tb
                    sp += 1
                node = a
            else:
                node = -1
        while node < 0 and sp > 0:
            sp -= 1
            if stack_t[sp] <= bt + 1e-9 * (1.0 + bt) + slack:
                node = stack[sp]
    if bk >= 0:
        _store(r, bk, ox, oy, oz, dx, dy, dz, t_min, t_max, best, index, normal, kind, obj, par)


@njit(**_JIT, inline="always")
def _along(box, j, fx, fy, fz):
    """Twice node j's centre projected on (fx, fy, fz): orders children near to far."""
    return (
        (box[j, 0] + box[j, 3]) * fx + (box[j, 1] + box[j, 4]) * fy + (box[j, 2] + box[j, 5]) * fz
    )


@njit(**_JIT, inline="always")
def _store(r, i, ox, oy, oz, dx, dy, dz, t_min, t_max, best, index, normal, kind, obj, par):
    """Ray r's nearest hit is primitive i: its distance, object and normal (facing the ray)."""
    t, n0, n1, n2 = _hit(kind[i], par[i], ox, oy, oz, dx, dy, dz, t_min, t_max)
    if n0 * dx + n1 * dy + n2 * dz > 0:
        n0, n1, n2 = -n0, -n1, -n2
    best[r] = t
    index[r] = obj[i]
    normal[r, 0], normal[r, 1], normal[r, 2] = n0, n1, n2


@njit(**_JIT)
def _cast(o, d, t_min, t_max, best, index, normal, box, left, right, start, count,
          kind, obj, prio, par, size):  # fmt: skip
    """Walk the tree for every ray; best/index/normal hold the planes' hits and are updated.

    Rays go in packets of `size` consecutive rays. A coherent packet (directions within
    about 20 degrees of their mean, origins within 1 m: a lidar's neighbouring rays, a
    camera's row) walks the tree once for all its rays: each node's box is tested against
    every ray in one loop the compiler vectorises, and the node is entered when any ray
    enters it before its own nearest hit so far (with _walk_ray's margins); a leaf's
    primitives get the exact tests for the rays that entered it. Other packets, and
    size 1, walk ray by ray. A ray of a packet meets the nodes in another order than it
    would alone, so it may skip other nodes; but every hit _hit accepts lies in its
    primitive's box (for triangles, _on_box checks it), so no node holding a hit nearer
    than (or tied with) the ray's nearest so far is ever skipped. Both walks thus find the
    same nearest hit under the same rule (nearest, then highest priority, which no test
    order changes): the results are _walk_ray's bit for bit."""
    stack = np.empty(len(box) + 1, dtype=np.int64)
    stack_t = np.empty(len(box) + 1)
    n = len(d)
    size = max(1, size)
    ox, oy, oz = np.empty(size), np.empty(size), np.empty(size)
    ix, iy, iz = np.empty(size), np.empty(size), np.empty(size)
    bt, t0, t1, sl = np.empty(size), np.empty(size), np.empty(size), np.empty(size)
    bp = np.empty(size, dtype=np.int64)
    bk = np.empty(size, dtype=np.int64)
    on = np.empty(size, dtype=np.bool_)
    for p0 in range(0, n, size):
        m = min(size, n - p0)
        coherent = m > 1
        if coherent:
            ax = ay = az = 0.0
            for r in range(p0, p0 + m):
                ax += d[r, 0]
                ay += d[r, 1]
                az += d[r, 2]
            lo, big, far = np.inf, 0.0, 0.0
            for r in range(p0, p0 + m):
                lo = min(lo, d[r, 0] * ax + d[r, 1] * ay + d[r, 2] * az)
                big = max(big, d[r, 0] * d[r, 0] + d[r, 1] * d[r, 1] + d[r, 2] * d[r, 2])
                if len(o) > 1:
                    for c in range(3):
                        far = max(far, abs(o[r, c] - o[p0, c]))
            a2 = ax * ax + ay * ay + az * az
            coherent = lo > 0 and lo * lo >= _PACKET_COS**2 * big * a2 and far <= _PACKET_SPREAD
        if not coherent:
            for r in range(p0, p0 + m):
                _walk_ray(r, o, d, t_min, t_max, best, index, normal, box, left, right, start,
                          count, kind, obj, prio, par, stack, stack_t)  # fmt: skip
            continue
        for k in range(size):
            r = p0 + min(k, m - 1)  # lanes past the last ray copy it and never enter a node
            q = 0 if len(o) == 1 else r
            ox[k], oy[k], oz[k] = o[q, 0], o[q, 1], o[q, 2]
            ix[k], iy[k], iz[k] = _inv(d[r, 0]), _inv(d[r, 1]), _inv(d[r, 2])
            sl[k] = 1e-9 * (1.0 + abs(ox[k]) + abs(oy[k]) + abs(oz[k]))
            bt[k] = min(best[r], t_max)
            bp[k] = -1
            bk[k] = -1
            t0[k] = t_min - sl[k]
            t1[k] = bt[k] + 1e-9 * (1.0 + bt[k]) + sl[k] if k < m else -np.inf
        # nearer child first along the first ray (any order gives the same results)
        fx, fy, fz = d[p0, 0], d[p0, 1], d[p0, 2]
        stack[0] = 0
        sp = 1
        while sp > 0:
            sp -= 1
            j = stack[sp]
            lx, ly, lz = box[j, 0], box[j, 1], box[j, 2]
            hx, hy, hz = box[j, 3], box[j, 4], box[j, 5]
            enter = False
            for k in range(size):  # branch-free: numba vectorises it
                ex, gx = (lx - ox[k]) * ix[k], (hx - ox[k]) * ix[k]
                ey, gy = (ly - oy[k]) * iy[k], (hy - oy[k]) * iy[k]
                ez, gz = (lz - oz[k]) * iz[k], (hz - oz[k]) * iz[k]
                tn = max(max(t0[k], min(ex, gx)), max(min(ey, gy), min(ez, gz)))
                tf = min(min(t1[k], max(ex, gx)), min(max(ey, gy), max(ez, gz)))
                on[k] = tn <= tf
                enter |= tn <= tf
            if not enter:
                continue
            if left[j] >= 0:
                a, b = left[j], right[j]
                if _along(box, a, fx, fy, fz) <= _along(box, b, fx, fy, fz):
                    a, b = b, a
                stack[sp], stack[sp + 1] = a, b
                sp += 2
                continue
            for i in range(start[j], start[j] + count[j]):
                for k in range(m):
                    if on[k]:
                        r = p0 + k
                        t, _, _, _ = _hit(kind[i], par[i], ox[k], oy[k], oz[k],
                                          d[r, 0], d[r, 1], d[r, 2], t_min, t_max)  # fmt: skip
                        if t < bt[k] or (t == bt[k] and t < np.inf and prio[i] > bp[k]):
                            bt[k], bp[k], bk[k] = t, prio[i], i
                            t1[k] = t + 1e-9 * (1.0 + t) + sl[k]
        for k in range(m):
            if bk[k] >= 0:
                r = p0 + k
                _store(r, bk[k], ox[k], oy[k], oz[k], d[r, 0], d[r, 1], d[r, 2], t_min, t_max,
                       best, index, normal, kind, obj, par)  # fmt: skip


_TILE = 16  # a packet is TILE x TILE neighbouring rays of a grid (docs/raycast.md)
_MAX_CANDIDATES = 96  # more primitives left in a tile's cone: its rows go through _cast
_SORTED = 8  # this many candidates or more are sorted nearest first (_cast_tiles)


@njit(**_JIT)
def _cast_tiles(o, d, width, t_min, t_max, best, index, normal, box, left, right, start,
                count, kind, obj, prio, par, par_sphere, sphere):  # fmt: skip
    """As _cast, for rays from one origin laid out as a row-major grid `width` wide (a camera
    band): the tree is culled once per 16 x 16 tile of rays against the tile's bounding cone
    and its farthest hit so far, then each ray of the tile runs the exact test on the
    primitives left with _cast's rule (nearest, then highest priority: the order the tests
    run in does not matter), so every result is _cast's. The cull is conservative: a node is
    dropped only when its bounding sphere lies outside the cone (cosines compared with 1e-9
    to spare) or wholly beyond every ray's hit so far. A tile whose rays span a hemisphere,
    or whose cone keeps more than _MAX_CANDIDATES primitives, is cast by _cast. The nodes'
    spheres and the primitives' (par_sphere) come with the tree (`bvhworld._spheres`): the cull
    costs one square root a node less, and a tile keeping _SORTED or more primitives tests
    them nearest first, each ray stopping at the first that starts beyond its nearest hit
    (docs/raycast.md: dense worlds' frames gain most)."""
    n = len(d)
    rows = (n + width - 1) // width
    ox, oy, oz = o[0, 0], o[0, 1], o[0, 2]
    slack = 1e-9 * (1.0 + abs(ox) + abs(oy) + abs(oz))
    cand = np.empty(_MAX_CANDIDATES, dtype=np.int64)
    near = np.empty(_MAX_CANDIDATES)
    stack = np.empty(len(box) + 1, dtype=np.int64)
    for r0 in range(0, rows, _TILE):
        r1 = min(r0 + _TILE, rows)
        for c0 in range(0, width, _TILE):
            c1 = min(c0 + _TILE, width)
            ax = ay = az = 0.0
            far = 0.0
            for rr in range(r0, r1):
                for i in range(rr * width + c0, min(rr * width + c1, n)):
                    ax += d[i, 0]  # any axis will do: cos_a below is measured from it
                    ay += d[i, 1]
                    az += d[i, 2]
                    far = max(far, min(best[i], t_max))
            m = np.sqrt(ax * ax + ay * ay + az * az)
            cos_a = 1.0
            if m > 0:
                ax, ay, az = ax / m, ay / m, az / m
                # the cone's half angle from the least d.a and the longest d: cos_a is then at
                # most every ray's own cosine (a wider cone, still conservative), with no
                # square root or division per ray (4 % of a demo frame); <= 0: a hemisphere
                lo, big = np.inf, 0.0
                for rr in range(r0, r1):
                    for i in range(rr * width + c0, min(rr * width + c1, n)):
                        lo = min(lo, d[i, 0] * ax + d[i, 1] * ay + d[i, 2] * az)
                        big = max(big, d[i, 0] * d[i, 0] + d[i, 1] * d[i, 1] + d[i, 2] * d[i, 2])
                cos_a = min(1.0, lo / np.sqrt(big)) if lo > 0 else lo
            k = 0
            wide = not (m > 0 and cos_a > 0.0)  # the rays span a hemisphere or more
            if not wide:
                sin_a = np.sqrt(max(0.0, 1.0 - cos_a * cos_a))
                reach = far + 1e-9 * (1.0 + far) + slack
                stack[0] = 0
                sp = 1
                while sp > 0:
                    sp -= 1
                    j = stack[sp]
                    rad = sphere[j, 3]
                    vx = sphere[j, 0] - ox
                    vy = sphere[j, 1] - oy
                    vz = sphere[j, 2] - oz
                    dist2 = vx * vx + vy * vy + vz * vz
                    dist = np.sqrt(dist2)
                    if dist > rad * (1.0 + 1e-9) + slack:
                        if dist - rad > reach:
                            continue  # wholly beyond every ray's nearest hit so far
                        # outside the cone when the angle between a and v exceeds a + b
                        # (sin b = rad / dist): a.v < cos(a + b) dist, which is
                        # cos_a sqrt(dist^2 - rad^2) - sin_a rad (no division)
                        edge = cos_a * np.sqrt(max(0.0, dist2 - rad * rad)) - sin_a * rad
                        if ax * vx + ay * vy + az * vz < edge - 1e-9 * dist:
                            continue  # the sphere lies outside the tile's cone
                    if left[j] >= 0:
                        stack[sp] = left[j]
                        stack[sp + 1] = right[j]
                        sp += 2
                    elif k + count[j] > _MAX_CANDIDATES:
                        wide = True
                        break
                    else:
                        for i in range(start[j], start[j] + count[j]):
                            cand[k] = i
                            k += 1
            # Many candidates: nearest first, by the least distance their bounding sphere
            # could be from the origin (less 1e-9 and the origin's slack), so that a ray
            # stops at the first that starts beyond its nearest hit so far: it cannot be hit
            # nearer (or as near). A few are cheaper tested than sorted.
            early = not wide and k >= _SORTED
            for c in range(k if early else 0):
                i = cand[c]
                vx = par_sphere[i, 0] - ox
                vy = par_sphere[i, 1] - oy
                vz = par_sphere[i, 2] - oz
                lb = np.sqrt(vx * vx + vy * vy + vz * vz) - par_sphere[i, 3]
                lb = lb * (1.0 - 1e-9) - slack
                j = c
                while j > 0 and near[j - 1] > lb:
                    near[j] = near[j - 1]
                    cand[j] = cand[j - 1]
                    j -= 1
                near[j] = lb
                cand[j] = i
            for rr in range(r0, r1):
                a, b = rr * width + c0, min(rr * width + c1, n)
                if wide:
                    _cast(o, d[a:b], t_min, t_max, best[a:b], index[a:b], normal[a:b], box,
                          left, right, start, count, kind, obj, prio, par, _PACKET)  # fmt: skip
                    continue
                if k == 0:
                    continue  # the planes' hits stand
                for r in range(a, b):
                    dx, dy, dz = d[r, 0], d[r, 1], d[r, 2]
                    bt = min(best[r], t_max)
                    bp = -1
                    bk = -1
                    dn2 = (dx * dx + dy * dy + dz * dz) * (1.0 + 1e-9) if early else 0.0  # |d|^2 up
                    for c in range(k):
                        if early and near[c] > 0:
                            q = bt + 1e-9 * (1.0 + bt)
                            if near[c] * near[c] > q * q * dn2:
                                break  # it and the rest start beyond the nearest hit so far
                        i = cand[c]
                        t, _, _, _ = _hit(kind[i], par[i], ox, oy, oz, dx, dy, dz, t_min, t_max)
                        if t < bt or (t == bt and t < np.inf and prio[i] > bp):
                            bt, bp, bk = t, prio[i], i
                    if bk >= 0:
                        t, n0, n1, n2 = _hit(kind[bk], par[bk], ox, oy, oz, dx, dy, dz,
                                             t_min, t_max)  # fmt: skip
                        if n0 * dx + n1 * dy + n2 * dz > 0:
                            n0, n1, n2 = -n0, -n1, -n2
                        best[r] = t
                        index[r] = obj[bk]
                        normal[r, 0], normal[r, 1], normal[r, 2] = n0, n1, n2


@njit(**_JIT)
def cast_planes(o, d, t_min, t_max, pn, pd, pobj, best, index, normal):
    """Scene._cast_planes in one pass: every ray against every (two-sided, infinite) plane;
    fills best/index/normal (inf, -1, NaN where no plane is hit). o is (M, 3), M = 1 shared."""
    for r in range(len(d)):
        q = 0 if len(o) == 1 else r
        bt, bk = np.inf, -1
        n0 = n1 = n2 = np.nan
        for j in range(len(pn)):
            denom = d[r, 0] * pn[j, 0] + d[r, 1] * pn[j, 1] + d[r, 2] * pn[j, 2]
            if denom == 0:
                continue
            num = pd[j] - (o[q, 0] * pn[j, 0] + o[q, 1] * pn[j, 1] + o[q, 2] * pn[j, 2])
            t = num / denom
            if t >= t_min and t <= t_max and t < bt:
                s = -1.0 if denom > 0 else 1.0  # facing the ray
                bt, bk = t, pobj[j]
                n0, n1, n2 = s * pn[j, 0], s * pn[j, 1], s * pn[j, 2]
        best[r], index[r] = bt, bk
        normal[r, 0], normal[r, 1], normal[r, 2] = n0, n1, n2
