"""Camera throughput: the reference ray-cast camera against MuJoCo's renderer, same process.

    python bench/camera.py [--frames 20] [--json]

Both render the demo world at 640 x 480 from the same poses along the demo trajectory (the
camera of sensors_spec/rover.yaml). MuJoCo uses MUJOCO_GL (default here: osmesa on a CPU-only
machine, egl with a GPU). Prints frames/s of each and their ratio, and the time of rotating
one frame's pixel rays by the camera's attitude with numpy's matmul against the numba kernel
the reference camera uses (adapters/reference.py `_rotate`); no timing is asserted anywhere in
the tests.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from simconform.adapters.mujoco import MujocoBackend, default_gl
from simconform.adapters.reference import ReferenceBackend, _rotate
from simconform.spec import Spec, load_spec
from simconform.trajectory import load_trajectory
from simconform.world import load_world

ROOT = Path(__file__).resolve().parents[1]


def fps(backend, times: np.ndarray, traj) -> float:
    backend.capture("camera", int(times[0]), traj)  # warm up (MuJoCo: GL context, textures)
    start = time.perf_counter()
    for t in times:
        backend.capture("camera", int(t), traj)
    return len(times) / (time.perf_counter() - start)


def rotation_ms(repeats: int = 200) -> tuple[float, float]:
    """ms per 640 x 480 frame of pixel rays rotated by one matrix: numpy matmul, `_rotate`."""
    rng = np.random.default_rng(0)
    rays = rng.normal(size=(480, 640, 3))
    rot = np.linalg.qr(rng.normal(size=(3, 3)))[0][None]
    out = np.empty((480 * 640, 3))
    _rotate(rays, rot, out)  # compiled before timing
    took = []
    for fn in (lambda: np.matmul(rays.reshape(-1, 3), rot[0].T, out=out),
               lambda: _rotate(rays, rot, out)):  # fmt: skip
        start = time.perf_counter()
        for _ in range(repeats):
            fn()
        took.append((time.perf_counter() - start) / repeats * 1e3)
    return took[0], took[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=20)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    default_gl()
    world = load_world(ROOT / "worlds" / "demo.yaml")
    traj = load_trajectory(ROOT / "worlds" / "demo.tum", world)
    cam = load_spec(ROOT / "sensors_spec" / "rover.yaml").sensors["camera"]
    spec = Spec.model_validate({"name": "bench", "sensors": {"camera": cam.model_dump()}})
    times = np.linspace(traj.start_ns, traj.end_ns - 10**9, args.frames).astype(np.int64)
    results = {}
    threadpool_limits(limits=1, user_api="blas")  # as `simconform run` casts (simconform/run.py)
    for name, cls in (("reference", ReferenceBackend), ("mujoco", MujocoBackend)):
        b = cls()
        b.open(world, spec)
        try:
            results[name] = fps(b, times, traj)
        finally:
            b.close()
    results["ratio_reference_over_mujoco"] = results["reference"] / results["mujoco"]
    results["rotate_ms_numpy"], results["rotate_ms_numba"] = rotation_ms()
    if args.json:
        print(json.dumps(results))
        return
    print(
        f"camera 640x480 on worlds/demo.yaml, {args.frames} frames, "
        f"MUJOCO_GL={os.environ['MUJOCO_GL']}"
    )
    print(f"reference ray casting  {results['reference']:7.1f} frames/s")
    print(f"MuJoCo Renderer        {results['mujoco']:7.1f} frames/s")
    print(f"ratio reference/mujoco {results['ratio_reference_over_mujoco']:7.2f}")
    print(
        f"pixel rays rotated, ms per frame: numpy matmul {results['rotate_ms_numpy']:.2f}, "
        f"_rotate {results['rotate_ms_numba']:.2f}"
    )


if __name__ == "__main__":
    main()
