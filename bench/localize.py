"""Localization time per scan: what `simconform localize` spends per sweep, against KISS-ICP's
own registration in the same process.

Reads a run's published lidar (decoding and per-point time, downstream/sweeps.py), registers
each sweep with KISS-ICP (downstream/odometry.py, one thread, as `localize` runs it) and
evaluates with evo once; prints ms per scan for each part and our overhead as a ratio of
KISS-ICP's time.

    python bench/localize.py RUN_DIR [--json]
    python bench/localize.py --make DIR [--world W --trajectory T --spec S --duration 20]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def make_run(out: Path, world: str, trajectory: str, spec: str, duration: float) -> Path:
    cmd = [sys.executable, "-m", "simconform.cli", "run", "--world", world, "--trajectory",
           trajectory, "--spec", spec, "--duration", str(duration), "--out", str(out), "--quiet",
           "--force"]  # fmt: skip
    subprocess.run(cmd, check=False)
    return out


def measure(run_dir: Path) -> dict:
    from scipy.spatial.transform import Rotation

    from simconform.bag.reader import SourceBag
    from simconform.downstream.evaluate import evaluate
    from simconform.downstream.localize import _mount, pick_lidar
    from simconform.downstream.odometry import KissIcp
    from simconform.downstream.sweeps import TruePoses, sweeps
    from simconform.frames import Pose
    from simconform.spec import Spec
    from simconform.verify.verifier import load_manifest

    manifest = load_manifest(run_dir)
    spec = Spec.model_validate(manifest["spec_content"])
    name = pick_lidar(spec, None, run_dir)
    s = spec.sensors[name]
    truth = TruePoses(run_dir / "gt" / f"{spec.base_frame}.tum", Pose.from_xyz_rpy(*_mount(s)))
    odo = KissIcp(s.range.min, s.range.max, True)
    read_s = icp_s = 0.0
    poses, instants, points = [], [], 0
    bag = SourceBag(run_dir / "bag")
    try:
        it = iter(sweeps(bag, spec.topic(name)))
        while True:
            t0 = time.perf_counter()
            sweep = next(it, None)
            read_s += time.perf_counter() - t0
            if sweep is None:
                break
            if not len(sweep.points):
                continue
            t0 = time.perf_counter()
            pose, at = odo.register(sweep)
            icp_s += time.perf_counter() - t0
            points += len(sweep.points)
            if truth.covers(at):
                poses.append(pose)
                instants.append(at)
    finally:
        bag.close()
    t0 = time.perf_counter()
    arr = np.array(poses)
    est = Pose(arr[:, :3, 3], Rotation.from_matrix(arr[:, :3, :3]))
    t = np.array(instants, dtype=np.int64)
    ev = evaluate(est, truth.at(t), t, 100.0)
    eval_s = time.perf_counter() - t0
    n = len(poses)
    return {
        "run": str(run_dir),
        "scans": n,
        "points_per_scan": points / max(n, 1),
        "read_ms_per_scan": 1e3 * read_s / n,
        "kiss_icp_ms_per_scan": 1e3 * icp_s / n,
        "evo_ms_per_scan": 1e3 * eval_s / n,
        "overhead_vs_kiss_icp": (read_s + eval_s) / icp_s,
        "ape_rmse_m": ev.ape_rmse_m,
        "load": os.getloadavg()[0],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", nargs="?", type=Path)
    ap.add_argument("--make", type=Path, help="record a run into this folder first")
    ap.add_argument("--world", default=str(ROOT / "worlds" / "demo.yaml"))
    ap.add_argument("--trajectory", default=str(ROOT / "worlds" / "demo.tum"))
    ap.add_argument("--spec", default=str(ROOT / "sensors_spec" / "vlp16.yaml"))
    ap.add_argument("--duration", type=float, default=20.0)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    run = a.run
    if a.make is not None:
        run = make_run(a.make, a.world, a.trajectory, a.spec, a.duration)
    if run is None:
        ap.error("give RUN_DIR or --make DIR")
    r = measure(run)
    if a.json:
        print(json.dumps(r, indent=2))
        return
    print(f"{r['scans']} scans of {r['points_per_scan']:.0f} points ({r['run']})")
    print(f"  read + decode  {r['read_ms_per_scan']:8.2f} ms/scan")
    print(f"  KISS-ICP       {r['kiss_icp_ms_per_scan']:8.2f} ms/scan (peer)")
    print(f"  evo (once)     {r['evo_ms_per_scan']:8.2f} ms/scan")
    print(f"  our overhead   {r['overhead_vs_kiss_icp']:8.3f} x KISS-ICP  (load {r['load']:.1f})")


if __name__ == "__main__":
    main()
