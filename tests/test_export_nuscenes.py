"""The nuScenes export read by the official nuscenes-devkit (PyPI nuscenes-devkit 1.2.0).

The devkit pins numpy<2 and the main test env runs numpy 2, so this file runs in its own env,
`python3 -m tox -e nuscenes` (part of the README's test command and CI), where the devkit is
installed with its declared dependencies and simconform runs, exports and is read back on
numpy 1.26. Elsewhere it is skipped; in that env a missing devkit fails.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

try:
    from nuscenes.nuscenes import NuScenes
    from nuscenes.utils.data_classes import LidarPointCloud
    from nuscenes.utils.geometry_utils import points_in_box
except ImportError:
    if os.environ.get("SIMCONFORM_NUSCENES_ENV"):
        raise
    pytest.skip("runs in its own env: python3 -m tox -e nuscenes", allow_module_level=True)

from export_world import WORLD, cast_to, make_run, published

from conftest import cli
from simconform.downstream.sweeps import TruePoses
from simconform.frames import Pose

VERSION = "v1.0-simconform"


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("lot")
    run = make_run(d)
    res = cli("export", str(run), "--format", "nuscenes", "--out", str(d / "nus"))
    assert res.returncode == 0, res.stdout + res.stderr
    return run, d / "nus"


def test_the_devkit_loads_it_and_a_boxs_points_match(dataset) -> None:
    """NuScenes(version, dataroot); scene -> samples -> LIDAR_TOP and CAM_FRONT sample_data;
    every box in the lidar frame (get_sample_data) holds every point of its sample's cloud that
    the reference ray caster says hit that object, and points_in_box counts num_lidar_pts."""
    run, root = dataset
    nusc = NuScenes(version=VERSION, dataroot=str(root), verbose=False)
    assert len(nusc.scene) == 1
    scene = nusc.scene[0]
    truth = TruePoses(run / "gt" / "base_link.tum", Pose.identity())
    mount = Pose.from_xyz_rpy((0.3, 0.0, 1.2), (0.0, 0.0, 0.0))  # rover.yaml's lidar
    sweeps, names = published(run), {o["name"]: i for i, o in enumerate(WORLD["objects"])}
    token, k, hits = scene["first_sample_token"], 0, {}
    while token:
        sample = nusc.get("sample", token)
        lidar = nusc.get("sample_data", sample["data"]["LIDAR_TOP"])
        assert lidar["timestamp"] == sample["timestamp"] and lidar["is_key_frame"]
        ego = nusc.get("ego_pose", lidar["ego_pose_token"])
        t_ns = lidar["timestamp"] * 1000
        expected = truth.at(np.array([t_ns]))[0]
        np.testing.assert_allclose(ego["translation"], expected.t, atol=1e-6)
        path, boxes, _ = nusc.get_sample_data(lidar["token"])
        pc = LidarPointCloud.from_file(path)
        assert pc.points.shape[1] == len(sweeps[k].points)
        in_map = truth.at(np.array([t_ns]))[0].compose(mount).apply(pc.points[:3].T.astype(float))
        err, idx = cast_to(run.parent / "lot.yaml", truth.at(sweeps[k].times_ns).compose(mount).t,
                           in_map)  # fmt: skip
        assert np.max(err) < 1e-3
        for box in boxes:
            ann = nusc.get("sample_annotation", box.token)
            obj = names[_name(ann)]
            # 1 mm either way on every side: the tolerance of the ray-caster check above
            f = 2e-3 / min(box.wlh)
            inside = points_in_box(box, pc.points[:3], wlh_factor=1 + f)
            assert np.all(inside[idx == obj]), box
            strict = points_in_box(box, pc.points[:3], wlh_factor=1 - f).sum()
            assert strict <= ann["num_lidar_pts"] <= inside.sum()  # ground on a bottom face
            hits[ann["category_name"]] = hits.get(ann["category_name"], 0) + (idx == obj).sum()
        token, k = sample["next"], k + 1
    assert k == scene["nbr_samples"] == 19
    assert hits["vehicle.car"] > 500 and hits["static_object.pole"] > 50, hits
    cams = [sd for sd in nusc.sample_data if sd["channel"] == "CAM_FRONT"]
    assert sum(sd["is_key_frame"] for sd in cams) >= 15
    for sd in cams:  # key frames and sweeps (boxes interpolated between samples)
        path, boxes, k_mat = nusc.get_sample_data(sd["token"])
        assert Path(path).is_file() and k_mat.shape == (3, 3)


def _name(ann: dict) -> str:
    c = np.array(ann["translation"])
    return next(
        o["name"] for o in WORLD["objects"] if "center" in o and np.allclose(o["center"], c)
    )
