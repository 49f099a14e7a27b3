"""Replay hints name the right fix (adapters/replay/hints.py): the tf pairs a bag does have
for a wrong ground-truth parent, and the points_frame a lidar cloud is really in."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import test_replay as tr
import yaml

from conftest import write_yaml
from simconform.adapters.replay import ReplayConfig, replay
from simconform.errors import UserError


def test_wrong_tf_parent_lists_the_pairs_in_the_bag(tmp_path: Path) -> None:
    sim = tr.Sim(seed=41)
    items = tr.foreign_items(sim, tr.Msgs(tr.ROS2), "unorganized-sensor", "tf", ("imu",))
    m = tr.Msgs(tr.ROS2)
    static = m.tf(tr.T0, "map", "odom", (0, 0, 0), (0, 0, 0, 1))
    static.transforms = static.transforms[1:]  # map -> odom only
    items.append(("/tf_static", "tf2_msgs/msg/TFMessage", tr.T0, static))
    bag = tr.write_bag(tmp_path / "b", "mcap", items, tr.ROS2)
    mp = tr.make_map(tmp_path, "unorganized-sensor", "tf", ("imu",))
    data = yaml.safe_load(mp.read_text())
    data["ground_truth"]["parent"] = "map"  # the bag's poses are world -> rover
    bad = write_yaml(tmp_path / "bad.yaml", data)
    with pytest.raises(UserError) as exc:
        replay(ReplayConfig(bag=bag, map=bad, out=tmp_path / "o"))
    text = str(exc.value)
    assert "map -> rover" in text  # what was asked for
    assert "the bag has world -> npc, world -> rover (/gt/tf); map -> odom (/tf_static)" in text
    assert "\n" not in text and not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("cloud", "mapped", "fix"),
    [("unorganized-world", "sensor", "world"), ("unorganized-sensor", "world", "sensor")],
)
def test_cloud_in_the_other_frame_gets_the_points_frame_fix(
    tmp_path: Path, cloud: str, mapped: str, fix: str
) -> None:
    """A cloud in the map frame read as sensor-frame points lies off every ray; the warning
    names points_frame: world (and the reverse), not the spec's rings or the pairing."""
    sim = tr.Sim(seed=42)
    items = tr.foreign_items(sim, tr.Msgs(tr.ROS2), cloud, "tf", ("lidar",))
    bag = tr.write_bag(tmp_path / "b", "mcap", items, tr.ROS2)
    mp = tr.make_map(tmp_path, cloud, "tf", ("lidar",))
    data = yaml.safe_load(mp.read_text())
    data["sensors"]["lidar"]["points_frame"] = mapped
    wrong = write_yaml(tmp_path / "wrong.yaml", data)
    res = replay(ReplayConfig(bag=bag, map=wrong, out=tmp_path / "o", align=False))
    warnings = [w for w in res.replay["warnings"] if "half a bin" in w]
    assert len(warnings) == 1, res.replay["warnings"]
    assert f"set points_frame: {fix} for sensors.lidar" in warnings[0]
    assert "rings/columns" not in warnings[0]
    run = json.loads((tmp_path / "o" / "run.json").read_text())
    assert run["replay"]["warnings"] == res.replay["warnings"]


def test_pairing_residual_mean_and_rms_are_over_the_paired_points() -> None:
    """Of two points on one ray only the closer is paired; the summary's mean and RMS are over
    the paired points' residuals (they were divided by paired + duplicates)."""
    import numpy as np

    from simconform.adapters.replay.pairing import PairStats, RayGrid, pair_by_direction
    from simconform.spec import Spec

    s = Spec.model_validate(tr.SPEC).sensors["lidar"]
    grid = RayGrid(s.directions(), s.rings.elevations())
    rays = s.directions()[3, 10:30]
    tilt = np.deg2rad(0.2)  # off the ray in elevation, within half a bin
    near = rays + np.c_[np.zeros((20, 2)), np.full(20, tilt)]
    far = rays + np.c_[np.zeros((20, 2)), np.full(20, 2 * tilt)]
    pts = 10 * np.concatenate([near / np.linalg.norm(near, axis=1)[:, None], far])
    st = PairStats("direction")
    pair_by_direction(pts, np.zeros(len(pts)), grid, st)
    assert (st.paired, st.duplicates) == (20, 20)
    res = st.summary(30 / 7, 2.0)["residual_deg"]
    assert res["mean"] == pytest.approx(res["p50"], rel=1e-3)  # all paired residuals equal
    assert res["rms"] == pytest.approx(res["mean"], rel=1e-3)
