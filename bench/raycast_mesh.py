"""Mesh ray casting: the exact reference caster against Embree on the same rays, one process.

Workloads: the 98,568-triangle terrain (bench/meshes.py) under a VLP-16 (16 x 1800) and a
128 x 2048 lidar, and a closed scanned-like mesh (20,480 triangles) seen from inside. Embree
(embreex, float32, INTERSECT) casts the same float32 rays from the same origins; the reference
is simconform.raycast.Scene on a world holding just that mesh. Prints rays/s of each, their
ratio, the memory one reference scan adds (growth of ru_maxrss over the process's earlier
peak: a lower bound; tests/test_meshcast.py measures it in a fresh process), and the agreement
with the brute-force oracle on a sample of rays.

    python bench/raycast_mesh.py [--sweeps 5] [--oracle 300]
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import meshes  # noqa: E402

from simconform.meshcast import BruteMesh, MeshCaster  # noqa: E402

WORKLOADS = {
    "terrain 98k tri, 16 x 1800": (meshes.terrain, (16, 1800, (-15, 15)), [3.0, 4.0, 5.0]),
    "terrain 98k tri, 128 x 2048": (meshes.terrain, (128, 2048, (-25, 15)), [3.0, 4.0, 5.0]),
    "scanned 20k tri, 16 x 1800": (meshes.scanned, (16, 1800, (-15, 15)), [10.5, -4.0, 2.2]),
}


def rate(fn, n_rays: int, repeats: int) -> float:
    fn()
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return n_rays / best


def bench(make, pattern, origin, sweeps: int, oracle: int) -> dict:
    tri = make()
    caster = MeshCaster(tri)
    d = meshes.lidar_directions(*pattern)
    o = np.asarray(origin, dtype=float)
    t_min, t_max = 0.3, 120.0
    caster.cast(o, d[:8], t_min, t_max)  # builds the Embree scene (not timed)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t, _ = caster.cast(o, d, t_min, t_max)
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    ref = rate(lambda: caster.cast(o, d, t_min, t_max), len(d), sweeps)
    scene = caster._scene
    o32 = np.ascontiguousarray(np.broadcast_to(o - caster.center, d.shape), dtype=np.float32)
    d32 = np.ascontiguousarray(d, dtype=np.float32)
    emb = rate(lambda: scene.run(o32, d32, query="DISTANCE"), len(d), sweeps)
    sample = np.random.default_rng(0).choice(len(d), size=min(oracle, len(d)), replace=False)
    tb, _ = BruteMesh(tri).cast(o, d[sample], t_min, t_max)
    hit = np.isfinite(tb)
    same = np.isfinite(t[sample]) == hit
    err = np.max(np.abs(t[sample][hit & same] - tb[hit & same]), initial=0.0)
    return {
        "rays": len(d),
        "triangles": len(tri),
        "reference": ref,
        "embree": emb,
        "peak_mb": (rss1 - rss0) / 1024,
        "hits": float(np.isfinite(t).mean()),
        "agree": float(same.mean()),
        "max_err": float(err),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweeps", type=int, default=5, help="timed sweeps; the best counts")
    parser.add_argument("--oracle", type=int, default=300, help="rays checked by brute force")
    args = parser.parse_args(argv)
    print(
        f"{'workload':<30}{'reference/s':>13}{'Embree/s':>11}{'ratio':>7}"
        f"{'scan MB':>9}{'hits':>7}{'oracle agree':>14}{'max err m':>11}"
    )
    for label, (make, pattern, origin) in WORKLOADS.items():
        r = bench(make, pattern, origin, args.sweeps, args.oracle)
        print(
            f"{label:<30}{r['reference'] / 1e6:>12.2f}M{r['embree'] / 1e6:>10.2f}M"
            f"{r['reference'] / r['embree']:>7.2f}{r['peak_mb']:>9.0f}{r['hits']:>7.2f}"
            f"{100 * r['agree']:>13.2f}%{r['max_err']:>11.1e}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
