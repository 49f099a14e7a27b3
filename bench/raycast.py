"""Ray casting speed and agreement: the exact reference caster against MuJoCo's mj_multiRay.

Both cast the same sweeps (about 50 lidar poses along the demo drive) against the same world,
in the same process, one core each. Prints one row per lidar pattern: rays per sweep, rays/s
of each, their ratio, and how well the distances agree.

    python bench/raycast.py [--json] [--poses 50] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

# Single-threaded BLAS, so that both casters are measured on one core.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
from scipy.spatial.transform import Rotation  # noqa: E402

from simconform.adapters.mjcf import world_to_mjcf  # noqa: E402
from simconform.raycast import Scene  # noqa: E402
from simconform.spec import LidarSpec, load_spec  # noqa: E402
from simconform.world import load_world  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PATTERNS = {"rover 16x360": "sensors_spec/rover.yaml", "vlp16 16x1800": "sensors_spec/vlp16.yaml"}


def sensor_poses(scene: Scene, lidar: LidarSpec, count: int) -> list[tuple[np.ndarray, Rotation]]:
    """Lidar poses along the demo drive: x = 30 cos th, y = 18 sin th + 4 sin 3th, yaw tangent.

    base_link stands on the surface below (ground, ramps, platform), the lidar on its mount.
    """
    th = np.linspace(0, 2 * np.pi, count, endpoint=False)
    x, y = 30 * np.cos(th), 18 * np.sin(th) + 4 * np.sin(3 * th)
    yaw = np.arctan2(18 * np.cos(th) + 12 * np.cos(3 * th), -30 * np.sin(th))
    z = scene.ground_height(x, y)
    mount = Rotation.from_euler("xyz", lidar.mount.rpy)
    poses = []
    for xi, yi, zi, heading in zip(x, y, z, yaw, strict=True):
        base = Rotation.from_euler("z", heading)
        poses.append((np.array([xi, yi, zi]) + base.apply(lidar.mount.xyz), base * mount))
    return poses


def best_rate(fn, n_rays: int, repeats: int) -> tuple[float, float]:
    """(best, median) rays/s over `repeats` timed runs of fn, after one warm-up run."""
    fn()
    rates = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        rates.append(n_rays / (time.perf_counter() - t0))
    return max(rates), float(np.median(rates))


def bench_pattern(scene: Scene, model, data, lidar: LidarSpec, poses: int, repeats: int) -> dict:
    import mujoco

    local = lidar.directions().reshape(-1, 3)
    n = len(local)
    sweeps = [
        (o, np.ascontiguousarray(rot.apply(local))) for o, rot in sensor_poses(scene, lidar, poses)
    ]
    r_max = lidar.range.max
    ref = np.empty((len(sweeps), n))
    mj = np.empty((len(sweeps), n))
    geomid = np.empty(n, dtype=np.int32)
    vecs = [d.reshape(-1) for _, d in sweeps]

    def run_reference() -> None:
        for k, (o, d) in enumerate(sweeps):
            ref[k] = scene.cast(o, d, t_max=r_max).dist

    def run_mujoco() -> None:
        for k, (o, _) in enumerate(sweeps):
            mujoco.mj_multiRay(model, data, o, vecs[k], None, 1, -1, geomid, mj[k], None, n, r_max)

    total = n * len(sweeps)
    ref_best, ref_median = best_rate(run_reference, total, repeats)
    mj_best, mj_median = best_rate(run_mujoco, total, repeats)

    # mj_multiRay reports -1 for no hit; both treat hits beyond the lidar's range as misses.
    mj_dist = np.where((mj < 0) | (mj > r_max), np.inf, mj)
    ref_hit, mj_hit = np.isfinite(ref), np.isfinite(mj_dist)
    both = ref_hit & mj_hit
    with np.errstate(invalid="ignore"):
        close = both & (np.abs(ref - mj_dist) <= 1e-3)
    return {
        "rays_per_sweep": n,
        "sweeps": len(sweeps),
        "reference_rays_per_s": ref_best,
        "reference_rays_per_s_median": ref_median,
        "mujoco_rays_per_s": mj_best,
        "mujoco_rays_per_s_median": mj_median,
        "ratio_reference_over_mujoco": ref_best / mj_best,
        "hit_agreement": float(np.mean(ref_hit == mj_hit)),
        "within_1mm": float(np.mean(close | (~ref_hit & ~mj_hit))),
        "max_abs_diff_m": float(np.max(np.abs(ref[both] - mj_dist[both]), initial=0.0)),
        "hit_share": float(np.mean(ref_hit)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON")
    parser.add_argument("--poses", type=int, default=50, help="sensor poses along the path")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs; the best counts")
    args = parser.parse_args(argv)
    try:
        import mujoco
    except ImportError:
        print("bench/raycast.py needs MuJoCo: pip install 'simconform[mujoco]'", file=sys.stderr)
        return 2

    world = load_world(ROOT / "worlds" / "demo.yaml")
    scene = Scene(world)
    model = mujoco.MjModel.from_xml_string(world_to_mjcf(world))
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    results = {}
    for label, spec_file in PATTERNS.items():
        lidar = next(
            s for s in load_spec(ROOT / spec_file).sensors.values() if isinstance(s, LidarSpec)
        )
        results[label] = bench_pattern(scene, model, data, lidar, args.poses, args.repeats)

    if args.json:
        print(json.dumps({"mujoco": mujoco.__version__, "patterns": results}, indent=2))
        return 0
    head = (
        f"{'pattern':<15}{'rays/sweep':>11}{'reference/s':>13}{'mj_multiRay/s':>15}"
        f"{'ratio':>7}{'hits agree':>12}{'<=1mm':>9}{'max diff m':>12}"
    )
    print(
        f"ray casting on worlds/demo.yaml, {args.poses} poses, best of {args.repeats}, "
        f"MuJoCo {mujoco.__version__}"
    )
    print(head)
    for label, r in results.items():
        print(
            f"{label:<15}{r['rays_per_sweep']:>11}{r['reference_rays_per_s'] / 1e6:>12.2f}M"
            f"{r['mujoco_rays_per_s'] / 1e6:>14.2f}M{r['ratio_reference_over_mujoco']:>7.2f}"
            f"{100 * r['hit_agreement']:>11.3f}%{100 * r['within_1mm']:>8.3f}%"
            f"{r['max_abs_diff_m']:>12.1e}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
