"""World -> MJCF: the demo compiles, and MuJoCo's ray casts agree with the exact reference."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import trimesh
import yaml

from simconform.adapters.mjcf import geom_object_index, world_to_mjcf
from simconform.raycast import Scene
from simconform.world import World, load_world

mujoco = pytest.importorskip("mujoco")

DEMO = Path(__file__).resolve().parents[1] / "worlds" / "demo.yaml"
GEOM_TYPES = {
    "plane": mujoco.mjtGeom.mjGEOM_PLANE,
    "box": mujoco.mjtGeom.mjGEOM_BOX,
    "cylinder": mujoco.mjtGeom.mjGEOM_CYLINDER,
    "sphere": mujoco.mjtGeom.mjGEOM_SPHERE,
    "mesh": mujoco.mjtGeom.mjGEOM_MESH,
}


def compile_world(world: World, extra: str = ""):
    model = mujoco.MjModel.from_xml_string(world_to_mjcf(world, extra))
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)  # geom_xpos / geom_xmat, which mj_ray reads
    return model, data


def mj_cast(model, data, origin, direction) -> tuple[float, int]:
    """mj_ray as (distance with inf for none, world object index)."""
    gid = np.zeros(1, dtype=np.int32)
    o, d = np.asarray(origin, dtype=float), np.asarray(direction, dtype=float)
    dist = mujoco.mj_ray(model, data, o, d, None, 1, -1, gid)
    if dist < 0:
        return np.inf, -1
    return dist, int(geom_object_index(model)[gid[0]])


@pytest.fixture(scope="module")
def demo():
    world = load_world(DEMO)
    model, data = compile_world(world)
    return world, Scene(world), model, data


def test_demo_compiles_one_geom_per_object(demo) -> None:
    world, _, model, _ = demo
    assert model.ngeom == len(world.objects)
    np.testing.assert_array_equal(geom_object_index(model), np.arange(len(world.objects)))
    for i, obj in enumerate(world.objects):
        assert model.geom_type[i] == GEOM_TYPES[obj.type]
        assert mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_GEOM, i) == obj.name
        np.testing.assert_allclose(model.geom_rgba[i], [*obj.color, 1.0], atol=1e-6)


def test_extra_bodies_are_not_world_objects(demo) -> None:
    world = demo[0]
    extra = '<body name="rover" pos="0 0 3"><geom name="chassis" type="box" size="1 1 1"/></body>'
    model, _ = compile_world(world, extra)
    index = geom_object_index(model)
    assert model.ngeom == len(world.objects) + 1
    assert index[mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, "chassis")] == -1
    assert sorted(index[index >= 0]) == list(range(len(world.objects)))


def aim_at(obj) -> tuple[np.ndarray, np.ndarray]:
    """A ray from 6 m away, slightly off centre, towards a demo object."""
    if obj.type == "plane":
        return np.array([8.0, -20.0, 1.2]), np.array([0.3, 0.1, -1.0]) / np.sqrt(1.1)
    center = np.asarray(obj.position if obj.type == "mesh" else obj.center, dtype=float)
    origin = center + np.array([-5.0, -3.0, 0.4])
    d = center + np.array([0.05, -0.1, 0.1]) - origin
    return origin, d / np.linalg.norm(d)


@pytest.mark.parametrize(
    "name",
    ["ground", "ramp_up", "box_02", "box_07", "cylinder_03", "cylinder_17", "sphere_05", "rock"],
)
def test_mj_ray_matches_reference_per_primitive(demo, name: str) -> None:
    world, scene, model, data = demo
    i = [o.name for o in world.objects].index(name)
    origin, d = aim_at(world.objects[i])
    hits = scene.cast(origin, d[None])
    assert hits.index[0] == i
    dist, index = mj_cast(model, data, origin, d)
    assert index == i
    # Analytic primitives agree to rounding; mesh vertices are float32 in MuJoCo (~1e-7).
    assert dist == pytest.approx(hits.dist[0], abs=1e-6)


def test_cylinder_side_and_rotated_box(demo) -> None:
    world, scene, model, data = demo
    names = [o.name for o in world.objects]
    # Horizontal ray at mid height onto cylinder_04's side: closed form 5 - radius.
    origin, d = np.array([-11.0, -5.0, 1.0]), np.array([1.0, 0.0, 0.0])
    expected = (pytest.approx(4.2, abs=1e-9), names.index("cylinder_04"))
    assert mj_cast(model, data, origin, d) == expected
    assert scene.cast(origin, d[None]).dist[0] == pytest.approx(4.2, abs=1e-12)
    # Straight down onto the pitched ramp.
    origin, d = np.array([30.0, -5.0, 5.0]), np.array([0.0, 0.0, -1.0])
    hits = scene.cast(origin, d[None])
    assert hits.index[0] == names.index("ramp_up")
    assert mj_cast(model, data, origin, d)[0] == pytest.approx(hits.dist[0], abs=1e-9)


def test_random_rays_agree_on_demo(demo) -> None:
    _, scene, model, data = demo
    rng = np.random.default_rng(11)
    n = 3000
    origins = np.c_[rng.uniform(-50, 50, n), rng.uniform(-40, 40, n), rng.uniform(0.2, 4, n)]
    dirs = rng.normal(size=(n, 3))
    dirs /= np.linalg.norm(dirs, axis=1, keepdims=True)
    ref = scene.cast(origins, dirs)
    got = np.array([mj_cast(model, data, o, d)[0] for o, d in zip(origins, dirs, strict=True)])
    np.testing.assert_array_equal(np.isfinite(got), np.isfinite(ref.dist))
    # Analytic primitives agree to rounding. The mesh differs by MuJoCo's float32 vertices,
    # amplified at grazing incidence (object indices may differ only at exact ties, such as a
    # cylinder's bottom cap standing on the ground, so distances are compared).
    mesh = ref.index == [o.type for o in demo[0].objects].index("mesh")
    hit = np.isfinite(ref.dist) & ~mesh
    np.testing.assert_allclose(got[hit], ref.dist[hit], atol=1e-9)
    np.testing.assert_allclose(got[mesh], ref.dist[mesh], atol=1e-5)


def test_mj_multiray_matches_reference(demo) -> None:
    _, scene, model, data = demo
    el = np.deg2rad(np.linspace(-15, 15, 16))[:, None]
    az = np.linspace(0, 2 * np.pi, 90, endpoint=False)[None, :]
    xyz = np.broadcast_arrays(np.cos(el) * np.cos(az), np.cos(el) * np.sin(az), np.sin(el))
    dirs = np.stack(xyz, axis=-1).reshape(-1, 3)
    origin = np.array([4.0, 3.0, 1.2])
    n = len(dirs)
    geomid, dist = np.zeros(n, np.int32), np.zeros(n)
    vec = np.ascontiguousarray(dirs).reshape(-1)
    mujoco.mj_multiRay(model, data, origin, vec, None, 1, -1, geomid, dist, None, n, 100.0)
    ref = scene.cast(origin, dirs, t_max=100.0)
    got = np.where(dist < 0, np.inf, dist)
    np.testing.assert_array_equal(np.isfinite(got), np.isfinite(ref.dist))
    hit = np.isfinite(ref.dist)
    np.testing.assert_allclose(got[hit], ref.dist[hit], atol=1e-6)


def test_known_differences(tmp_path: Path) -> None:
    """What MuJoCo does differently from the exact geometry, pinned so a change shows up.

    - mj_ray intersects a mesh's own triangles, not the convex hull MuJoCo builds for
      collisions: a ray through the gap of a two-part (non-convex) mesh misses it.
    - MuJoCo planes are one-sided; the reference's are two-sided.
    - Rays from inside a box, sphere, cylinder or closed mesh hit the exit point in both.
    """
    left = trimesh.creation.box(extents=(1, 1, 1))
    left.apply_translation((-1.5, 0, 0))
    right = trimesh.creation.box(extents=(1, 1, 1))
    right.apply_translation((1.5, 0, 0))
    trimesh.util.concatenate([left, right]).export(tmp_path / "two.obj")
    doc = {
        "name": "diff",
        "origin": {"lat": 0.0, "lon": 0.0, "alt": 0.0},
        "objects": [
            {"type": "mesh", "file": "two.obj"},
            {"type": "plane", "point": [0, 0, -3], "normal": [0, 0, 1]},
            {"type": "sphere", "center": [0, 6, 0], "radius": 1.0},
            {"type": "box", "center": [0, -6, 0], "size": [1, 2, 3], "rpy": [0.1, 0.2, 0.3]},
        ],
    }
    (tmp_path / "w.yaml").write_text(yaml.safe_dump(doc))
    world = load_world(tmp_path / "w.yaml")
    model, data = compile_world(world)
    scene = Scene(world)

    def both(origin, d):
        origin, d = np.asarray(origin, float), np.asarray(d, float) / np.linalg.norm(d)
        hits = scene.cast(origin, d[None])
        return mj_cast(model, data, origin, d), (hits.dist[0], hits.index[0])

    # Through the gap between the two parts: both reach the plane below.
    (mj, ref) = both([0, 0, 5], [0, 0, -1])
    assert mj == (pytest.approx(8.0), 1) and ref == (pytest.approx(8.0), 1)
    (mj, ref) = both([1.5, 0, 5], [0, 0, -1])
    assert mj == (pytest.approx(4.5, abs=1e-6), 0) and ref == (pytest.approx(4.5), 0)
    # From below the plane: the reference hits it, MuJoCo does not.
    (mj, ref) = both([5, 0, -6], [0, 0, 1])
    assert mj == (np.inf, -1) and ref == (pytest.approx(3.0), 1)
    # From inside solids: the exit point in both.
    inside = (([0, 6, 0.2], [1, 0, 0], 2), ([0, -6, 0], [0, 1, 0], 3), ([1.5, 0, 0], [0, 0, 1], 0))
    for origin, d, obj in inside:
        (mj, ref) = both(origin, d)
        assert mj[1] == ref[1] == obj
        assert mj[0] == pytest.approx(ref[0], abs=1e-6)


def test_flat_and_tiny_meshes_compile_and_ray_cast(tmp_path: Path) -> None:
    """MuJoCo cannot hull a flat mesh or take one of 3 vertices; both still ray cast."""
    (tmp_path / "tri.obj").write_text("v 0 0 0\nv 2 0 0\nv 0 2 0\nf 1 2 3\n")
    (tmp_path / "quad.obj").write_text("v 0 0 0\nv 2 0 0\nv 0 2 0\nv 2 2 0\nf 1 2 3\nf 2 4 3\n")
    doc = {
        "name": "flat",
        "origin": {"lat": 0.0, "lon": 0.0, "alt": 0.0},
        "objects": [
            {"type": "mesh", "file": "tri.obj", "position": [0, 0, 1]},
            {"type": "mesh", "file": "quad.obj", "position": [5, 0, 2], "rpy": [0.2, 0, 0]},
        ],
    }
    (tmp_path / "w.yaml").write_text(yaml.safe_dump(doc))
    world = load_world(tmp_path / "w.yaml")
    model, data = compile_world(world)
    scene = Scene(world)
    for origin, obj in (([0.5, 0.5, 4.0], 0), ([6.0, 1.0, 6.0], 1), ([1.5, 1.5, 4.0], -1)):
        d = np.array([0.0, 0.0, -1.0])
        hits = scene.cast(np.asarray(origin), d[None])
        dist, index = mj_cast(model, data, origin, d)
        assert index == hits.index[0] == obj
        assert dist == pytest.approx(hits.dist[0], abs=1e-6)
