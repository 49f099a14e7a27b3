"""Exact ray casting: closed-form distances per primitive, and independent surface checks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import trimesh
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.spatial.transform import Rotation

from simconform.raycast import Hits, Scene
from simconform.world import World, load_world

# No RuntimeWarning (division by zero, invalid value) may escape the caster.
pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")

DEMO = Path(__file__).resolve().parents[1] / "worlds" / "demo.yaml"
ORIGIN = {"lat": 0.0, "lon": 0.0, "alt": 0.0}
SETTINGS = settings(max_examples=60, deadline=None, derandomize=True, database=None)


def world(*objects: dict) -> World:
    return World.model_validate({"name": "t", "origin": ORIGIN, "objects": list(objects)})


def cast1(scene: Scene, origin, direction, **kw) -> tuple[float, int, np.ndarray]:
    d = np.asarray(direction, dtype=float)
    hits = scene.cast(np.asarray(origin, dtype=float), (d / np.linalg.norm(d))[None], **kw)
    return float(hits.dist[0]), int(hits.index[0]), hits.normal[0]


def unit(v) -> np.ndarray:
    v = np.asarray(v, dtype=float)
    return v / np.linalg.norm(v)


angles = st.floats(-np.pi, np.pi)
rpys = st.tuples(angles, angles, angles)
sizes = st.floats(0.1, 5.0)
coords = st.floats(-20.0, 20.0)
unit_interval = st.floats(-0.9, 0.9)


def outside_origin(center, reach, azimuth, elevation, dist) -> np.ndarray:
    """A point at `reach + dist` from `center`, hence outside a solid of circumradius reach."""
    direction = [
        np.cos(elevation) * np.cos(azimuth),
        np.cos(elevation) * np.sin(azimuth),
        np.sin(elevation),
    ]
    return np.asarray(center) + (reach + dist) * np.asarray(direction)


# ---------------------------------------------------------------------------- plane


@pytest.mark.parametrize("h", [0.5, 1.2, 37.0])
def test_plane_straight_down_is_height(h: float) -> None:
    t, i, n = cast1(Scene(world({"type": "plane"})), [3.0, -2.0, h], [0, 0, -1])
    assert t == pytest.approx(h, abs=1e-12)
    assert i == 0
    np.testing.assert_allclose(n, [0, 0, 1])


@given(h=st.floats(0.1, 50), tilt=st.floats(0.0, 1.5), az=angles)
@SETTINGS
def test_plane_oblique_is_h_over_cos(h: float, tilt: float, az: float) -> None:
    d = [np.sin(tilt) * np.cos(az), np.sin(tilt) * np.sin(az), -np.cos(tilt)]
    t, _, _ = cast1(Scene(world({"type": "plane"})), [1.0, 2.0, h], d)
    assert t == pytest.approx(h / np.cos(tilt), rel=1e-9)


@given(normal=st.tuples(coords, coords, coords), point=st.tuples(coords, coords, coords))
@SETTINGS
def test_plane_any_orientation_hit_lies_on_plane(normal, point) -> None:
    n = np.asarray(normal)
    if np.linalg.norm(n) < 1e-3:
        return
    n = unit(n)
    scene = Scene(world({"type": "plane", "point": point, "normal": tuple(n)}))
    origin = np.asarray(point) + 3.0 * n + np.cross(n, [0.3, 0.2, 0.1])
    t, i, nrm = cast1(scene, origin, -n + 0.2 * np.cross(n, [1.0, 0.0, 0.0]))
    assert i == 0
    hit = origin + t * unit(-n + 0.2 * np.cross(n, [1.0, 0.0, 0.0]))
    assert np.dot(hit - point, n) == pytest.approx(0.0, abs=1e-9)
    np.testing.assert_allclose(nrm, n, atol=1e-12)


def test_plane_is_two_sided_and_parallel_rays_miss() -> None:
    scene = Scene(world({"type": "plane", "point": [0, 0, 1], "normal": [0, 0, 1]}))
    t, i, n = cast1(scene, [0, 0, -2], [0, 0, 1])
    assert (t, i) == (pytest.approx(3.0), 0)
    np.testing.assert_allclose(n, [0, 0, -1])  # faces the ray, not the plane's normal
    for origin in ([0, 0, 2], [0, 0, 1]):  # above, and inside the plane
        t, i, n = cast1(scene, origin, [1, 0, 0])
        assert (t, i) == (np.inf, -1)
        assert np.isnan(n).all()


# ---------------------------------------------------------------------------- box


def test_box_axis_aligned_closed_form() -> None:
    scene = Scene(world({"type": "box", "center": [1, 2, 3], "size": [2, 4, 6]}))
    t, i, n = cast1(scene, [-4, 2.5, 3.5], [1, 0, 0])
    assert (t, i) == (pytest.approx(4.0, abs=1e-12), 0)
    np.testing.assert_allclose(n, [-1, 0, 0])
    t, _, n = cast1(scene, [1, 2, 10], [0, 0, -1])
    assert t == pytest.approx(4.0, abs=1e-12)
    np.testing.assert_allclose(n, [0, 0, 1])


def test_box_yawed_closed_form() -> None:
    # A unit cube turned 45 degrees about z shows an edge at distance sqrt(0.5) from its centre.
    cube = {"type": "box", "center": [0, 0, 0], "size": [1, 1, 1], "rpy": [0, 0, np.pi / 4]}
    scene = Scene(world(cube))
    t, _, n = cast1(scene, [-5, 0.1, 0], [1, 0, 0])
    assert t == pytest.approx(5 - np.sqrt(0.5) + 0.1, abs=1e-12)
    assert np.dot(n, [1, 0, 0]) < 0


@given(
    center=st.tuples(coords, coords, coords),
    size=st.tuples(sizes, sizes, sizes),
    rpy=rpys,
    az=angles,
    el=st.floats(-1.5, 1.5),
    dist=st.floats(0.01, 40),
    target=st.tuples(unit_interval, unit_interval, unit_interval),
)
@SETTINGS
def test_box_random_pose_hit_is_on_surface(center, size, rpy, az, el, dist, target) -> None:
    half = np.asarray(size) / 2
    rot = Rotation.from_euler("xyz", rpy)
    scene = Scene(world({"type": "box", "center": center, "size": size, "rpy": rpy}))
    origin = outside_origin(center, np.linalg.norm(half), az, el, dist)
    aim = np.asarray(center) + rot.apply(np.asarray(target) * half)
    d = unit(aim - origin)
    t, i, n = cast1(scene, origin, d)
    assert i == 0
    assert 0 < t <= np.linalg.norm(aim - origin) + 1e-9

    def scaled(s: float) -> float:  # max |local coordinate / half size| at origin + s d
        return float(np.max(np.abs(rot.inv().apply(origin + s * d - center)) / half))

    assert scaled(t) == pytest.approx(1.0, abs=1e-9)
    assert scaled(t - 1e-6) > 1 - 1e-12  # nothing of the box lies before the hit
    # The normal is a face axis of the box, facing the ray.
    assert np.linalg.norm(n) == pytest.approx(1.0)
    assert np.max(np.abs(rot.inv().apply(n))) == pytest.approx(1.0, abs=1e-9)
    assert np.dot(n, d) < 0


@given(rpy=rpys, target=st.tuples(unit_interval, unit_interval, unit_interval), az=angles)
@SETTINGS
def test_box_from_inside_hits_exit(rpy, target, az) -> None:
    half = np.array([1.0, 2.0, 0.5])
    rot = Rotation.from_euler("xyz", rpy)
    scene = Scene(world({"type": "box", "center": [0, 0, 0], "size": tuple(2 * half), "rpy": rpy}))
    origin = rot.apply(np.asarray(target) * half)
    d = unit([np.cos(az), np.sin(az), 0.3])
    t, i, n = cast1(scene, origin, d)
    assert i == 0 and t > 0
    assert np.max(np.abs(rot.inv().apply(origin + t * d)) / half) == pytest.approx(1.0, abs=1e-9)
    assert np.dot(n, d) < 0  # the inward normal at the exit faces the ray


def test_box_rays_parallel_to_faces() -> None:
    scene = Scene(world({"type": "box", "center": [0, 0, 0], "size": [2, 2, 2]}))
    assert cast1(scene, [-5, 0.5, 0.5], [1, 0, 0])[0] == pytest.approx(4.0)
    assert cast1(scene, [-5, 1.5, 0.5], [1, 0, 0])[1] == -1  # beside the box
    assert cast1(scene, [-5, 1.0, 0.0], [1, 0, 0])[0] == pytest.approx(4.0)  # along a face
    assert cast1(scene, [0.5, 0.5, 5], [0, 0, -1])[0] == pytest.approx(4.0)


# ---------------------------------------------------------------------------- sphere


def test_sphere_through_centre() -> None:
    scene = Scene(world({"type": "sphere", "center": [3, 4, 12], "radius": 2.0}))
    t, _, n = cast1(scene, [0, 0, 0], [3, 4, 12])
    assert t == pytest.approx(13.0 - 2.0, abs=1e-12)
    np.testing.assert_allclose(n, -unit([3, 4, 12]), atol=1e-12)


@given(
    center=st.tuples(coords, coords, coords),
    r=sizes,
    az=angles,
    el=st.floats(-1.5, 1.5),
    dist=st.floats(0.01, 40),
    target=st.tuples(unit_interval, unit_interval, unit_interval),
)
@SETTINGS
def test_sphere_closed_form(center, r, az, el, dist, target) -> None:
    c = np.asarray(center)
    origin = outside_origin(c, r, az, el, dist)
    d = unit(c + np.asarray(target) * r / np.sqrt(3) - origin)
    t, i, n = cast1(Scene(world({"type": "sphere", "center": center, "radius": r})), origin, d)
    tca = np.dot(c - origin, d)  # closest approach along the ray
    miss2 = np.dot(c - origin, c - origin) - tca**2
    assert i == 0
    assert t == pytest.approx(tca - np.sqrt(r * r - miss2), rel=1e-9, abs=1e-9)
    np.testing.assert_allclose(n, (origin + t * d - c) / r, atol=1e-7)


def test_sphere_inside_exit_and_miss() -> None:
    scene = Scene(world({"type": "sphere", "center": [0, 0, 0], "radius": 2.0}))
    t, _, n = cast1(scene, [0.5, 0, 0], [1, 0, 0])
    assert t == pytest.approx(1.5)
    np.testing.assert_allclose(n, [-1, 0, 0])
    assert cast1(scene, [-5, 2.001, 0], [1, 0, 0])[1] == -1
    assert cast1(scene, [-5, 0, 0], [-1, 0, 0])[1] == -1  # sphere behind the origin


# ---------------------------------------------------------------------------- cylinder


def cylinder(**kw) -> dict:
    return {"type": "cylinder", "center": [0, 0, 0], "radius": 0.5, "length": 2.0, **kw}


@pytest.mark.parametrize("offset", [0.0, 0.2, 0.49])
def test_cylinder_side_closed_form(offset: float) -> None:
    t, _, n = cast1(Scene(world(cylinder())), [-5, offset, 0.7], [1, 0, 0])
    assert t == pytest.approx(5 - np.sqrt(0.25 - offset**2), abs=1e-12)
    np.testing.assert_allclose(n, [-np.sqrt(0.25 - offset**2) / 0.5, offset / 0.5, 0], atol=1e-12)


def test_cylinder_cap_and_axis_parallel() -> None:
    scene = Scene(world(cylinder()))
    t, _, n = cast1(scene, [0.3, -0.2, 5], [0, 0, -1])
    assert t == pytest.approx(4.0, abs=1e-12)
    np.testing.assert_allclose(n, [0, 0, 1])
    assert cast1(scene, [0.6, 0, 5], [0, 0, -1])[1] == -1  # parallel, outside the radius
    t, _, n = cast1(scene, [0.1, 0, 0], [0, 0, 1])  # inside, along the axis: the top cap
    assert t == pytest.approx(1.0)
    np.testing.assert_allclose(n, [0, 0, -1])
    # Oblique onto the cap rim region: enters through the top cap.
    t, _, _ = cast1(scene, [0, 0, 3], unit([0.1, 0, -1]))
    assert t == pytest.approx(2.0 * np.sqrt(1.01), abs=1e-12)


def test_cylinder_rotated_closed_form() -> None:
    # Axis along map y after rolling 90 degrees about x; a ray along x meets the side.
    scene = Scene(world(cylinder(center=[0, 0, 1], rpy=[np.pi / 2, 0, 0])))
    t, _, _ = cast1(scene, [-5, 0.9, 1.3], [1, 0, 0])
    assert t == pytest.approx(5 - np.sqrt(0.25 - 0.09), abs=1e-12)
    t, _, n = cast1(scene, [0, -5, 1], [0, 1, 0])  # onto the cap, now facing -y
    assert t == pytest.approx(4.0, abs=1e-12)
    np.testing.assert_allclose(n, [0, -1, 0], atol=1e-12)


@given(
    center=st.tuples(coords, coords, coords),
    r=sizes,
    length=sizes,
    rpy=rpys,
    az=angles,
    el=st.floats(-1.5, 1.5),
    dist=st.floats(0.01, 40),
    target=st.tuples(unit_interval, unit_interval, unit_interval),
)
@SETTINGS
def test_cylinder_random_pose_hit_is_on_surface(
    center, r, length, rpy, az, el, dist, target
) -> None:
    rot = Rotation.from_euler("xyz", rpy)
    scene = Scene(world(cylinder(center=center, radius=r, length=length, rpy=rpy)))
    origin = outside_origin(center, np.hypot(r, length / 2), az, el, dist)
    u, v, w = target
    aim = np.asarray(center) + rot.apply([u * r / np.sqrt(2), v * r / np.sqrt(2), w * length / 2])
    d = unit(aim - origin)
    t, i, n = cast1(scene, origin, d)
    assert i == 0

    def scaled(s: float) -> float:  # > 1 outside the solid, 1 on its surface
        q = rot.inv().apply(origin + s * d - center)
        return max(np.hypot(q[0], q[1]) / r, abs(q[2]) / (length / 2))

    assert scaled(t) == pytest.approx(1.0, abs=1e-9)
    assert scaled(t - 1e-6) > 1 - 1e-12
    assert np.dot(n, d) < 0


# ---------------------------------------------------------------------------- mesh


@pytest.fixture(scope="module")
def mesh_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("meshes")
    trimesh.creation.box(extents=(1.0, 1.0, 1.0)).export(root / "cube.obj")
    (root / "tri.obj").write_text("v 0 0 0\nv 2 0 0\nv 0 2 0\nf 1 2 3\n")
    return root


def mesh_world(root: Path, name: str, *objects: dict) -> World:
    path = root / f"{name}.yaml"
    doc = {"name": name, "origin": ORIGIN, "objects": list(objects)}
    path.write_text(yaml.safe_dump(doc))
    return load_world(path)


def test_single_triangle(mesh_dir: Path) -> None:
    w = mesh_world(mesh_dir, "tri", {"type": "mesh", "file": "tri.obj", "position": [0, 0, 1]})
    scene = Scene(w)
    t, i, n = cast1(scene, [0.5, 0.5, 4], [0, 0, -1])
    assert (t, i) == (pytest.approx(3.0, abs=1e-12), 0)
    np.testing.assert_allclose(n, [0, 0, 1])
    t, _, n = cast1(scene, [0.5, 0.5, -4], [0, 0, 1])  # triangles are two-sided
    assert t == pytest.approx(5.0, abs=1e-12)
    np.testing.assert_allclose(n, [0, 0, -1])
    assert cast1(scene, [1.5, 1.5, 4], [0, 0, -1])[1] == -1  # beyond the hypotenuse
    d = unit([0.3, 0.1, -1])
    t, _, _ = cast1(scene, [0.2, 0.2, 2], d)
    assert t == pytest.approx(1.0 / -d[2], abs=1e-12)


@pytest.fixture(scope="module")
def cube_pair(mesh_dir: Path) -> tuple[Scene, Scene]:
    mesh = mesh_world(mesh_dir, "cube", {"type": "mesh", "file": "cube.obj"})
    box = world({"type": "box", "center": [0, 0, 0], "size": [1, 1, 1]})
    return Scene(mesh), Scene(box)


@given(
    az=angles,
    el=st.floats(-1.5, 1.5),
    dist=st.floats(0.0, 30),
    target=st.tuples(st.floats(-1, 1), st.floats(-1, 1), st.floats(-1, 1)),
)
@SETTINGS
def test_cube_mesh_matches_box(cube_pair, az, el, dist, target) -> None:
    mesh, box = cube_pair
    origin = outside_origin([0, 0, 0], 0.3, az, el, dist)  # may start inside the cube
    d = unit(np.asarray(target) - origin)
    hm, hb = mesh.cast(origin, d[None]), box.cast(origin, d[None])
    assert hm.index[0] == hb.index[0]
    assert hm.dist[0] == pytest.approx(hb.dist[0], abs=1e-9)
    if hb.index[0] < 0:
        return
    faces = np.sum(np.abs(np.abs(origin + hb.dist[0] * d) - 0.5) < 1e-7)
    if faces == 1:  # at an edge or corner either face's normal will do
        np.testing.assert_allclose(hm.normal[0], hb.normal[0], atol=1e-9)


def test_posed_mesh_matches_posed_box(mesh_dir: Path) -> None:
    pose = {"rpy": [0.3, -0.5, 1.1]}
    placed = {"type": "mesh", "file": "cube.obj", "position": [4, -2, 1], "scale": 1.7, **pose}
    mesh = mesh_world(mesh_dir, "posed", placed)
    box = world({"type": "box", "center": [4, -2, 1], "size": [1.7, 1.7, 1.7], **pose})
    rng = np.random.default_rng(7)
    origins = rng.uniform(-10, 10, (3000, 3))
    dirs = rng.normal(size=(3000, 3))
    dirs /= np.linalg.norm(dirs, axis=1, keepdims=True)
    aims = np.array([4, -2, 1]) + rng.uniform(-1.5, 1.5, (3000, 3))
    dirs[::2] = (aims - origins)[::2] / np.linalg.norm(aims - origins, axis=1)[::2, None]
    hm, hb = Scene(mesh).cast(origins, dirs), Scene(box).cast(origins, dirs)
    np.testing.assert_array_equal(hm.index, hb.index)
    assert (hb.index == 0).sum() > 500
    hit = hb.index == 0
    np.testing.assert_allclose(hm.dist[hit], hb.dist[hit], atol=1e-9)
    np.testing.assert_allclose(hm.normal[hit], hb.normal[hit], atol=1e-9)


# ---------------------------------------------------------------------------- combined


def test_miss_is_inf_minus_one_nan() -> None:
    hits = Scene(
        world({"type": "plane"}, {"type": "sphere", "center": [0, 0, 5], "radius": 1})
    ).cast(np.array([0.0, 0.0, 1.0]), np.array([[1.0, 0.0, 0.0], [0.0, 0.6, 0.8]]))
    assert isinstance(hits, Hits)
    np.testing.assert_array_equal(hits.dist, [np.inf, np.inf])
    np.testing.assert_array_equal(hits.index, [-1, -1])
    assert hits.index.dtype == np.int64
    assert np.isnan(hits.normal).all()


def test_nearest_of_several_objects_wins() -> None:
    objs = [
        {"type": "plane", "point": [30, 0, 0], "normal": [1, 0, 0]},
        {"type": "box", "center": [20, 0, 0], "size": [1, 1, 1]},
        {"type": "cylinder", "center": [15, 0, 0], "radius": 1.0, "length": 1.0},
        {"type": "sphere", "center": [10, 0, 0], "radius": 1.0},
    ]
    for order in (objs, objs[::-1]):
        t, i, _ = cast1(Scene(world(*order)), [0, 0, 0], [1, 0, 0])
        assert t == pytest.approx(9.0)
        assert order[i]["type"] == "sphere"


def test_t_min_and_t_max() -> None:
    scene = Scene(
        world(
            {"type": "sphere", "center": [5, 0, 0], "radius": 1.0},
            {"type": "box", "center": [10, 0, 0], "size": [1, 1, 1]},
        )
    )
    o, d = [0, 0, 0], [1, 0, 0]
    assert cast1(scene, o, d, t_max=3.9)[:2] == (np.inf, -1)  # nearest surface is beyond
    assert cast1(scene, o, d, t_max=4.0)[:2] == (pytest.approx(4.0), 0)
    assert cast1(scene, o, d, t_min=4.5)[:2] == (pytest.approx(6.0), 0)  # exit of the sphere
    assert cast1(scene, o, d, t_min=7.0)[:2] == (pytest.approx(9.5), 1)
    assert cast1(scene, o, d, t_min=7.0, t_max=9.0)[:2] == (np.inf, -1)
    with pytest.raises(ValueError):
        scene.cast(np.zeros(3), np.array([[1.0, 0, 0]]), t_min=2.0, t_max=1.0)


def test_shared_and_per_ray_origins_agree() -> None:
    """The shared-origin pre-test and the general one give the same hits on the demo."""
    scene = Scene(load_world(DEMO))
    rng = np.random.default_rng(3)
    dirs = rng.normal(size=(4000, 3))
    dirs /= np.linalg.norm(dirs, axis=1, keepdims=True)
    origin = np.array([29.0, -3.0, 1.8])
    shared = scene.cast(origin, dirs)
    nearby = scene.cast(origin + rng.uniform(-1e-9, 1e-9, (4000, 3)), dirs)
    far_apart = np.vstack([np.tile(origin, (4000, 1)), [[500.0, 500.0, 500.0]]])
    general = scene.cast(far_apart, np.vstack([dirs, [[0, 0, -1.0]]]))
    np.testing.assert_array_equal(nearby.index, shared.index)
    np.testing.assert_allclose(nearby.dist, shared.dist, atol=1e-8)
    np.testing.assert_array_equal(general.index[:-1], shared.index)
    np.testing.assert_allclose(general.dist[:-1], shared.dist, rtol=1e-12)
    assert general.dist[-1] == pytest.approx(500.0)
    assert np.all(np.isfinite(shared.dist[dirs[:, 2] < 0]))  # the ground catches every down ray
    hit = shared.index >= 0
    assert np.all(np.einsum("ni,ni->n", shared.normal[hit], dirs[hit]) <= 0)


def test_empty_batch() -> None:
    hits = Scene(world({"type": "plane"})).cast(np.zeros(3), np.zeros((0, 3)))
    assert hits.dist.shape == (0,) and hits.normal.shape == (0, 3)


# ---------------------------------------------------------------------------- ground height


def ramp_top(obj, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Height of a box's top face plane at (x, y), straight from its World fields."""
    rot = Rotation.from_euler("xyz", obj.rpy)
    n = rot.apply([0, 0, 1])
    p = np.asarray(obj.center) + rot.apply([0, 0, obj.size[2] / 2])
    return p[2] - (n[0] * (x - p[0]) + n[1] * (y - p[1])) / n[2]


def test_ground_height_over_ramp() -> None:
    w = load_world(DEMO)
    scene = Scene(w)
    by_name = {o.name: o for o in w.objects}
    y = np.linspace(-7.5, -2.5, 11)
    x = np.full_like(y, 30.0)
    np.testing.assert_allclose(
        scene.ground_height(x, y), ramp_top(by_name["ramp_up"], x, y), atol=1e-9
    )
    np.testing.assert_allclose(
        scene.ground_height(x, -y), ramp_top(by_name["ramp_down"], x, -y), atol=1e-9
    )
    assert scene.ground_height(30.0, 0.0) == pytest.approx(0.6)  # platform top
    assert scene.ground_height(0.0, 0.0) == pytest.approx(1.0)  # top of box_00
    assert scene.ground_height(5.0, -20.0) == pytest.approx(0.0)
    # Along the drive the surface rises to the platform and comes back down, with no step
    # higher than the ramp's slope allows.
    profile = scene.ground_height(np.full(400, 30.0), np.linspace(-9, 9, 400))
    assert profile.max() == pytest.approx(0.6)
    assert np.max(np.abs(np.diff(profile))) < 0.1 * (18 / 399) + 1e-6
    grid = scene.ground_height(np.zeros((2, 3)), np.zeros((2, 3)))
    assert grid.shape == (2, 3)


def test_ground_height_nan_where_nothing_below() -> None:
    scene = Scene(world({"type": "sphere", "center": [0, 0, 0], "radius": 1.0}))
    z = scene.ground_height(np.array([0.0, 5.0]), np.array([0.0, 0.0]))
    assert z[0] == pytest.approx(1.0)
    assert np.isnan(z[1])


def test_directions_that_are_not_unit_vectors_are_refused() -> None:
    """Distances are measured along unit rays (and the sphere test assumes |d| = 1): a cast
    whose directions were never normalised is a ValueError naming a ray, not wrong hits; unit
    directions to rounding (rotated rays) pass."""
    scene = Scene(world({"type": "sphere", "center": [5, 0, 0], "radius": 1.0}))
    rng = np.random.default_rng(3)
    d = rng.normal(size=(1000, 3))
    with pytest.raises(ValueError, match=r"directions must be unit vectors: ray 0 .* has length"):
        scene.cast(np.zeros(3), d)
    with pytest.raises(ValueError, match="unit vectors"):
        scene.cast(np.zeros(3), np.array([[2.0, 0.0, 0.0]]))
    unit = d / np.linalg.norm(d, axis=1, keepdims=True)
    rot = Rotation.from_euler("xyz", rng.uniform(-3, 3, 3)).as_matrix()
    hits = scene.cast(np.zeros(3), unit @ rot.T)
    assert np.isfinite(hits.dist).any()
    assert len(scene.cast(np.zeros(3), np.empty((0, 3))).dist) == 0
