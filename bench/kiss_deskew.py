"""Deskewing happens once: KISS-ICP, with its deskewing on, on our published clouds.

Records a street (buildings, poles, parked boxes; seeded) with a VLP-16-like lidar
(sensors_spec/vlp16.yaml, lidar only) driving at `--speed` m/s, once in the `velodyne` preset
(points as measured, `time` per point) and once in the `deskewed` preset (points moved into the
frame at the stamp, no time field), same seed, and gives KISS-ICP (`pip install kiss-icp`) four
inputs:

- velodyne + time: KISS-ICP deskews the raw points once (what a driver's bag gives it);
- deskewed, no time: we deskewed once, KISS-ICP cannot (no times);
- deskewed + time: our old output (deskewed points that still carried `t`): twice;
- velodyne, no time: never deskewed.

Two measures per input: the deskew step alone (KISS-ICP's own Preprocessor fed the true motion
over one scan period; RMS distance of its output from the true sweep deskewed to the instant
KISS-ICP deskews to, or for inputs it leaves alone to the stamp's frame they are in), and the
whole odometry against gt/lidar.tum (relative pose error between consecutive scans: mean and
RMS translation, mean rotation; absolute trajectory error after aligning the first frame).

    python bench/kiss_deskew.py [--duration 20] [--speed 10] [--json]

docs/replay.md ("Per-point time") has the measured numbers.
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
    """Each published sweep: every ray's point (N, 3; NaN: no return) and `time` (or None)."""
    out = []
    src = SourceBag(run_dir / "bag")
    try:
        for _topic, msgtype, _log, raw in src.messages({"/lidar/points"}):
            f = cloud_arrays(src.deserialize(raw, msgtype))
            p = np.stack([f["x"], f["y"], f["z"]], -1).reshape(-1, 3).astype(np.float64)
            t = f["time"].reshape(-1).astype(np.float64) if "time" in f else None
            out.append((p, t))
    finally:
        src.close()
    return out


def joint(a: list, b: list) -> tuple[list, list]:
    """The two runs' sweeps, finite points only: the same rays have a point in both (same
    seed, same noise and dropout), so point k of one is point k of the other."""
    out_a, out_b = [], []
    for (p, t), (q, u) in zip(a, b):
        ok = np.all(np.isfinite(p), axis=1)
        assert np.array_equal(ok, np.all(np.isfinite(q), axis=1))
        out_a.append((p[ok], None if t is None else t[ok]))
        out_b.append((q[ok], None if u is None else u[ok]))
    return out_a, out_b


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


def deskew_step(run_dir: Path, desk_dir: Path, sweeps: int = 20) -> dict:
    """KISS-ICP's own deskewing (its Preprocessor) fed the true motion over one scan period,
    on each input: the RMS distance (m) of its output from the true sweep deskewed to one
    instant (the one KISS-ICP deskews to, found by trying the sweep's start, middle and end;
    for inputs KISS-ICP leaves alone, the stamp's frame they are in). This isolates the
    deskew from ICP's own error."""
    from kiss_icp.pybind import kiss_icp_pybind as kp

    from simconform.frames import Pose
    from simconform.run import load_inputs

    manifest = json.loads((run_dir / "run.json").read_text())
    cfg = RunConfig(
        world=Path(manifest["world"]),
        spec=Path(manifest["spec"]),
        trajectory=Path(manifest["trajectory"]),
        out=run_dir,
    )
    inp = load_inputs(cfg)
    lidar = inp.spec.sensors["lidar"]
    mount = Pose.from_xyz_rpy(lidar.mount.xyz, lidar.mount.rpy)
    period = round(1e9 / lidar.rate_hz)
    pre = kp._Preprocessor(1e6, 0.0, True, 1)  # no range filter: keep every point
    stamps = [st for st, _ in _stamped(run_dir)]
    raw, desk = joint(clouds(run_dir), clouds(desk_dir))
    sums: dict[str, list[float]] = {}
    for k in range(1, min(sweeps + 1, len(raw))):
        st = stamps[k]
        (p, t), (q, _) = raw[k], desk[k]
        t_abs = st + np.round(t * 1e9).astype(np.int64)
        own = inp.trajectory.pose_at(t_abs).compose(mount)
        world = own.apply(p)
        at = {}
        for f in (0.0, 0.5, 1.0):
            ref = inp.trajectory.pose_at(st + round(f * float(t.max()) * 1e9)).compose(mount)
            at[f] = ref.inverse().apply(world)
        a = inp.trajectory.pose_at(st).compose(mount)
        b = inp.trajectory.pose_at(st + period).compose(mount)
        rel = a.inverse().compose(b)
        delta = np.eye(4)
        delta[:3, :3], delta[:3, 3] = rel.rot.as_matrix(), rel.t

        def kiss_pre(points: np.ndarray, times: np.ndarray, delta=delta) -> np.ndarray:
            return np.asarray(pre._preprocess(kp._Vector3dVector(points), times, delta))

        def rms(x: np.ndarray, y: np.ndarray) -> float:
            return float(np.sqrt(np.mean(np.sum((x - y) ** 2, axis=1))))

        once = kiss_pre(p, t)
        best = min(at, key=lambda f: rms(once, at[f]))
        rows = {
            "velodyne + time (KISS deskews once)": rms(once, at[best]),
            "deskewed, no time (we deskewed once)": rms(q, at[0.0]),
            "deskewed + time (old output: twice)": rms(kiss_pre(q, t), at[best]),
            "velodyne, no time (never deskewed)": rms(p, at[0.0]),
        }
        sums.setdefault("reference_fraction", []).append(best)
        for name, v in rows.items():
            sums.setdefault(name, []).append(v)
    return {name: float(np.mean(v)) for name, v in sums.items()}


def _stamped(run_dir: Path) -> list[tuple[int, None]]:
    from simconform.bag.messages import stamp_ns

    src = SourceBag(run_dir / "bag")
    try:
        return [
            (stamp_ns(src.deserialize(raw, typ).header), None)
            for _t, typ, _l, raw in src.messages({"/lidar/points"})
        ]
    finally:
        src.close()


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
        raw, desk = joint(clouds(raw_run), clouds(desk_run))
        n = min(len(raw), len(desk), len(gt))
        cases = {
            "velodyne + time (KISS deskews once)": raw,
            "deskewed, no time (we deskewed once)": [(p, None) for p, _ in desk],
            "deskewed + time (old output: twice)": [(p, t) for (p, _), (_, t) in zip(desk, raw)],
            "velodyne, no time (never deskewed)": [(p, None) for p, _ in raw],
        }
        step = deskew_step(raw_run, desk_run)
        for name, frames in cases.items():
            rows[name] = errors(kiss(frames[:n]), gt[:n])
            rows[name]["deskew_rms_m"] = step[name]
        elapsed = time.perf_counter() - t0
    if args.json:
        out = {"rows": rows, "scans": n, "seconds": elapsed}
        out["kiss_reference_fraction"] = step["reference_fraction"]
        print(json.dumps(out, indent=2))
        return 0
    print(
        "deskew step alone (KISS-ICP's Preprocessor, true motion): RMS distance from the true "
        f"sweep deskewed to {step['reference_fraction']:.2g} of the sweep (KISS-ICP's instant)"
    )
    print(f"{n} scans, {args.duration:g} s at {args.speed:g} m/s, {elapsed:.0f} s wall")
    head = f"{'input':40s} {'deskew m':>9s} {'RPE m mean':>11s} {'RPE m rms':>10s}"
    print(head + f" {'RPE deg':>8s} {'ATE m':>7s}")
    for name, r in rows.items():
        print(
            f"{name:40s} {r['deskew_rms_m']:9.4f} {r['rpe_trans_mean_m']:11.4f} "
            f"{r['rpe_trans_rms_m']:10.4f} {r['rpe_rot_mean_deg']:8.4f} {r['ate_rms_m']:7.3f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
