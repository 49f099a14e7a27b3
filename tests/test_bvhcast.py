"""The BVH caster (Scene's default) against the brute-force oracle (Scene(world, brute=True)).

Random scenes of boxes, cylinders, spheres and triangle soups (rotated, touching, overlapping,
over a ground plane), with rays from inside solids, aimed exactly at corners and edges,
parallel to faces, under random t_min/t_max: every ray must report the same object, the same
distance to 1e-9 m and the same normal.
"""

from __future__ import annotations

import resource
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.spatial.transform import Rotation

from simconform.meshcast import BruteMesh
from simconform.raycast import Scene
from simconform.world import World

pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")

ORIGIN = {"lat": 0.0, "lon": 0.0, "alt": 0.0}
SETTINGS = settings(max_examples=60, deadline=None, derandomize=True, database=None)
TOL = 1e-9


def make_world(objects: list[dict], meshes: dict[int, np.ndarray]) -> World:
    w = World.model_validate({"name": "t", "origin": ORIGIN, "objects": objects})
    for i, tri in meshes.items():  # triangles given directly instead of loaded from a file
        w._meshes[i] = tri
    return w


@st.composite
def scenes(draw) -> tuple[World, np.ndarray, np.ndarray]:
    """A world, points on and in its solids (centres, corners) where rays start or aim, and
    those points with the meshes' vertices and edge midpoints, where rays aim."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    objects: list[dict] = []
    meshes: dict[int, np.ndarray] = {}
    points, aims = [], []
    if draw(st.booleans()):
        objects.append({"type": "plane", "point": [0, 0, float(rng.uniform(-3, 0))]})
    for _ in range(draw(st.integers(1, 14))):
        kind = draw(st.sampled_from(["box", "box", "cylinder", "sphere", "mesh", "touch"]))
        c = rng.uniform(-6, 6, 3)
        rpy = rng.uniform(-np.pi, np.pi, 3) if rng.random() < 0.6 else np.zeros(3)
        if kind == "touch" and any(o["type"] == "box" for o in objects):
            # A copy of an earlier box moved by exactly its size along one of its axes.
            src = next(o for o in reversed(objects) if o["type"] == "box")
            axis = rng.integers(3)
            rot = Rotation.from_euler("xyz", src["rpy"]).as_matrix()
            c = np.asarray(src["center"]) + rot[:, axis] * src["size"][axis]
            objects.append({**src, "center": c.tolist()})
            points.append(c)
            continue
        if kind in ("box", "touch"):
            size = rng.uniform(0.2, 4, 3)
            objects.append({"type": "box", "center": c.tolist(), "size": size.tolist(),
                            "rpy": rpy.tolist()})  # fmt: skip
            rot = Rotation.from_euler("xyz", rpy).as_matrix()
            corners = np.array(np.meshgrid([-1, 1], [-1, 1], [-1, 1])).reshape(3, -1).T
            points.extend(c + (corners * size / 2) @ rot.T)
        elif kind == "cylinder":
            r, ln = rng.uniform(0.1, 2), rng.uniform(0.2, 5)
            objects.append({"type": "cylinder", "center": c.tolist(), "radius": r, "length": ln,
                            "rpy": rpy.tolist()})  # fmt: skip
            rot = Rotation.from_euler("xyz", rpy).as_matrix()
            points.extend([c + rot[:, 2] * ln / 2, c + rot[:, 0] * r + rot[:, 2] * ln / 2])
        elif kind == "sphere":
            objects.append({"type": "sphere", "center": c.tolist(), "radius": rng.uniform(0.1, 3)})
        else:
            pool = c + rng.uniform(-2, 2, (rng.integers(3, 8), 3))
            tri = pool[rng.integers(0, len(pool), (rng.integers(1, 12), 3))]
            meshes[len(objects)] = tri
            objects.append({"type": "mesh", "file": "soup.obj"})
            # Aimed at, never started from: at an origin exactly on a triangle the sign of
            # t = 0 is rounding, which BruteMesh's matrix product rounds differently.
            aims.extend(tri.reshape(-1, 3))
            aims.extend(0.5 * (tri + np.roll(tri, 1, axis=1)).reshape(-1, 3))
            continue
        points.append(c)
    points = points or [np.zeros(3)]
    return make_world(objects, meshes), np.array(points), np.array(points + aims)


def rays(rng, starts, aims, n: int = 300) -> tuple[np.ndarray, np.ndarray]:
    """Per-ray origins (some at object centres and corners) and unit directions."""
    o = rng.uniform(-10, 10, (n, 3))
    inside = rng.random(n) < 0.25
    o[inside] = starts[rng.integers(0, len(starts), inside.sum())]
    d = rng.normal(size=(n, 3))
    aim = rng.random(n) < 0.5  # exactly at corners, edge midpoints, vertices
    d[aim] = aims[rng.integers(0, len(aims), aim.sum())] - o[aim]
    axial = rng.random(n) < 0.15  # parallel to the faces of unrotated boxes
    d[axial] = np.eye(3)[rng.integers(0, 3, axial.sum())] * rng.choice([-1, 1], (axial.sum(), 1))
    keep = np.linalg.norm(d, axis=1) > 1e-9
    o, d = o[keep], d[keep]
    return o, d / np.linalg.norm(d, axis=1, keepdims=True)


def _on_edge(world: World, o, d, r: int, t_min: float, t_max: float) -> bool:
    """Whether ray r's nearest mesh hit changes when every triangle grows or shrinks by 1e-9
    of its size about its centroid: the ray passes within rounding of an edge."""
    oo = o if o.ndim == 1 else o[r]
    found = []
    for scale in (1 - 1e-9, 1 + 1e-9):
        t = np.inf
        for tri in world._meshes.values():
            c = tri.mean(axis=1, keepdims=True)
            t = min(t, BruteMesh(c + scale * (tri - c)).cast(oo, d[r][None], t_min, t_max)[0][0])
        found.append(t)
    return not (found[0] == found[1] or abs(found[0] - found[1]) <= TOL)


def assert_same(world: World, o, d, t_min=0.0, t_max=np.inf) -> None:
    fast = Scene(world).cast(o, d, t_min, t_max)
    ref = Scene(world, brute=True).cast(o, d, t_min, t_max)
    # BruteMesh rounds triangle tests through a matrix product, the BVH as MeshCaster does, so
    # they may differ on rays within rounding of a triangle's edge (or tied with another
    # surface): there, either answer is right, which `_on_edge` checks.
    with np.errstate(invalid="ignore"):  # inf - inf where both miss
        differ = (fast.index != ref.index) | ~(np.abs(fast.dist - ref.dist) <= TOL)
    differ &= np.isfinite(fast.dist) | np.isfinite(ref.dist)
    bad = [r for r in np.flatnonzero(differ) if not _on_edge(world, o, d, r, t_min, t_max)]
    assert not bad, (
        f"{len(bad)} rays differ, e.g. {bad[0]}: {fast.index[bad[0]]} vs {ref.index[bad[0]]}"
    )
    hit = (ref.index >= 0) & ~differ
    differ = hit & np.any(np.abs(fast.normal - ref.normal) > 1e-9, axis=1)
    differ &= fast.index == ref.index
    for r in np.flatnonzero(differ):
        # Only a ray through a mesh edge or vertex may take another triangle's normal, and only
        # one of a triangle that the ray hits at the same distance.
        i = ref.index[r]
        assert i in world._meshes, f"ray {r}: normals {fast.normal[r]} vs {ref.normal[r]}"
        oo = o if o.ndim == 1 else o[r]
        ok = False
        for tri in world.mesh_triangles(i):
            t, n = BruteMesh(tri[None]).cast(oo, d[r][None], t_min, t_max)
            if abs(t[0] - ref.dist[r]) <= TOL:
                ok |= bool(np.allclose(np.abs(n[0] @ fast.normal[r]), 1.0, atol=1e-9))
        assert ok, f"ray {r}: normal {fast.normal[r]} is not of a triangle hit there"


@given(
    scene=scenes(),
    seed=st.integers(0, 2**32 - 1),
    t_min=st.sampled_from([0.0, 0.0, 0.3, 2.0]),
    t_max=st.sampled_from([np.inf, np.inf, 5.0, 12.0]),
    shared=st.booleans(),
)
@SETTINGS
def test_bvh_matches_brute_force(scene, seed, t_min, t_max, shared) -> None:
    world, starts, aims = scene
    rng = np.random.default_rng(seed)
    o, d = rays(rng, starts, aims)
    if shared:  # one origin for all rays, as a lidar sweep has
        o = o[0]
    assert_same(world, o, d, t_min, min(t_max, 1e9) if t_max < np.inf else t_max)


@given(seed=st.integers(0, 2**32 - 1), n=st.integers(50, 400))
@settings(max_examples=10, deadline=None, derandomize=True, database=None)
def test_dense_city_blocks_match_brute_force(seed, n) -> None:
    """Many axis-aligned and yawed boxes and poles on a ground plane, lidar-like rays."""
    rng = np.random.default_rng(seed)
    objects = [{"type": "plane"}]
    for _ in range(n):
        c = [*rng.uniform(-60, 60, 2), 0]
        if rng.random() < 0.7:
            size = rng.uniform(1, 12, 3)
            c[2] = size[2] / 2
            yaw = rng.choice([0.0, rng.uniform(-np.pi, np.pi)])
            objects.append({"type": "box", "center": c, "size": size.tolist(), "rpy": [0, 0, yaw]})
        else:
            c[2] = 2.0
            objects.append({"type": "cylinder", "center": c, "radius": 0.2, "length": 4.0})
    o = np.array([*rng.uniform(-40, 40, 2), 1.8])
    el = np.deg2rad(np.linspace(-15, 15, 16))
    az = np.linspace(0, 2 * np.pi, 360, endpoint=False)
    e, a = np.meshgrid(el, az, indexing="ij")
    d = np.stack([np.cos(e) * np.cos(a), np.cos(e) * np.sin(a), np.sin(e)], -1).reshape(-1, 3)
    assert_same(make_world(objects, {}), o, d, 0.3, 100.0)


def test_mesh_leaves_match_brute_mesh_at_vertices_and_ridges() -> None:
    """A closed icosphere-like mesh seen from outside: rays grazing its silhouette ridges and
    aimed exactly at its vertices, where Embree's float32 proposal used to go wrong."""
    import trimesh

    tri = trimesh.creation.icosphere(subdivisions=2, radius=3.0).triangles + np.array(
        [1.0, -2.0, 0.5]
    )
    world = make_world([{"type": "mesh", "file": "ico.obj"}], {0: tri})
    o = np.array([9.0, 4.0, -3.0])
    verts = np.unique(tri.reshape(-1, 3), axis=0)
    d = verts - o
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    fast = Scene(world).cast(o, d)
    ref, _ = BruteMesh(tri).cast(o, d, 0.0, np.inf)
    np.testing.assert_array_equal(np.isfinite(fast.dist), np.isfinite(ref))
    hit = np.isfinite(ref)
    assert hit.sum() > 20
    np.testing.assert_allclose(fast.dist[hit], ref[hit], rtol=0, atol=TOL)


_SCAN = """
import resource, sys, numpy as np
from simconform.raycast import Scene
from simconform.world import World
rng = np.random.default_rng(0)
objs = [{"type": "plane"}]
for i in range(20000):
    c = [*rng.uniform(-1000, 1000, 2), 5.0]
    if i % 3:
        objs.append({"type": "box", "center": c, "size": [8.0, 8.0, 10.0], "rpy": [0, 0, 0.3]})
    else:
        objs.append({"type": "cylinder", "center": c, "radius": 0.3, "length": 10.0})
w = World.model_validate({"name": "d", "origin": {"lat": 0, "lon": 0, "alt": 0}, "objects": objs})
scene = Scene(w)
el = np.deg2rad(np.linspace(-25, 15, 128)); az = np.linspace(0, 2 * np.pi, 2048, endpoint=False)
e, a = np.meshgrid(el, az, indexing="ij")
d = np.stack([np.cos(e) * np.cos(a), np.cos(e) * np.sin(a), np.sin(e)], -1).reshape(-1, 3)
o = np.array([3.0, 4.0, 1.8])
scene.cast(o, d[:10], 0.3, 200.0)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
h = scene.cast(o, d, 0.3, 200.0)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print((after - before) / 1024, float((h.index > 0).mean()))
"""


def test_128x2048_scan_of_20000_objects_stays_under_500_mb() -> None:
    """Peak memory a 128 x 2048 scan adds over 20,000 boxes and cylinders (fresh process)."""
    assert resource  # the child measures its own ru_maxrss
    out = subprocess.run(
        [sys.executable, "-c", _SCAN], capture_output=True, text=True, check=True
    ).stdout.split()
    assert float(out[0]) < 500.0, f"a scan added {out[0]} MB"
    assert float(out[1]) > 0.05  # the scan does hit the objects


def grid_rays(rng, starts, aims, kind: str) -> tuple[np.ndarray, np.ndarray, int]:
    """One origin and a row-major grid of unit rays (width returned): a pinhole camera's
    pixels, or directions at random (tiles spanning a hemisphere), with some rays aimed
    exactly at corners, edge midpoints and vertices."""
    o = starts[rng.integers(len(starts))] if rng.random() < 0.3 else rng.uniform(-10, 10, 3)
    h, w = int(rng.integers(1, 40)), int(rng.integers(1, 40))  # not multiples of the tile
    if kind == "pinhole":
        f = rng.uniform(0.3, 3.0)
        u, v = np.meshgrid(np.arange(w) - (w - 1) / 2, np.arange(h) - (h - 1) / 2)
        d = np.stack([np.full(u.shape, f * max(h, w) / 2), -u, -v], -1).reshape(-1, 3)
        d = d @ Rotation.random(random_state=int(rng.integers(2**31))).as_matrix().T
    else:
        d = rng.normal(size=(h * w, 3))
    aim = rng.random(len(d)) < 0.1
    d[aim] = aims[rng.integers(0, len(aims), aim.sum())] - o
    d[np.linalg.norm(d, axis=1) < 1e-9] = [1.0, 0.0, 0.0]
    return o, d / np.linalg.norm(d, axis=1, keepdims=True), w


@given(
    scene=scenes(),
    seed=st.integers(0, 2**32 - 1),
    kind=st.sampled_from(["pinhole", "pinhole", "random"]),
    t_min=st.sampled_from([0.0, 0.0, 0.3]),
    t_max=st.sampled_from([np.inf, np.inf, 5.0]),
)
@SETTINGS
def test_tiles_give_the_walks_results_bit_for_bit(scene, seed, kind, t_min, t_max) -> None:
    """A camera's rays cast in tiles (bvhcast._cast_tiles, culled per 16 x 16 tile) give every
    ray exactly the distance, object and normal of the ray-by-ray walk, and agree with the
    brute force as the walk does."""
    world, starts, aims = scene
    o, d, w = grid_rays(np.random.default_rng(seed), starts, aims, kind)
    scene_ = Scene(world)
    tiled = scene_.cast(o, d, t_min, t_max, width=w)
    walked = scene_.cast(o, d, t_min, t_max)
    np.testing.assert_array_equal(tiled.index, walked.index)
    np.testing.assert_array_equal(tiled.dist, walked.dist)
    np.testing.assert_array_equal(tiled.normal, walked.normal)
    assert_same(world, o, d, t_min, t_max)


def test_tiles_keeping_too_many_primitives_walk_ray_by_ray() -> None:
    """A camera close to a 5,120-triangle sphere: tiles whose cone keeps more than the
    candidate limit fall back to the walk, with the same results."""
    import trimesh

    from simconform import bvhcast

    tri = trimesh.creation.icosphere(subdivisions=4, radius=3.0).triangles
    tri = tri + np.array([6.0, 0.0, 0.0])
    world = make_world([{"type": "plane", "point": [0, 0, -3]},
                        {"type": "mesh", "file": "ico.obj"}], {1: tri})  # fmt: skip
    u, v = np.meshgrid(np.linspace(-1, 1, 64), np.linspace(-1, 1, 48))
    d = np.stack([np.full(u.shape, 1.0), u, v], -1).reshape(-1, 3)
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    o, w = np.zeros(3), 64
    scene_ = Scene(world)
    assert len(tri) > 16 * bvhcast._MAX_CANDIDATES  # some tiles must overflow
    tiled = scene_.cast(o, d, 0.0, np.inf, width=w)
    walked = scene_.cast(o, d, 0.0, np.inf)
    assert (tiled.index == 1).mean() > 0.2
    np.testing.assert_array_equal(tiled.index, walked.index)
    np.testing.assert_array_equal(tiled.dist, walked.dist)
    np.testing.assert_array_equal(tiled.normal, walked.normal)


def test_tiles_with_many_candidates_test_them_nearest_first() -> None:
    """A camera looking along rows of boxes and cylinders, near and far behind each other, so
    that tiles keep _SORTED or more primitives, sort them nearest first and stop each ray
    early: every ray gets exactly the walk's distance, object and normal (and the brute
    force's)."""
    from simconform import bvhcast

    rng = np.random.default_rng(7)
    objects: list[dict] = [{"type": "plane", "point": [0, 0, -1]}]
    for x in range(3, 40, 3):
        for y in range(-6, 7, 3):
            c = [float(x + rng.uniform(-0.5, 0.5)), float(y + rng.uniform(-0.5, 0.5)), 0.0]
            if rng.random() < 0.7:
                objects.append({"type": "box", "center": c, "size": [0.8, 0.8, 2.0],
                                "rpy": rng.uniform(-0.3, 0.3, 3).tolist()})  # fmt: skip
            else:
                objects.append({"type": "cylinder", "center": c, "radius": 0.4, "length": 2.0})
    world = make_world(objects, {})
    u, v = np.meshgrid(np.linspace(-0.4, 0.4, 96), np.linspace(-0.1, 0.1, 40))
    d = np.stack([np.full(u.shape, 1.0), u, v], -1).reshape(-1, 3)
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    o, w = np.array([-2.0, 0.1, 0.2]), 96
    scene_ = Scene(world)
    assert len(objects) > 4 * bvhcast._SORTED
    tiled = scene_.cast(o, d, 0.0, np.inf, width=w)
    walked = scene_.cast(o, d, 0.0, np.inf)
    assert len(np.unique(tiled.index)) > 2 * bvhcast._SORTED  # many objects in view
    np.testing.assert_array_equal(tiled.index, walked.index)
    np.testing.assert_array_equal(tiled.dist, walked.dist)
    np.testing.assert_array_equal(tiled.normal, walked.normal)
    assert_same(world, o, d, 0.0, np.inf)


def fan_rays(rng, starts, aims) -> tuple[np.ndarray, np.ndarray]:
    """A spinning lidar's rays in ring-major order (neighbours a fraction of a degree to a few
    degrees apart: coherent packets), from a moving sensor (per-ray origins a few centimetres
    apart) or one origin, with some rays aimed exactly at corners, edge midpoints and
    vertices (within a packet's cone or far outside it)."""
    o = starts[rng.integers(len(starts))] if rng.random() < 0.3 else rng.uniform(-10, 10, 3)
    rings, cols = int(rng.integers(1, 9)), int(rng.integers(1, 90))
    lo = rng.uniform(-40, 10)
    el = np.deg2rad(np.linspace(lo, lo + rng.uniform(0, 40), rings))
    az = rng.uniform(-np.pi, np.pi) + np.linspace(0, rng.uniform(0.05, 2 * np.pi), cols)
    e, a = np.meshgrid(el, az, indexing="ij")
    d = np.stack([np.cos(e) * np.cos(a), np.cos(e) * np.sin(a), np.sin(e)], -1).reshape(-1, 3)
    d = d @ Rotation.random(random_state=int(rng.integers(2**31))).as_matrix().T
    aim = rng.random(len(d)) < 0.1
    if rng.random() < 0.5:
        o = o + np.outer(np.arange(len(d)) / max(len(d), 1), rng.uniform(-0.05, 0.05, 3))
        d[aim] = aims[rng.integers(0, len(aims), aim.sum())] - o[aim]
    else:
        d[aim] = aims[rng.integers(0, len(aims), aim.sum())] - o
    d[np.linalg.norm(d, axis=1) < 1e-9] = [1.0, 0.0, 0.0]
    return o, d / np.linalg.norm(d, axis=1, keepdims=True)


def walk(scene_: Scene, o, d, t_min, t_max, packet: int):
    """Scene.cast's distances, objects and normals with the walk's packet size chosen."""
    h = scene_.cast(o, d, t_min, t_max, packet=packet)
    return h.dist, h.index, h.normal


@given(
    scene=scenes(),
    seed=st.integers(0, 2**32 - 1),
    t_min=st.sampled_from([0.0, 0.0, 0.3]),
    t_max=st.sampled_from([np.inf, np.inf, 5.0]),
    packet=st.sampled_from([2, 5, 32, 32]),
)
@SETTINGS
def test_packets_give_the_walks_results_bit_for_bit(scene, seed, t_min, t_max, packet) -> None:
    """A lidar's neighbouring rays walked in packets (bvhcast._cast) give every ray exactly
    the distance, object and normal of the ray-by-ray walk, and agree with the brute force."""
    world, starts, aims = scene
    o, d = fan_rays(np.random.default_rng(seed), starts, aims)
    scene_ = Scene(world)
    alone = walk(scene_, o, d, t_min, t_max, packet=1)
    packed = walk(scene_, o, d, t_min, t_max, packet=packet)
    for a, b in zip(alone, packed, strict=True):
        np.testing.assert_array_equal(a, b)
    assert_same(world, o, d, t_min, t_max)


def test_packets_cover_a_lidar_scan_and_fall_back_on_scattered_rays() -> None:
    """A 16 x 360 scan over boxes and poles: its packets are coherent and give the ray-by-ray
    walk's results; the same rays shuffled (no packet coherent) give them too."""
    from simconform import bvhcast

    rng = np.random.default_rng(3)
    objects: list[dict] = [{"type": "plane", "point": [0, 0, -1.8]}]
    for _ in range(300):
        c = [*rng.uniform(-40, 40, 2), 0.0]
        if rng.random() < 0.7:
            objects.append({"type": "box", "center": c, "size": rng.uniform(1, 8, 3).tolist(),
                            "rpy": [0, 0, float(rng.uniform(-3, 3))]})  # fmt: skip
        else:
            objects.append({"type": "cylinder", "center": c, "radius": 0.2, "length": 4.0})
    world = make_world(objects, {})
    el = np.deg2rad(np.linspace(-15, 15, 16))
    az = np.linspace(0, 2 * np.pi, 360, endpoint=False)
    e, a = np.meshgrid(el, az, indexing="ij")
    d = np.stack([np.cos(e) * np.cos(a), np.cos(e) * np.sin(a), np.sin(e)], -1).reshape(-1, 3)
    o = np.array([0.5, -0.3, 0.0])
    first = d[: bvhcast._PACKET]
    mean = first.sum(axis=0) / np.linalg.norm(first.sum(axis=0))
    assert (first @ mean).min() > bvhcast._PACKET_COS  # a ring's neighbours form a packet
    scene_ = Scene(world)
    alone = walk(scene_, o, d, 0.3, 100.0, packet=1)
    packed = walk(scene_, o, d, 0.3, 100.0, packet=bvhcast._PACKET)
    assert (alone[1] > 0).mean() > 0.2  # the scan does hit the objects
    for x, y in zip(alone, packed, strict=True):
        np.testing.assert_array_equal(x, y)
    perm = rng.permutation(len(d))
    shuffled = walk(scene_, o, d[perm], 0.3, 100.0, packet=bvhcast._PACKET)
    for x, y in zip(alone, shuffled, strict=True):
        np.testing.assert_array_equal(x[perm], y)
    assert_same(world, o, d, 0.3, 100.0)


@given(seed=st.integers(0, 2**32 - 1))
@settings(max_examples=40, deadline=None, derandomize=True, database=None)
def test_rays_in_a_triangles_plane_give_the_same_answer_in_any_order(seed) -> None:
    """Rays lying, to rounding, in the plane of tilted mesh triangles (from a point in that
    plane) make Möller–Trumbore's determinant noise: a "hit" outside the triangle would make
    the answer depend on the order the walk meets primitives. The packets, the one-by-one
    walk and the brute force must agree (found by a review fuzzing the packets)."""
    rng = np.random.default_rng(seed)
    n = rng.normal(size=3)
    n /= np.linalg.norm(n)
    u = np.cross(n, rng.normal(size=3))
    u /= np.linalg.norm(u)
    v = np.cross(n, u)
    p0 = rng.uniform(-5, 5, 3)
    tris = []
    for _ in range(int(rng.integers(1, 10))):
        a = p0 + rng.uniform(2, 30) * u + rng.uniform(-6, 6) * v
        tris.append([a, *(a + rng.uniform(-4, 4) * u + rng.uniform(-4, 4) * v for _ in "bc")])
    objects: list[dict] = [{"type": "mesh", "file": "strip.obj"}]
    for _ in range(int(rng.integers(1, 8))):
        c = p0 + rng.uniform(0, 60) * u + rng.uniform(-10, 10) * v + rng.uniform(-2, 2) * n
        objects.append({"type": "sphere", "center": c.tolist(), "radius": rng.uniform(0.2, 20)})
    world = make_world(objects, {0: np.array(tris)})
    fan = np.linspace(0, rng.uniform(0, 0.4), int(rng.integers(2, 200)))
    ang = rng.uniform(-np.pi, np.pi) + fan
    d = np.cos(ang)[:, None] * u + np.sin(ang)[:, None] * v
    o = p0 + rng.uniform(-0.5, 0.5) * v + rng.uniform(-0.5, 0.5) * u
    scene_ = Scene(world)
    alone = walk(scene_, o, d, 0.0, np.inf, packet=1)
    for size in (2, 7, 32):
        for a, b in zip(alone, walk(scene_, o, d, 0.0, np.inf, packet=size), strict=True):
            np.testing.assert_array_equal(a, b)
    assert_same(world, o, d, 0.0, np.inf)
