"""Camera noise and JPEG encoding per frame: the table sampler against the float32 normal path
it replaced, on rendered demo frames, in one process.

Renders --frames frames of the rover's 640 x 480 camera along the demo trajectory with the
reference backend, then times per frame: the per-pixel float32 normal path
(`pipeline.noise.apply_image_noise`), the exact table sampler
(`pipeline.image_noise.draw_image_noise`), and JPEG encoding (Pillow / libjpeg-turbo) at the
spec's quality; prints frames/s of each, of noise + JPEG, and the ratio new/old.

    python bench/camera_noise.py [--frames 10] [--repeats 20]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np

from simconform.adapters.reference import ReferenceBackend
from simconform.pipeline.encode import encode_jpeg
from simconform.pipeline.image_noise import draw_image_noise
from simconform.pipeline.noise import apply_image_noise
from simconform.spec import Spec, load_spec
from simconform.trajectory import load_trajectory
from simconform.world import load_world

ROOT = Path(__file__).resolve().parents[1]


def per_frame(fn, frames: list[np.ndarray], repeats: int) -> float:
    """Best mean seconds per frame over `repeats` passes."""
    for f in frames:
        fn(f)
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        for f in frames:
            fn(f)
        best = min(best, (time.perf_counter() - t0) / len(frames))
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args()
    world = load_world(ROOT / "worlds" / "demo.yaml")
    traj = load_trajectory(ROOT / "worlds" / "demo.tum", world)
    cam = load_spec(ROOT / "sensors_spec" / "rover.yaml").sensors["camera"]
    spec = Spec.model_validate({"name": "bench", "sensors": {"camera": cam.model_dump()}})
    times = np.linspace(traj.start_ns, traj.end_ns - 10**9, args.frames).astype(np.int64)
    backend = ReferenceBackend()
    backend.open(world, spec)
    try:
        frames = [backend.capture("camera", int(t), traj).image for t in times]
    finally:
        backend.close()
    n = cam.noise.intensity
    bias, sigma = np.float32(n.bias), np.float32(n.sigma)
    rng = np.random.default_rng(1)
    old = per_frame(lambda f: apply_image_noise(f, bias, sigma, rng), frames, args.repeats)
    new = per_frame(lambda f: draw_image_noise(f, bias, sigma, rng), frames, args.repeats)
    noisy = [draw_image_noise(f, bias, sigma, rng) for f in frames]
    q, sub = cam.jpeg_quality, cam.jpeg_subsampling
    jpeg = per_frame(lambda f: encode_jpeg(f, q, sub), noisy, args.repeats)
    h, w = frames[0].shape[:2]
    print(f"camera {w} x {h}, sigma {float(sigma):g}, {args.frames} demo frames, best of "
          f"{args.repeats}; load average {os.getloadavg()[0]:.1f}")  # fmt: skip
    print(f"float32 normal path   {1 / old:7.1f} frames/s")
    print(f"table sampler         {1 / new:7.1f} frames/s   ratio {old / new:.2f}")
    print(f"JPEG q{q} {sub}         {1 / jpeg:7.1f} frames/s")
    print(f"noise + JPEG          {1 / (new + jpeg):7.1f} frames/s (was {1 / (old + jpeg):.1f})")


if __name__ == "__main__":
    main()
