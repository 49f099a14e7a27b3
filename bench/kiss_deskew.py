"""Deskewing happens once: KISS-ICP, with its deskewing on, on our published clouds.

Records the demo world with a VLP-16-like lidar (sensors_spec/vlp16.yaml, lidar only) along
the demo trajectory sped up `--speed` times (x4: 7.6 m/s, a car in town), once in the
`velodyne` preset (points as measured, `time` per point) and once in the `deskewed` preset
(points moved into the frame at the stamp, no time field), same seed. Then runs KISS-ICP
(`pip install kiss-icp`) on four inputs and compares its frame-to-frame motion with the
truth (gt/lidar.tum):

- velodyne + time: KISS-ICP deskews the raw points once (what a driver's bag gives it);
- deskewed, no time: we deskewed once, KISS-ICP cannot (no times);
- deskewed + time: our old output (deskewed points that still carried `t`): twice;
- velodyne, no time: never deskewed.

    python bench/kiss_deskew.py [--duration 30] [--speed 4] [--json]

Prints, per input, the relative pose error between consecutive scans (translation in m and
rotation in deg: mean, and RMS) and the absolute trajectory error after aligning the first
frame (m, RMS). docs/replay.md ("Per-point time") has the measured numbers.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml
from scipy.spatial.transform import Rotation

from simconform.bag.messages import cloud_arrays
from simconform.bag.reader import SourceBag
from simconform.run import RunConfig, run
from simconform.trajectory import Trajectory

REPO = Path(__file__).resolve().parents[1]


def street(tmp: Path, duration: float, speed: float) -> tuple[Path, Path]:
    """A street with buildings, poles and parked boxes on both sides (seeded), and a drive
    along it at `speed` m/s that weaves 2 m side to side (yaw up to 0.2 rad/s)."""
    rng = np.random.default_rng(0)
    length = speed * duration + 60.0
    objects: list[dict] = [{"type": "plane"}]
    for side in (-1.0, 1.0):
        x = -20.0
        while x < length:
            w, h, d = rng.uniform(4, 12), rng.uniform(4, 12), rng.uniform(4, 8)
            y = side * (9.0 + d / 2 + rng.uniform(0, 2))
            objects.append({"type": "box", "center": [x + w / 2, y, h / 2], "size": [w, d, h]})
            if rng.random() < 0.5:
                objects.append(
                    {
                        "type": "cylinder",
                        "center": [x, side * 6.5, 2.0],
                        "radius": 0.15,
                        "length": 4.0,
                    }
                )
            if rng.random() < 0.4:
                cx = x + rng.uniform(0, w)
                objects.append(
                    {"type": "box", "center": [cx, side * 5.5, 0.75], "size": [4.0, 1.8, 1.5]}
                )
            x += w + rng.uniform(1, 4)
    world = tmp / "street.yaml"
    origin = {"lat": 48.0, "lon": 11.0, "alt": 500.0}
    world.write_text(yaml.safe_dump({"name": "street", "origin": origin, "objects": objects}))
    t = np.arange(0, round((duration + 1) * 1e9) + 1, 10_000_000)
    s = t * 1e-9
    x, y = speed * s, 2.0 * np.sin(0.1 * speed * s / 2.0)
    yaw = np.arctan2(np.gradient(y, s), np.gradient(x, s))
    traj = tmp / "street.tum"
    rot = Rotation.from_euler("z", yaw[:, None])
    Trajectory(t, np.c_[x, y, np.zeros_like(s)], rot).write_tum(traj)
    return world, traj


def record(tmp: Path, preset: str, duration: float, speed: float, seed: int) -> Path:
    spec = yaml.safe_load((REPO / "sensors_spec" / "vlp16.yaml").read_text())
    spec["sensors"]["lidar"]["point_time"] = preset
    spec_path = tmp / f"spec-{preset}.yaml"
    spec_path.write_text(yaml.safe_dump(spec))
    world, traj = street(tmp, duration, speed)
    out = tmp / preset
    run(
        RunConfig(
            world=world, spec=spec_path, trajectory=traj, out=out, duration=duration, seed=seed
        ),
        progress=False,
    )
    return out


def clouds(run_dir: Path) -> list[tuple[np.ndarray, np.ndarray | None]]:
    """Each published sweep: finite points (N, 3) and their `time` field (or None)."""
    out = []
    src = SourceBag(run_dir / "bag")
    try:
        for _topic, msgtype, _log, raw in src.messages({"/lidar/points"}):
            f = cloud_arrays(src.deserialize(raw, msgtype))
            p = np.stack([f["x"], f["y"], f["z"]], -1).reshape(-1, 3).astype(np.float64)
            ok = np.all(np.isfinite(p), axis=1)
            t = f["time"].reshape(-1)[ok].astype(np.float64) if "time" in f else None
            out.append((p[ok], t))
    finally:
        src.close()
    return out


def kiss(frames: list[tuple[np.ndarray, np.ndarray | None]]) -> np.ndarray:
    from kiss_icp.config import KISSConfig
    from kiss_icp.kiss_icp import KissICP

    cfg = KISSConfig()
    cfg.data.deskew, cfg.data.max_range, cfg.data.min_range = True, 100.0, 0.5
    cfg.mapping.voxel_size = 1.0
    odom = KissICP(cfg)
    poses = []
    for pts, t in frames:
        odom.register_frame(pts, np.zeros(0) if t is None else t)
        poses.append(odom.last_pose.copy())
    return np.array(poses)


def errors(est: np.ndarray, gt: np.ndarray) -> dict:
    def mat(row):
        m = np.eye(4)
        m[:3, :3], m[:3, 3] = Rotation.from_quat(row[4:8]).as_matrix(), row[1:4]
        return m

    g = np.array([mat(r) for r in gt])
    g = np.linalg.inv(g[0]) @ g  # both start at the identity
    rel_t, rel_r = [], []
    for k in range(len(est) - 1):
        de = np.linalg.inv(est[k]) @ est[k + 1]
        dg = np.linalg.inv(g[k]) @ g[k + 1]
        d = np.linalg.inv(dg) @ de
        rel_t.append(np.linalg.norm(d[:3, 3]))
        rel_r.append(np.rad2deg(Rotation.from_matrix(d[:3, :3]).magnitude()))
    ate = np.linalg.norm(est[:, :3, 3] - g[:, :3, 3], axis=1)
    rt, rr = np.array(rel_t), np.array(rel_r)
    return {
        "rpe_trans_mean_m": float(rt.mean()),
        "rpe_trans_rms_m": float(np.sqrt((rt**2).mean())),
        "rpe_rot_mean_deg": float(rr.mean()),
        "ate_rms_m": float(np.sqrt((ate**2).mean())),
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", type=float, default=30.0)
    ap.add_argument("--speed", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = {}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        t0 = time.perf_counter()
        raw_run = record(tmp, "velodyne", args.duration, args.speed, args.seed)
        desk_run = record(tmp, "deskewed", args.duration, args.speed, args.seed)
        gt = np.loadtxt(raw_run / "gt" / "lidar.tum")
        raw, desk = clouds(raw_run), clouds(desk_run)
        n = min(len(raw), len(desk), len(gt))
        cases = {
            "velodyne + time (KISS deskews once)": raw,
            "deskewed, no time (we deskewed once)": [(p, None) for p, _ in desk],
            "deskewed + time (old output: twice)": [(p, t) for (p, _), (_, t) in zip(desk, raw)],
            "velodyne, no time (never deskewed)": [(p, None) for p, _ in raw],
        }
        for name, frames in cases.items():
            rows[name] = errors(kiss(frames[:n]), gt[:n])
        elapsed = time.perf_counter() - t0
    if args.json:
        print(json.dumps({"rows": rows, "scans": n, "seconds": elapsed}, indent=2))
        return 0
    print(f"{n} scans, {args.duration:g} s at {args.speed:g} m/s, {elapsed:.0f} s wall")
    print(f"{'input':42s} {'RPE m mean':>11s} {'RPE m rms':>10s} {'RPE deg':>8s} {'ATE m':>7s}")
    for name, r in rows.items():
        print(
            f"{name:42s} {r['rpe_trans_mean_m']:11.4f} {r['rpe_trans_rms_m']:10.4f} "
            f"{r['rpe_rot_mean_deg']:8.4f} {r['ate_rms_m']:7.3f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
