"""Our bags' clock and frames: stamps start at a realistic, fixed epoch (the same run file
gives the same bag), and /tf agrees with /odom: odom -> base_link is the odometry's own noisy
estimate, while the truth has a frame of its own (map -> truth/base_link)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import write_yaml
from simconform.bag.messages import odom_pose, stamp_ns
from simconform.bag.reader import SourceBag
from simconform.errors import UserError
from simconform.run import DEFAULT_EPOCH_S, RunConfig, run
from simconform.stamps import format_seconds

NS = 1_000_000_000
SPEC = {
    "name": "clock",
    "sensors": {
        "odom": {
            "type": "odom",
            "rate_hz": 20,
            "noise": {"increment": {"sigma": [0.01, 0.005, 0.002]}},
            "dropout": {"sample": 0.1},
            "latency": {"fixed_ms": 10.0},
        },
        "gnss": {"type": "gnss", "rate_hz": 5, "noise": {"position": {"sigma": [1, 1, 1]}}},
    },
}


def record(tmp: Path, name: str, spec: dict = SPEC, **cfg) -> Path:
    from simconform.demo import DEMO_TRAJECTORY, DEMO_WORLD

    write_yaml(tmp / "spec.yaml", spec)
    out = tmp / name
    run(
        RunConfig(
            world=DEMO_WORLD,
            spec=tmp / "spec.yaml",
            trajectory=DEMO_TRAJECTORY,
            out=out,
            duration=2.0,
            **cfg,
        ),
        progress=False,
    )
    return out


def messages(run_dir: Path, topics: set[str]) -> list[tuple[str, int, object]]:
    src = SourceBag(run_dir / "bag")
    try:
        return [(t, log, src.deserialize(raw, typ)) for t, typ, log, raw in src.messages(topics)]
    finally:
        src.close()


def test_stamps_start_at_a_fixed_realistic_epoch_and_repeat(tmp_path: Path) -> None:
    a = record(tmp_path, "a")
    manifest = json.loads((a / "run.json").read_text())
    assert manifest["epoch_s"] == DEFAULT_EPOCH_S and manifest["start_ns"] == DEFAULT_EPOCH_S * NS
    stamps = [stamp_ns(m.header) for _t, _l, m in messages(a, {"/odom", "/gps/fix"})]
    assert min(stamps) == DEFAULT_EPOCH_S * NS  # 2024-01-01T00:00:00Z, the demo's t = 0
    first = (a / "gt" / "base_link.tum").read_text().splitlines()[1].split()[0]
    assert first == format_seconds(DEFAULT_EPOCH_S * NS)
    b = record(tmp_path, "b")  # the same run file: the same bag, byte for byte
    (fa,), (fb,) = list((a / "bag").glob("*.mcap")), list((b / "bag").glob("*.mcap"))
    assert fa.read_bytes() == fb.read_bytes()


def test_epoch_option_sets_the_clock_and_is_validated(tmp_path: Path) -> None:
    own = record(tmp_path, "own", epoch=0)
    stamps = [stamp_ns(m.header) for _t, _l, m in messages(own, {"/odom"})]
    assert min(stamps) == 0
    with pytest.raises(UserError, match="--epoch"):
        record(tmp_path, "bad", epoch=-5)
    # a stamp past 2^31 s crashed the bag writer half way (int32 seconds): refused up front,
    # naming the largest epoch this trajectory allows, with nothing written
    with pytest.raises(
        UserError, match=r"--epoch: got 2147483640; expected whole seconds in \[0, "
    ):
        record(tmp_path, "late", epoch=2_147_483_640)
    assert not (tmp_path / "late").exists()


def test_tf_carries_the_odometry_estimate_and_truth_has_its_own_frame(tmp_path: Path) -> None:
    out = record(tmp_path, "tf", seed=7)
    msgs = messages(out, {"/odom", "/tf"})
    odom = {stamp_ns(m.header): (log, odom_pose(m)) for t, log, m in msgs if t == "/odom"}
    est, truth = {}, []
    for topic, log, m in msgs:
        if topic != "/tf":
            continue
        for tr in m.transforms:
            key = (tr.header.frame_id, tr.child_frame_id)
            if key == ("odom", "base_link"):
                est[stamp_ns(tr.header)] = (log, tr.transform)
            else:
                assert key == ("map", "truth/base_link"), key
                truth.append(tr)
    assert len(odom) > 30 and set(est) == set(odom)  # one transform per published odometry
    for st, (log, pose) in odom.items():
        tlog, tr = est[st]
        assert tlog == log  # broadcast with the message, at its publish time
        q = tr.rotation
        yaw = np.arctan2(2 * (q.w * q.z + q.x * q.y), 1 - 2 * (q.y * q.y + q.z * q.z))
        assert (tr.translation.x, tr.translation.y, tr.translation.z) == (pose.x, pose.y, 0.0)
        assert yaw == pytest.approx(pose.yaw, abs=1e-12)
    gt = np.loadtxt(out / "gt" / "base_link.tum")
    assert len(truth) == len(gt)  # the true pose at the tf rate, as gt/base_link.tum
    true_at = {stamp_ns(tr.header): tr.transform.translation for tr in truth}
    drift = [
        np.hypot(true_at[s].x - p.x, true_at[s].y - p.y)
        for s, (_l, p) in odom.items()
        if s in true_at
    ]
    assert len(drift) > 10 and max(drift) > 1e-3  # the estimate is the noisy one, not the truth


def test_without_odometry_odom_to_base_link_is_the_truth(tmp_path: Path) -> None:
    spec = {"name": "clock", "sensors": {"gnss": SPEC["sensors"]["gnss"]}}
    out = record(tmp_path, "no-odom", spec=spec)
    for _t, _l, m in messages(out, {"/tf"}):
        pairs = {(tr.header.frame_id, tr.child_frame_id): tr.transform for tr in m.transforms}
        assert pairs[("odom", "base_link")] == pairs[("map", "truth/base_link")]
