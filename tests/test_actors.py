"""Moving actors: exact rays at each ray's own time, ground truth on /truth/objects, refusals."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.spatial.transform import Rotation

from conftest import cli, demo_world, write_yaml
from simconform.actors import ActorSet, MovingScene
from simconform.adapters.reference import ReferenceBackend
from simconform.bag.reader import open_bag
from simconform.raycast import Scene
from simconform.spec import load_spec
from simconform.trajectory import load_trajectory
from simconform.world import World, load_world

T0 = 1_704_067_200_000_000_000

ACTORS = [
    {
        "name": "car_a", "class": "car",
        "shape": {"type": "box", "center": [0, 0, 0.8], "size": [4.5, 1.9, 1.6]},
        "path": [[0, 25, -8, 0, 1.5708], [10, 25, 30, 0, 1.5708]],
    },
    {
        "name": "ped_b", "class": "pedestrian", "loop": True,
        "shape": {"type": "cylinder", "center": [0, 0, 0.9], "radius": 0.3, "length": 1.8},
        "path": [[0, 34, -3, 0, 0], [4, 34, 3, 0, 0], [8, 34, -3, 0, 0]],
    },
    {
        "name": "ball",
        "shape": {"type": "sphere", "center": [0, 0, 1], "radius": 0.5},
        "path": [[0, 28, 6, 0, 0], [5, 33, 6, 0, 3]],
    },
]  # fmt: skip


def _world(tmp_path: Path, actors=ACTORS) -> Path:
    w = demo_world()
    for o in w["objects"]:
        if o.get("type") == "mesh":
            o["file"] = str(Path(__file__).resolve().parents[1] / "worlds" / o["file"])
    w["objects"][5]["class"] = "barrier"
    w["actors"] = actors
    return write_yaml(tmp_path / "actors.yaml", w)


@settings(max_examples=40, deadline=None)
@given(
    t=st.floats(0, 12),
    yaw=st.floats(-3.2, 3.2),
    seed=st.integers(0, 2**32 - 1),
    kind=st.sampled_from(["box", "cylinder", "sphere"]),
)
def test_a_moving_actor_is_hit_exactly_where_it_stands_at_the_ray_time(t, yaw, seed, kind):
    """Casting at time t equals casting a static world with the actor placed at its pose at t:
    the ray is carried into the actor's frame, so no range error comes from the motion."""
    rng = np.random.default_rng(seed)
    shape = {
        "box": {"type": "box", "center": [0.3, -0.2, 0.8], "size": [4.0, 2.0, 1.5],
                "rpy": [0.1, 0.0, 0.4]},
        "cylinder": {"type": "cylinder", "center": [0.1, 0, 1.0], "radius": 0.4, "length": 2.0,
                     "rpy": [0.0, 0.3, 0.0]},
        "sphere": {"type": "sphere", "center": [0.0, 0.5, 1.0], "radius": 0.7},
    }[kind]  # fmt: skip
    path = [[0, 0, 0, 0, 0], [6, 8, 3, 0.5, yaw], [12, 2, -4, 0, -yaw]]
    world = World.model_validate(
        {"name": "w", "origin": {"lat": 0, "lon": 0, "alt": 0},
         "objects": [{"type": "plane"}], "actors": [{"name": "a", "shape": shape, "path": path}]}
    )  # fmt: skip
    actors = ActorSet(world, T0)
    t_ns = T0 + round(t * 1e9)
    xyz, yaw_t = actors.pose(0, np.array([t_ns]))
    # the same shape placed in the map at the actor's pose, as a static object
    turn = Rotation.from_euler("z", yaw_t[0])
    placed = dict(shape, center=list(turn.apply(shape["center"]) + xyz[0]))
    if "rpy" in shape:
        placed["rpy"] = list((turn * Rotation.from_euler("xyz", shape["rpy"])).as_euler("xyz"))
    static = World.model_validate(
        {"name": "s", "origin": {"lat": 0, "lon": 0, "alt": 0},
         "objects": [{"type": "plane"}, placed]}
    )  # fmt: skip
    phi, r = rng.uniform(0, 2 * np.pi), rng.uniform(6, 15)
    origin = xyz[0] + [r * np.cos(phi), r * np.sin(phi), rng.uniform(0.5, 4)]
    target = xyz[0] + rng.normal(0, 1.5, (2000, 3)) + [0, 0, 1]
    d = target - origin
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    moving = MovingScene(world, T0).cast(origin, d, 0.0, 200.0, t_ns)
    fixed = Scene(static).cast(origin, d, 0.0, 200.0)
    assert np.array_equal(moving.index == 1, fixed.index == 1)  # actor 0 is index 1 (one plane)
    on = fixed.index == 1
    assert on.sum() > 0
    np.testing.assert_allclose(moving.dist[on], fixed.dist[on], rtol=0, atol=1e-9)
    np.testing.assert_allclose(moving.normal[on], fixed.normal[on], rtol=0, atol=1e-9)


def test_every_return_on_an_actor_lies_on_it_at_its_own_column_time(tmp_path: Path) -> None:
    """Each lidar point counted for an actor, carried to the map with its column's pose and
    into the actor's frame at that column's time, lies on the actor's box surface."""
    world = load_world(_world(tmp_path))
    spec = load_spec(Path(__file__).resolve().parents[1] / "sensors_spec" / "rover.yaml")
    traj = load_trajectory(
        Path(__file__).resolve().parents[1] / "worlds" / "demo.tum", world
    ).shifted(1_704_067_200)
    backend = ReferenceBackend()
    backend.open(world, spec)
    actors = ActorSet(world, traj.start_ns)
    s = spec.sensors["lidar"]
    mount = backend.mounts["lidar"]
    counted = 0
    for t in (1.0, 2.5, 4.0):
        t_ns = traj.start_ns + round(t * 1e9)
        sweep = backend.capture("lidar", t_ns, traj)
        col_ns = t_ns + np.round(s.column_offsets_s() * 1e9).astype(np.int64)
        sensor = traj.pose_at(col_ns).compose(mount)
        for a in range(len(actors)):
            rings, cols = np.nonzero(sweep.objects == len(world.objects) + a)
            counted += len(rings)
            pts = sensor[cols].apply(sweep.points[rings, cols])
            xyz, yaw = actors.pose(a, col_ns[cols])
            local = Rotation.from_euler("z", yaw[:, None]).inv().apply(pts - xyz)
            box = actors._local[a]
            inside = box.rot.inv().apply(local - box.center)
            excess = np.abs(inside) - box.size / 2
            assert np.all(excess <= 1e-9)  # within the box
            if a == 0:  # a box actor: every point on one of its faces
                assert np.all(np.max(excess, axis=1) >= -1e-9)
    assert counted > 100


def test_a_run_writes_truth_objects_with_boxes_and_point_counts(tmp_path: Path) -> None:
    world = _world(tmp_path)
    out = tmp_path / "run"
    r = cli("run", "--world", str(world), "--duration", "2", "--out", str(out), "--quiet")
    assert r.returncode in (0, 1), r.stderr  # a 2 s run: PASS or INCONCLUSIVE
    reader = open_bag(out / "bag")
    try:
        types = {c.topic: c.msgtype for c in reader.connections}
        assert types["/truth/objects"] == "vision_msgs/msg/Detection3DArray"
        assert types["/truth/objects/lidar_points"] == "std_msgs/msg/UInt32MultiArray"
        conns = [c for c in reader.connections if c.topic.startswith("/truth/objects")]
        arrays, counts = [], []
        for c, _, raw in reader.messages(connections=conns):
            msg = reader.deserialize(raw, c.msgtype)
            (arrays if c.topic == "/truth/objects" else counts).append(msg)
    finally:
        reader.close()
    assert len(arrays) == len(counts) == 20  # one per 10 Hz sweep
    seen = {}
    for arr, cnt in zip(arrays, counts):
        assert len(arr.detections) == len(cnt.data)
        assert arr.header.frame_id == "lidar_link"
        for det, n in zip(arr.detections, cnt.data):
            seen.setdefault(det.id, []).append(int(n))
            assert det.results[0].hypothesis.score == 1.0
    classes = {d.id: d.results[0].hypothesis.class_id for d in arrays[0].detections}
    assert classes["car_a"] == "car" and classes["ped_b"] == "pedestrian"
    assert classes["ball"] == "unlabeled" and classes.get("box_01") == "barrier"
    assert max(seen["car_a"]) > 50 and max(seen["ped_b"]) > 10
    # the car's box: size as declared, its centre moving with the car relative to the sensor
    car = next(d for d in arrays[-1].detections if d.id == "car_a")
    assert (car.bbox.size.x, car.bbox.size.y, car.bbox.size.z) == pytest.approx((4.5, 1.9, 1.6))


def _reference_against(tmp_path: Path, backend: str, duration: str) -> dict:
    """The actors world on the reference and on `backend` (rover spec), compared: compare.json."""
    import json

    world = _world(tmp_path)
    spec = str(Path(__file__).resolve().parents[1] / "sensors_spec" / "rover.yaml")
    for b in ("reference", backend):
        r = cli("run", "--world", str(world), "--spec", spec, "--backend", b,
                "--duration", duration, "--out", str(tmp_path / b), "--quiet")  # fmt: skip
        assert r.returncode in (0, 1), r.stderr
    out = tmp_path / "cmp"
    cli("compare", str(tmp_path / "reference"), str(tmp_path / backend), "--out", str(out))
    return json.loads((out / "compare.json").read_text())


@pytest.mark.gazebo
def test_gazebo_moves_actors_as_its_engine_model_predicts(tmp_path: Path) -> None:
    """Gazebo's driver system moves each actor model every physics step: gpu_lidar sees the
    actors, its per-actor counts differ from the reference's by the engine's known
    approximations (global shutter, texel rays, tessellation) and match the engine model's."""
    report = _reference_against(tmp_path, "gazebo", "2")
    lidar = report["truth"]["lidar"]
    assert lidar["objects_count_agreement_model"]["verdict"] == "pass"
    rows = report["objects"]["lidar"]
    for name in ("car_a", "ped_b", "ball"):
        assert rows[name]["points_b"] > 100  # Gazebo sees every actor where it should be
        assert rows[name]["points_b"] == pytest.approx(rows[name]["points_model"], rel=0.02)


def test_actor_paths_must_be_increasing_in_time(tmp_path: Path) -> None:
    bad = [dict(ACTORS[0], path=[[0, 0, 0, 0, 0], [0, 1, 0, 0, 0]])]
    r = cli("run", "--world", str(_world(tmp_path, bad)), "--duration", "1",
            "--out", str(tmp_path / "run"))  # fmt: skip
    assert r.returncode == 2
    assert "actors.0.path" in r.stderr and "strictly increasing" in r.stderr
    assert not (tmp_path / "run").exists()


def test_mujoco_moves_actors_and_compare_checks_objects_against_the_reference(
    tmp_path: Path,
) -> None:
    """MuJoCo carries each actor on a mocap body moved per lidar column: its per-object point
    counts and boxes match the exact reference's, which compare checks per object."""
    report = _reference_against(tmp_path, "mujoco", "1.5")
    lidar = report["truth"]["lidar"]
    assert lidar["objects_count_agreement"]["verdict"] == "pass"
    assert lidar["objects_box_offset_max"]["measured"] == pytest.approx(0.0, abs=1e-6)
    rows = report["objects"]["lidar"]
    assert rows["car_a"]["points_a"] > 100
    assert rows["car_a"]["points_a"] == rows["car_a"]["points_b"]
    assert "ground-truth objects" in (tmp_path / "cmp" / "compare.md").read_text()


def test_nuscenes_export_annotates_actors_where_they_are_at_each_sample(tmp_path: Path) -> None:
    import json

    world = _world(tmp_path)
    run = tmp_path / "run"
    r = cli("run", "--world", str(world), "--duration", "1.5", "--out", str(run), "--quiet")
    assert r.returncode in (0, 1), r.stderr
    r = cli("export", str(run), "--format", "nuscenes", "--out", str(tmp_path / "nus"))
    assert r.returncode == 0, r.stderr
    tables = tmp_path / "nus" / "v1.0-simconform"
    ann = json.loads((tables / "sample_annotation.json").read_text())
    samples = {s["token"]: s for s in json.loads((tables / "sample.json").read_text())}
    attrs = {a["token"]: a["name"] for a in json.loads((tables / "attribute.json").read_text())}
    actors = ActorSet(load_world(world), json.loads((run / "run.json").read_text())["start_ns"])
    car = [a for a in ann if [attrs[t] for t in a["attribute_tokens"]] == ["vehicle.moving"]]
    assert len(car) >= 10
    for a in car:
        box = actors.boxes(samples[a["sample_token"]]["timestamp"] * 1000)[0]  # car_a
        np.testing.assert_allclose(a["translation"], box.center, atol=1e-6)
    assert car[0]["translation"][1] < car[-1]["translation"][1] - 1  # it drove north
