"""Dense-world ray casting: Scene (the BVH) against Embree on the same geometry, one core.

Workloads: worlds/demo.yaml; seeded city-like worlds of 2,000 and 20,000 boxes and cylinders
(poles) over 2 x 2 km with a ground plane; the 98,568-triangle terrain of bench/meshes.py;
worlds/urban.yaml (3,864 objects on a 36,450-triangle terrain mesh, its actors left out) from
the start of its drive.
Each under a 16 x 1800 (VLP-16) and a 128 x 2048 lidar, and a 640 x 480 camera (90 degrees
wide, looking along +x from the same point: one origin, so Scene casts it in 16 x 16 tiles as the
reference camera does; `--quick` leaves it out). Embree (embreex, float32, DISTANCE)
casts the same rays against the same geometry triangulated (boxes: 12 triangles, cylinders:
32 sides, spheres: icospheres, the plane: a 20 km quad), in the same process. The process is
pinned to one CPU (sched_setaffinity), so Embree's thread pool and numba both get one core.
Prints rays/s of each, their ratio, the ratio with Scene walking the rays one by one instead
of in coherent packets (`1-by-1`, the same hits; a camera's tiles walk ray by ray only where a
tile keeps too many primitives), the peak memory one Scene scan allocates (tracemalloc), and
writes a log-log plot of rays/s against primitives to --out.

`--world PATH` puts your own world file (the worlds/*.yaml format; its actors left out) beside
them as the workload "yours: NAME", scanned from `--at X Y Z` (default: the map origin, 1.8 m
above the first surface below it); `--only yours` leaves the others out.

    python bench/raycast_dense.py [--repeats 3] [--out raycast_dense.png] [--quick] [--only urban]
                                  [--world PATH [--at X Y Z]]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import tracemalloc
from pathlib import Path

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
if hasattr(os, "sched_setaffinity"):
    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})

import numpy as np  # noqa: E402
import trimesh  # noqa: E402
from scipy.spatial.transform import Rotation  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import meshes  # noqa: E402

from simconform.errors import UserError  # noqa: E402
from simconform.raycast import Scene  # noqa: E402
from simconform.world import Box, Cylinder, Mesh, Plane, Sphere, World, load_world  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ORIGIN = {"lat": 0.0, "lon": 0.0, "alt": 0.0}
PATTERNS = {
    "16x1800": (16, 1800, (-15, 15)),
    "128x2048": (128, 2048, (-25, 15)),
    "camera": (480, 640, 90.0),  # rows, columns, horizontal field of view (degrees)
}


def camera_directions(rows: int, cols: int, hfov_deg: float) -> np.ndarray:
    """A pinhole camera's unit pixel rays looking along +x (z up), row-major (rows * cols, 3)."""
    f = (cols / 2) / np.tan(np.radians(hfov_deg) / 2)
    u, v = np.meshgrid(np.arange(cols) - (cols - 1) / 2, np.arange(rows) - (rows - 1) / 2)
    d = np.stack([np.full(u.shape, f), -u, -v], -1).reshape(-1, 3)
    return d / np.linalg.norm(d, axis=1, keepdims=True)


def city(n: int, seed: int = 0, half: float = 1000.0) -> World:
    """n buildings (70 %, some yawed) and poles (30 %) on a ground plane, seeded."""
    rng = np.random.default_rng(seed)
    objects: list[dict] = [{"type": "plane"}]
    for _ in range(n):
        x, y = rng.uniform(-half, half, 2)
        if rng.random() < 0.7:
            size = [*rng.uniform(5, 30, 2), rng.uniform(4, 60)]
            yaw = float(rng.choice([0.0, rng.uniform(-np.pi, np.pi)]))
            center = [x, y, size[2] / 2]
            objects.append({"type": "box", "center": center, "size": size, "rpy": [0, 0, yaw]})
        else:
            objects.append(
                {"type": "cylinder", "center": [x, y, 4.0], "radius": 0.25, "length": 8.0}
            )
    return World.model_validate({"name": f"city{n}", "origin": ORIGIN, "objects": objects})


def terrain_world() -> World:
    w = World.model_validate(
        {"name": "terrain", "origin": ORIGIN, "objects": [{"type": "mesh", "file": "t.obj"}]}
    )
    w._meshes[0] = meshes.terrain()  # bench/meshes.py's triangles, not a file
    return w


def triangulate(world: World) -> np.ndarray:
    """Every object of the world as float64 triangles (T, 3, 3), for Embree."""
    parts = []
    for i, ob in enumerate(world.objects):
        if isinstance(ob, Plane):
            n = np.asarray(ob.normal, dtype=float)
            n /= np.linalg.norm(n)
            u = np.cross(n, [1.0, 0, 0] if abs(n[0]) < 0.9 else [0, 1.0, 0])
            u /= np.linalg.norm(u)
            v = np.cross(n, u)
            p, s = np.asarray(ob.point, dtype=float), 1e4
            q = [p + s * (a * u + b * v) for a, b in ((-1, -1), (1, -1), (1, 1), (-1, 1))]
            parts.append(np.array([[q[0], q[1], q[2]], [q[0], q[2], q[3]]]))
            continue
        if isinstance(ob, Mesh):
            parts.append(world.mesh_triangles(i))
            continue
        tf = np.eye(4)
        tf[:3, 3] = ob.center
        if isinstance(ob, Sphere):
            m = trimesh.creation.icosphere(subdivisions=2, radius=ob.radius)
        else:
            tf[:3, :3] = Rotation.from_euler("xyz", ob.rpy).as_matrix()
            if isinstance(ob, Box):
                m = trimesh.creation.box(extents=ob.size)
            elif isinstance(ob, Cylinder):
                m = trimesh.creation.cylinder(radius=ob.radius, height=ob.length, sections=32)
        m.apply_transform(tf)
        parts.append(m.triangles)
    return np.concatenate(parts)


def embree_scene(tri: np.ndarray):
    from embreex import mesh_construction, rtcore, rtcore_scene

    scene = rtcore_scene.EmbreeScene(rtcore.EmbreeDevice())
    verts = np.ascontiguousarray(tri.reshape(-1, 3), dtype=np.float32)
    faces = np.arange(len(verts), dtype=np.int32).reshape(-1, 3)
    mesh_construction.TriangleMesh(scene, verts, faces)
    return scene


def standing_point(world: World) -> list[float]:
    """The map origin, 1.8 m above the first surface below it (the origin itself if none)."""
    z = Scene(world).ground_height(np.zeros(1), np.zeros(1))[0]
    return [0.0, 0.0, float(z) + 1.8 if np.isfinite(z) else 0.0]


def rate(fn, n_rays: int, repeats: int) -> float:
    fn()
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return n_rays / best


def bench(world: World, origin, pattern, repeats: int) -> dict:
    t0 = time.perf_counter()
    scene = Scene(world)
    build_s = time.perf_counter() - t0
    tri = triangulate(world)
    emb = embree_scene(tri)
    camera = isinstance(pattern[2], float)
    d = camera_directions(*pattern) if camera else meshes.lidar_directions(*pattern)
    width = pattern[1] if camera else None  # a camera's grid: cast in tiles
    o = np.asarray(origin, dtype=float)
    t_min, t_max = (0.0, 1000.0) if camera else (0.3, 200.0)
    # compiled (or loaded from numba's cache) before the traced scan: the walk, and a camera's tiles
    scene.cast(o, d[:8], t_min, t_max)
    if camera:
        scene.cast(o, d[: 2 * width], t_min, t_max, width=width)
    tracemalloc.start()
    hits = scene.cast(o, d, t_min, t_max, width=width)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    one = scene.cast(o, d, t_min, t_max, width=width, packet=1)
    for a, b in ((hits.dist, one.dist), (hits.index, one.index), (hits.normal, one.normal)):
        if not np.array_equal(a, b, equal_nan=a.dtype.kind == "f"):
            raise SystemExit("packets and the one-by-one walk differ: a bug, please report it")
    ours = rate(lambda: scene.cast(o, d, t_min, t_max, width=width), len(d), repeats)
    # the lidars' rays one by one instead of in packets (the same hits): what packets gain
    alone = rate(lambda: scene.cast(o, d, t_min, t_max, width=width, packet=1), len(d), repeats)
    o32 = np.ascontiguousarray(np.broadcast_to(o, d.shape), dtype=np.float32)
    d32 = np.ascontiguousarray(d, dtype=np.float32)
    far = np.full(len(d), t_max, dtype=np.float32)
    theirs = rate(lambda: emb.run(o32, d32, dists=far.copy(), query="DISTANCE"), len(d), repeats)
    te = emb.run(o32, d32, dists=far.copy(), query="DISTANCE")
    te = np.where(te >= t_max, np.inf, te)
    both = np.isfinite(te) & np.isfinite(hits.dist)
    return {
        "objects": sum(not isinstance(ob, Plane | Mesh) for ob in world.objects),
        "triangles": len(tri),
        "rays": len(d),
        "scene": ours,
        "alone": alone,
        "embree": theirs,
        "peak_mb": peak / 2**20,
        "build_s": build_s,
        "hits": float(np.isfinite(hits.dist).mean()),
        "hit_agree": float(np.mean(np.isfinite(te) == np.isfinite(hits.dist))),
        "median_diff": float(np.median(np.abs(te[both] - hits.dist[both]))) if both.any() else 0,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="timed scans; the best counts")
    parser.add_argument("--out", type=Path, default=None, help="log-log plot (PNG) to write")
    parser.add_argument("--quick", action="store_true", help="16 x 1800 only")
    parser.add_argument("--only", default=None, help="workloads whose name contains this")
    parser.add_argument("--world", type=Path, default=None, help="your world file, as well")
    parser.add_argument("--at", type=float, nargs=3, default=None, metavar=("X", "Y", "Z"),
                        help="--world's scan origin (map frame, m)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.at is not None and args.world is None:
        parser.error("--at places --world's scans: give --world too")
    worlds = {
        "demo": (lambda: load_world(ROOT / "worlds" / "demo.yaml"), [0.0, -18.0, 1.2]),
        "city 2k": (lambda: city(2000), [3.0, 4.0, 1.8]),
        "city 20k": (lambda: city(20000), [3.0, 4.0, 1.8]),
        "terrain 98k tri": (terrain_world, [3.0, 4.0, 5.0]),
        "urban": (lambda: load_world(ROOT / "worlds" / "urban.yaml"), [23.7, -1.9, 1.55]),
    }
    if args.world is not None:
        try:
            yours = load_world(args.world)
        except UserError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        worlds[f"yours: {args.world.stem}"] = (lambda: yours, args.at or standing_point(yours))
    worlds = {k: v for k, v in worlds.items() if args.only is None or args.only in k}
    patterns = {k: v for k, v in PATTERNS.items() if k == "16x1800" or not args.quick}
    print(f"one core, best of {args.repeats}; load average {os.getloadavg()[0]:.1f}")
    print(
        f"{'workload':<26}{'prims':>8}{'Scene/s':>10}{'Embree/s':>10}{'ratio':>7}"
        f"{'1-by-1':>8}{'scan MB':>9}{'build s':>8}{'hits':>6}{'agree':>7}"
    )
    rows = []
    for name, (make, origin) in worlds.items():
        world = make()
        if name.startswith("yours: "):
            print(f"{name}: {args.world}, scanned from {', '.join(f'{v:g}' for v in origin)}")
        for pname, pattern in patterns.items():
            r = bench(world, origin, pattern, args.repeats)
            prims = r["objects"] or r["triangles"]
            rows.append((name, pname, prims, r))
            print(
                f"{name + ' ' + pname:<26}{prims:>8}{r['scene'] / 1e6:>9.2f}M"
                f"{r['embree'] / 1e6:>9.2f}M{r['scene'] / r['embree']:>7.2f}"
                f"{r['alone'] / r['embree']:>8.2f}"
                f"{r['peak_mb']:>9.1f}{r['build_s']:>8.2f}{r['hits']:>6.2f}"
                f"{100 * r['hit_agree']:>6.1f}%"
            )
    if args.out:
        plot(rows, args.out)
    return 0


def plot(rows, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    # Worlds of objects on one line; the terrain (triangles) as its own points, since a
    # triangle and an object are different units of work.
    colours = {"Scene (BVH)": "tab:blue", "Embree": "tab:orange"}
    for pname, marker in zip(PATTERNS, "os^", strict=True):
        objs = sorted((p, r) for _, pn, p, r in rows if pn == pname and r["objects"])
        tris = [(p, r) for _, pn, p, r in rows if pn == pname and not r["objects"]]
        for who, key, ls in (("Scene (BVH)", "scene", "-"), ("Embree", "embree", "--")):
            kw = {"color": colours[who], "marker": marker, "linestyle": ls}
            if objs:
                x = [p for p, _ in objs]
                ax.loglog(x, [r[key] for _, r in objs], label=f"{who} {pname}, objects", **kw)
            if tris:
                kw["linestyle"] = "none"
                kw["markerfacecolor"] = "none"
                x = [p for p, _ in tris]
                ax.loglog(x, [r[key] for _, r in tris], label=f"{who} {pname}, triangles", **kw)
    ax.set_xlabel("objects (boxes, cylinders, spheres; filled) or mesh triangles (open)")
    ax.set_ylabel("rays/s, one core")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=120)


if __name__ == "__main__":
    sys.exit(main())
