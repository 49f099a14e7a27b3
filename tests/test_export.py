"""`simconform export`: KITTI read back by KISS-ICP's own KITTI loader, nuScenes tables checked
record by record (the official devkit loads them in tests/test_export_nuscenes.py), both
against the run's truth and the reference ray caster."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from export_world import WORLD, cast_to, make_run, published

from conftest import cli
from simconform.downstream.sweeps import TruePoses
from simconform.frames import Pose
from simconform.spec import Spec

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def lot(tmp_path_factory) -> Path:
    return make_run(tmp_path_factory.mktemp("lot"))


def _export(run: Path, out: Path, fmt: str, *flags: str) -> dict:
    res = cli("export", str(run), "--format", fmt, "--out", str(out), *flags)
    assert res.returncode == 0, res.stdout + res.stderr
    return json.loads((out / "export.json").read_text())


def _lidar_truth(run: Path) -> TruePoses:
    m = json.loads((run / "run.json").read_text())
    s = Spec.model_validate(m["spec_content"]).sensors["lidar"]
    return TruePoses(run / "gt" / "base_link.tum", Pose.from_xyz_rpy(s.mount.xyz, s.mount.rpy))


def _correct_kitti_scan(p: np.ndarray) -> np.ndarray:
    """KISS-ICP's CorrectKITTIScan: every point turned 0.205 deg about p x z (Rodrigues)."""
    angle = np.deg2rad(0.205)
    k = np.cross(p, [0.0, 0.0, 1.0])
    k /= np.linalg.norm(k, axis=1, keepdims=True)
    dot = np.sum(k * p, axis=1, keepdims=True)
    return p * np.cos(angle) + np.cross(k, p) * np.sin(angle) + k * dot * (1 - np.cos(angle))


def test_kitti_is_read_by_kiss_icps_loader(lot: Path, tmp_path: Path) -> None:
    """Scans, poses and times through kiss_icp.datasets.kitti: the poses are the lidar's true
    poses (relative to the first scan), and every point lies on the surface the reference ray
    caster finds along its ray from the lidar at the scan instant (noiseless lidar)."""
    from kiss_icp.datasets.kitti import KITTIOdometryDataset

    r = _export(lot, tmp_path / "k", "kitti")
    ds = KITTIOdometryDataset(tmp_path / "k", "00")
    assert len(ds) == r["scans"] == 19 and r["skipped"] == {"clouds beyond the recorded truth": 1}
    t = r["time0_ns"] + np.round(ds.get_frames_timestamps()[:, 0] * 1e9).astype(np.int64)
    assert np.all(np.diff(t) == 100_000_000)
    truth = _lidar_truth(lot).at(t)
    rel = truth[0].inverse().compose(truth)
    np.testing.assert_allclose(ds.gt_poses[:, :3, 3], rel.t, atol=2e-5)  # Tr read as float32
    np.testing.assert_allclose(ds.gt_poses[:, :3, :3], rel.rot.as_matrix(), atol=2e-6)
    world, sweeps = lot.parent / "lot.yaml", published(lot)
    for i in (0, 9, 18):
        raw = np.fromfile(tmp_path / "k/sequences/00/velodyne" / f"{i:06d}.bin", "<f4")
        xyz = raw.reshape(-1, 4)[:, :3].astype(np.float64)
        # the loader tilts every point by KITTI's HDL-64 correction; the file itself is ours
        np.testing.assert_allclose(ds[i][0], _correct_kitti_scan(xyz), atol=1e-5)
        # each point, placed with the scan's pose, is where the lidar saw it from where it was
        origins = _lidar_truth(lot).at(sweeps[i].times_ns).t
        err, _idx = cast_to(world, origins, truth[i].apply(xyz))
        assert len(xyz) == len(sweeps[i].points) > 3000 and np.max(err) < 1e-3, np.max(err)


def test_kitti_without_deskew_keeps_the_published_points(lot: Path, tmp_path: Path) -> None:
    """--no-deskew writes the published points unchanged. Deskewing leaves the sweep start's
    points (the scan instant) where they are and moves the others by the vehicle's motion
    during the sweep: 0.39-0.65 m at 3 m/s on this drive (docs/export.md)."""
    _export(lot, tmp_path / "raw", "kitti", "--no-deskew")
    _export(lot, tmp_path / "k", "kitti")
    sweeps = published(lot)
    for i in (0, 18):
        raw, de = (
            np.fromfile(tmp_path / d / "sequences/00/velodyne" / f"{i:06d}.bin", "<f4").reshape(
                -1, 4
            )[:, :3]
            for d in ("raw", "k")
        )
        np.testing.assert_array_equal(raw, sweeps[i].points.astype(np.float32))
        moved = np.linalg.norm(raw - de, axis=1)
        at_start = sweeps[i].times_ns == sweeps[i].stamp_ns
        assert at_start.sum() >= 4 and np.max(moved[at_start]) < 1e-5
        assert 0.3 < np.max(moved) < 0.8, np.max(moved)


def _tables(root: Path) -> dict[str, list[dict]]:
    return {p.stem: json.loads(p.read_text()) for p in (root / "v1.0-simconform").glob("*.json")}


def test_nuscenes_tables_are_consistent(lot: Path, tmp_path: Path) -> None:
    """Every token resolves, prev/next chains run forward in time, every file exists, and each
    box holds exactly num_lidar_pts points of its sample's cloud, among them every point the ray
    caster says hit that object."""
    r = _export(lot, tmp_path / "n", "nuscenes")
    db = _tables(tmp_path / "n")
    index = {t: {row["token"]: row for row in rows} for t, rows in db.items()}
    assert all(len(index[t]) == len(rows) for t, rows in db.items())  # unique tokens
    assert r["samples"] == len(db["sample"]) == 19
    for sd in db["sample_data"]:
        assert sd["sample_token"] in index["sample"] and sd["ego_pose_token"] in index["ego_pose"]
        assert (tmp_path / "n" / sd["filename"]).is_file()
        for key in ("prev", "next"):
            if sd[key]:
                other = index["sample_data"][sd[key]]
                assert (other["timestamp"] > sd["timestamp"]) == (key == "next")
    keys = [sd for sd in db["sample_data"] if sd["is_key_frame"]]
    assert len({(sd["sample_token"], sd["calibrated_sensor_token"]) for sd in keys}) == len(keys)
    cats = {i["token"]: index["category"][i["category_token"]]["name"] for i in db["instance"]}
    assert sorted(cats.values()) == ["static_object.pole", "static_object.unlabeled",
                                     "static_object.unlabeled", "vehicle.car"]  # fmt: skip
    cal = {c["token"]: c for c in db["calibrated_sensor"]}
    world, sweeps, truth = lot.parent / "lot.yaml", published(lot), _lidar_truth(lot)
    lidar_keys = sorted((s for s in keys if s["fileformat"] == "pcd"), key=lambda s: s["timestamp"])
    names = {o["name"]: i for i, o in enumerate(WORLD["objects"])}
    seen: dict[str, int] = {}  # points the ray caster says hit each object
    for ann in db["sample_annotation"]:
        k = next(i for i, s in enumerate(lidar_keys) if s["sample_token"] == ann["sample_token"])
        sd = lidar_keys[k]
        pts = np.fromfile(tmp_path / "n" / sd["filename"], "<f4").reshape(-1, 5)[:, :3]
        ego = index["ego_pose"][sd["ego_pose_token"]]
        c = cal[sd["calibrated_sensor_token"]]
        lidar = _pose(ego).compose(_pose(c))
        in_map = lidar.apply(pts.astype(float))
        box = _pose(ann)
        w, length, h = ann["size"]
        half = np.abs(box.inverse().apply(in_map)) - np.array([length, w, h]) / 2
        inside = np.all(half <= 1e-3, axis=1)  # faces included, 1 mm as the cast check
        # ground points lie exactly on a box's bottom face: they may count or not
        assert np.all(half < -1e-3, axis=1).sum() <= ann["num_lidar_pts"] <= inside.sum()
        err, idx = cast_to(world, truth.at(sweeps[k].times_ns).t, in_map)
        inst = index["instance"][ann["instance_token"]]
        name = _name(inst, db)
        assert np.all(inside[idx == names[name]]) and np.all(err < 1e-3)
        seen[name] = seen.get(name, 0) + int(np.sum(idx == names[name]))
    assert seen["car"] > 500 and seen["pole"] > 50 and seen["ball"] > 50, seen
    assert sum(a["num_lidar_pts"] > 0 for a in db["sample_annotation"]) >= 19


def _pose(rec: dict) -> Pose:
    w, x, y, z = rec["rotation"]
    return Pose.from_xyz_quat(rec["translation"], [x, y, z, w])


def _name(instance: dict, db: dict) -> str:
    """The world object of an instance: its annotation's box centre names it."""
    from export_world import WORLD

    first = next(
        a for a in db["sample_annotation"] if a["token"] == instance["first_annotation_token"]
    )
    c = np.array(first["translation"])
    return next(
        o["name"] for o in WORLD["objects"] if "center" in o and np.allclose(o["center"], c)
    )


def test_bad_input_is_refused_and_nothing_written(lot: Path, tmp_path: Path) -> None:
    for args, says in (
        (("--format", "sdf"), "export-sdf"),
        (("--format", "kitty"), "expected one of"),
        (("--format", "kitti", "--sensor", "camera"), "expected a lidar"),
    ):
        res = cli("export", str(lot), *args, "--out", str(tmp_path / "x"))
        assert res.returncode == 2 and says in res.stderr and "Traceback" not in res.stderr
        assert not (tmp_path / "x").exists()
    res = cli("export", str(tmp_path), "--format", "kitti", "--out", str(tmp_path / "x"))
    assert res.returncode == 2 and "run.json" in res.stderr
    _export(lot, tmp_path / "k", "kitti")
    res = cli("export", str(lot), "--format", "kitti", "--out", str(tmp_path / "k"))
    assert res.returncode == 2 and "--force" in res.stderr
    _export(lot, tmp_path / "k", "kitti", "--force")


def test_a_world_objects_class_is_optional_and_older_runs_still_compare() -> None:
    """`class` is read and written as `class`; a run.json from before it (no key) has the same
    world for compare as one that writes `class: null`; a bad class is one clear refusal."""
    from pydantic import ValidationError

    from simconform.export.boxes import category
    from simconform.verify.compare.identity import _identity
    from simconform.world import World

    world = World.model_validate(WORLD)
    dumped = world.model_dump(mode="json")
    assert [o.get("class") for o in dumped["objects"]] == [None, "car", "pole", None, None]
    old = json.loads(json.dumps(dumped))
    for o in old["objects"]:
        if o["class"] is None:
            del o["class"]
    assert _identity({"world_content": old}, "world_content") == _identity(
        {"world_content": dumped}, "world_content"
    )
    assert [category(o.class_) for o in world.objects[1:4]] == [
        "vehicle.car", "static_object.pole", "static_object.unlabeled"
    ]  # fmt: skip
    with pytest.raises(ValidationError, match="class"):
        World.model_validate({**WORLD, "objects": [{**WORLD["objects"][1], "class": "a car"}]})
