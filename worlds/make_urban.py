"""Regenerate worlds/urban.yaml, worlds/urban.tum and worlds/meshes/urban_terrain.obj: a city
grid (3 x 3 blocks, streets 12 m wide between 3.5 m sidewalks) on which lidar odometry is
well posed, with a closed-loop drive around the central block and moving actors.

- The ground is one triangle mesh with gentle relief (a grade of a few decimetres over the
  block, undulations of a few cm, a road camber): a perfect plane looks the same from
  everywhere to a lidar whose rays keep their angles (docs/localization.md).
- Buildings line every block edge with façade detail, sidewalks are kerbed slabs with
  furniture, cars are parked along the kerbs (urban_parts.py).
- The ego vehicle drives anticlockwise around the central block, in the right-hand lane,
  through corners of clothoid-arc-clothoid curvature (so the yaw rate has no steps), already
  moving at t = 0, and rests on the terrain on four wheels (height, pitch and roll from the
  wheels' contact heights, each averaged over a tyre's contact patch, as in
  make_demo_trajectory.py).
- Actors: two cars on the streets leaving the loop and pedestrians on sidewalks and one
  crossing, all clear of the ego's path and of the buildings (tests/test_urban.py checks).

Deterministic (one seeded generator, rounded numbers): running it again gives the same bytes.
Run: python worlds/make_urban.py [--out DIR] [--size full|small]
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml
from scipy.spatial.transform import Rotation

sys.path.insert(0, str(Path(__file__).resolve().parent))
from urban_parts import (
    KERB_M,
    SIDEWALK_M,
    Builder,
    Frontage,
    Terrain,
    building,
    furniture,
    parked_cars,
    r3,
    r4,
)

HERE = Path(__file__).resolve().parent
ROAD_HALF_M = 6.0  # centreline to kerb
LANE_M = 1.9  # centreline to the ego's lane
MARGIN_M = 55.0  # streets run on this far beyond the loop
WHEELBASE_M, TRACK_M, CONTACT_M = 2.7, 1.6, 0.3
RATE_HZ = 50
SEED = 19
ACCEL = 1.5  # m/s^2, speeding up and braking
WALK_M = 1.9  # pedestrians walk this far from the building line (urban_parts.furniture)
GRAIN_M = 0.03  # road texture: each terrain vertex up to this much up or down


@dataclass(frozen=True)
class Size:
    spacing: float  # between neighbouring parallel streets: x, y = 0, spacing, 2 spacing
    v_straight: float  # m/s
    v_corner: float
    corner_r: float  # radius of the arcs

    @property
    def streets(self) -> tuple[float, float, float]:
        return (0.0, self.spacing, 2 * self.spacing)


SIZES = {"full": Size(49.0, 7.0, 4.0, 8.0), "small": Size(32.0, 6.0, 4.0, 8.0)}


def relief(x: np.ndarray, y: np.ndarray, size: Size) -> np.ndarray:
    """Terrain height under the texture: a gentle grade across the town and a camber on the
    streets (crown on the centreline, 12 cm lower at the kerb)."""
    z = 0.25 * np.sin(2 * np.pi * x / 260 + 0.4) + 0.18 * np.sin(2 * np.pi * y / 190 + 1.1)
    d = np.min([np.abs(v - c) for v in (x, y) for c in size.streets], axis=0)
    return z - 0.12 * np.minimum(d / ROAD_HALF_M, 1.0) ** 2


def blocks(size: Size) -> list[tuple[float, float, float, float]]:
    """The 4 x 4 blocks (x0, x1, y0, y1) around the streets x, y = 0, spacing, 2 spacing."""
    w = ROAD_HALF_M + SIDEWALK_M
    edges = [-MARGIN_M - w, *size.streets, 2 * size.spacing + MARGIN_M + w]
    spans = [(a + w, b - w) for a, b in itertools.pairwise(edges)]
    return [(a, b, c, d) for c, d in spans for a, b in spans]


def frontages(block) -> list[Frontage]:
    """The block's edges that face a street (not the world's edge), walked anticlockwise."""
    x0, x1, y0, y1 = block
    return [
        Frontage((x0, y0), (1.0, 0.0), x1 - x0),
        Frontage((x1, y0), (0.0, 1.0), y1 - y0),
        Frontage((x1, y1), (-1.0, 0.0), x1 - x0),
        Frontage((x0, y1), (0.0, -1.0), y1 - y0),
    ]


def build_world(size: Size, terrain: Terrain, rng) -> tuple[Builder, list]:
    b = Builder()
    slabs: list[tuple[Frontage, float, float, float]] = []  # frontage, s0, s1, top
    xmin, xmax = -MARGIN_M, 2 * size.spacing + MARGIN_M
    ymin, ymax = xmin, xmax

    def edge_of_world(f: Frontage) -> bool:
        x, y = f.xy(f.length / 2, 1.0)
        return not (xmin < x < xmax and ymin < y < ymax)

    fronts = [f for blk in blocks(size) for f in frontages(blk) if not edge_of_world(f)]
    # sidewalks: slabs along every frontage, from the building line to the kerb, 5-10 m long
    for f in fronts:
        s = -SIDEWALK_M
        while s < f.length + SIDEWALK_M - 0.5:
            ln = min(float(rng.uniform(5, 10)), f.length + SIDEWALK_M - s)
            x, y = f.xy(s + ln / 2, SIDEWALK_M / 2)
            top = float(terrain.height(x, y)) + KERB_M + float(rng.uniform(-0.02, 0.03))
            b.fbox(f, "sidewalk", "flat.sidewalk", s, s + ln, -0.5, SIDEWALK_M, top - 0.5, top,
                   (0.62, 0.6, 0.58), refl=0.35)  # fmt: skip
            slabs.append((f, s, s + ln, r3(top)))
            s += ln

    def z_at(x: float, y: float) -> float:
        return sidewalk_top(slabs, x, y, terrain)

    for f in fronts:
        s = 0.0
        while s < f.length - 4:
            w = min(float(rng.uniform(7, 20)), f.length - s)
            x, y = f.xy(s + w / 2, 0.5)
            fl = 3 if rng.random() < 0.15 else 2
            building(b, f, s, w, z_at(x, y), fl, rng)
            s += w + float(rng.choice([0.0, 0.0, 0.0, 1.5, 3.0]))
        furniture(b, f, 0.0, f.length, z_at, rng)
        parked_cars(b, f, 6.0, f.length - 6.0, terrain.height, rng)
    return b, slabs


def sidewalk_top(slabs, x: float, y: float, terrain: Terrain) -> float:
    """Height of what stands at (x, y): a sidewalk slab's top, else the terrain."""
    for f, s0, s1, top in slabs:
        dx, dy = x - f.o[0], y - f.o[1]
        s = dx * f.u[0] + dy * f.u[1]
        e = dx * f.n[0] + dy * f.n[1]
        if s0 <= s <= s1 and -0.5 <= e <= SIDEWALK_M:
            return top
    return float(terrain.height(x, y))


# ---------------------------------------------------------------------------- the drive


def lane_corners(size: Size) -> list[tuple[tuple[float, float], int]]:
    """The figure-8's lane corners and turns (+1 left, -1 right), from the start of the
    south-west lobe's south street: east, north through the centre, around the north-east
    block clockwise, west through the centre, south. Right-hand traffic: the lane is LANE_M
    right of the centreline. The two lobes enclose opposite areas."""
    c, e = size.spacing, LANE_M
    return [
        ((c + e, -e), 1),  # east on y = 0, left into x = c
        ((c + e, 2 * c - e), -1),  # north through the centre, right into y = 2c
        ((2 * c - e, 2 * c - e), -1),  # east, right into x = 2c
        ((2 * c - e, c + e), -1),  # south, right into y = c
        ((-e, c + e), 1),  # west through the centre, left into x = 0
        ((-e, -e), 1),  # south, left into y = 0
    ]


def loop_path(size: Size, ds: float = 0.02) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Points (x, y), heading and curvature every ds m along the figure-8, each corner a
    clothoid, an arc and a clothoid (the yaw rate has no steps), starting where the last
    corner ends, heading east."""
    clo = 5.0  # clothoid length at each end of an arc
    k0 = 1.0 / size.corner_r
    arc = math.pi / 2 / k0 - clo  # heading change of the corner: k0 * (clo + arc) = pi/2
    corner = np.arange(0, 2 * clo + arc, ds)
    kc = np.clip(np.minimum(corner / clo, (2 * clo + arc - corner) / clo), 0, 1) * k0
    hc = np.r_[0, np.cumsum(kc[:-1] * ds)]
    a = float(np.sum(np.cos(hc)) * ds)  # how far before the lane corner the turn starts
    pts = lane_corners(size)
    kappa = []
    for i, (p, turn) in enumerate(pts):
        straight = math.dist(pts[i - 1][0], p) - 2 * a
        kappa += [np.zeros(round(straight / ds)), turn * kc]
    k = np.concatenate(kappa)
    heading = np.r_[0, np.cumsum(k[:-1] * ds)]
    x = pts[-1][0][0] + a + np.r_[0, np.cumsum(np.cos(heading[:-1]) * ds)]
    y = pts[-1][0][1] + np.r_[0, np.cumsum(np.sin(heading[:-1]) * ds)]
    return np.c_[x, y], heading, k


def drive(size: Size, terrain: Terrain, start_m: float = 15.0):
    """Times, positions and rotations of base_link at RATE_HZ, one lap from start_m along the
    first street back to it, moving at both ends (KISS-ICP's constant-velocity model starts
    at rest, and a slow start on a near-flat road lets it lag by metres); speed limited by
    lateral (2 m/s^2) and longitudinal (ACCEL) acceleration."""
    xy, heading, k = loop_path(size)
    ds = 0.02
    n = len(k)
    shift = round(start_m / ds)
    xy, heading, k = (np.roll(v, -shift, axis=0) for v in (xy, heading, k))
    heading = np.unwrap(heading)
    v = np.minimum(size.v_straight, np.sqrt(2.0 / np.maximum(np.abs(k), 1e-9)))
    v = np.maximum(v, size.v_corner)
    for _ in range(2):  # longitudinal acceleration limits around the loop, twice round
        for i in range(1, 2 * n):
            v[i % n] = min(v[i % n], math.sqrt(v[(i - 1) % n] ** 2 + 2 * ACCEL * ds))
        for i in range(2 * n - 2, -1, -1):
            v[i % n] = min(v[i % n], math.sqrt(v[(i + 1) % n] ** 2 + 2 * ACCEL * ds))
    # closed: the start point again at the end, reached at the same speed
    xy, heading = np.r_[xy, xy[:1]], np.r_[heading, heading[:1] + heading[-1] - heading[-2]]
    v = np.r_[v, v[:1]]
    t_of_s = np.r_[0, np.cumsum(ds / (0.5 * (v[:-1] + v[1:])))]
    steps = math.ceil(t_of_s[-1] * RATE_HZ)
    t_of_s *= steps / RATE_HZ / t_of_s[-1]  # a whole number of steps: a hair slower
    t = np.arange(steps + 1) / RATE_HZ
    sgrid = np.arange(n + 1) * ds
    s = np.interp(t, t_of_s, sgrid)
    x = np.interp(s, sgrid, xy[:, 0])
    y = np.interp(s, sgrid, xy[:, 1])
    yaw = np.interp(s, sgrid, heading)
    z, pitch, roll = rest_on_wheels(terrain, x, y, yaw)
    rot = Rotation.from_euler("ZYX", np.c_[yaw, pitch, roll])
    return t, np.c_[x, y, z], rot


def rest_on_wheels(terrain: Terrain, x, y, yaw):
    """Body height (mean of the wheels'), pitch and roll from four wheels' contact heights,
    each the terrain averaged over a tyre's contact patch."""
    c, s = np.cos(yaw), np.sin(yaw)
    patch = np.linspace(-CONTACT_M / 2, CONTACT_M / 2, 7)
    zw = {}
    for fx in (1, -1):
        for fy in (1, -1):
            along = fx * WHEELBASE_M / 2 + patch[None, :]
            px = x[:, None] + along * c[:, None] - fy * TRACK_M / 2 * s[:, None]
            py = y[:, None] + along * s[:, None] + fy * TRACK_M / 2 * c[:, None]
            zw[fx, fy] = terrain.height(px, py).mean(axis=1)
    front = 0.5 * (zw[1, 1] + zw[1, -1])
    rear = 0.5 * (zw[-1, 1] + zw[-1, -1])
    left = 0.5 * (zw[1, 1] + zw[-1, 1])
    right = 0.5 * (zw[1, -1] + zw[-1, -1])
    pitch = -np.arctan2(front - rear, WHEELBASE_M)  # nose up is negative pitch (REP 103)
    roll = np.arctan2(left - right, TRACK_M)
    return 0.5 * (front + rear), pitch, roll


# ---------------------------------------------------------------------------- actors


def actors(size: Size, terrain: Terrain, slabs) -> list[dict]:
    """Three cars on streets the ego does not drive, a pedestrian walking a sidewalk of the
    south-west block and one crossing a street the ego does not drive, all to and fro."""

    def path(points, speed: float, z_of, back: bool) -> list[list[float]]:
        pts = [np.asarray(p, float) for p in points]
        if back:
            pts = pts + pts[-2::-1]
        out, t = [], 0.0
        for i, p in enumerate(pts):
            if i:
                t += float(np.linalg.norm(p - pts[i - 1])) / speed
            nxt = pts[i + 1] if i + 1 < len(pts) else p + (p - pts[i - 1])
            prv = pts[i - 1] if i else p - (nxt - p)
            d = nxt - prv if i + 1 < len(pts) else p - prv
            yaw = math.atan2(d[1], d[0])
            out.append([r3(t), r3(p[0]), r3(p[1]), r3(z_of(*p)), r4(yaw)])
        return out

    def line(a, b, step):
        n = max(1, math.ceil(math.dist(a, b) / step))
        return [(a[0] + (b[0] - a[0]) * i / n, a[1] + (b[1] - a[1]) * i / n) for i in range(n + 1)]

    road = terrain.height
    walk = lambda x, y: sidewalk_top(slabs, x, y, terrain)  # noqa: E731
    far = MARGIN_M - 6
    c, e = size.spacing, LANE_M
    car = lambda col: {"type": "box", "center": [0, 0, 0.8], "size": [4.5, 1.85, 1.5],  # noqa: E731
                       "color": col, "reflectivity": 0.7}  # fmt: skip
    ped = lambda col: {"type": "cylinder", "center": [0, 0, 0.87], "radius": 0.28,  # noqa: E731
                       "length": 1.74, "color": col, "reflectivity": 0.4}  # fmt: skip
    w = ROAD_HALF_M + SIDEWALK_M
    return [
        {"name": "car_north", "class": "vehicle.car", "shape": car([0.8, 0.1, 0.1]),
         "path": path(line((2 * c + e, 2 * c + 14), (2 * c + e, 2 * c + far), 4.0), 5.0, road,
                      True), "loop": True},
        {"name": "car_west", "class": "vehicle.car", "shape": car([0.1, 0.2, 0.8]),
         "path": path(line((-far, e), (-16.0, e), 4.0), 4.0, road, True), "loop": True},
        {"name": "car_east", "class": "vehicle.car", "shape": car([0.9, 0.9, 0.9]),
         "path": path(line((c + 16, -e), (2 * c + far, -e), 4.0), 6.0, road, True), "loop": True},
        {"name": "ped_sidewalk", "class": "human.pedestrian.adult", "shape": ped([0.9, 0.7, 0.1]),
         "path": path(line((w + 2, w - WALK_M), (c - w - 2, w - WALK_M), 2.0), 1.4, walk, True),
         "loop": True},
        {"name": "ped_crossing", "class": "human.pedestrian.adult", "shape": ped([0.2, 0.8, 0.8]),
         "path": path(line((2 * c - w + 1, c / 2), (2 * c + w - 1, c / 2), 1.0), 1.2, walk, True),
         "loop": True},
    ]  # fmt: skip


# ---------------------------------------------------------------------------- files


class _NoAliases(yaml.SafeDumper):
    def ignore_aliases(self, data) -> bool:
        return True


def generate(out: Path, size_name: str = "full") -> dict:
    size = SIZES[size_name]
    rng = np.random.default_rng(SEED)
    x0, y0 = -MARGIN_M - 4, -MARGIN_M - 4
    ext = (x0, 2 * size.spacing + MARGIN_M + 4, y0, 2 * size.spacing + MARGIN_M + 4)
    terrain = Terrain.make(*ext, lambda x, y: relief(x, y, size), rng, GRAIN_M)
    smooth = Terrain.make(*ext, lambda x, y: relief(x, y, size), np.random.default_rng(0), 0.0)
    b, slabs = build_world(size, terrain, rng)
    stem = "urban" if size_name == "full" else f"urban_{size_name}"
    mesh_rel = f"meshes/{stem}_terrain.obj"
    (out / "meshes").mkdir(parents=True, exist_ok=True)
    (out / mesh_rel).write_text(terrain.obj_text())
    world = {
        "name": stem,
        "origin": {"lat": 48.262, "lon": 11.668, "alt": 480.0},
        "sky_color": [0.55, 0.7, 0.9],
        "objects": [
            {
                "type": "mesh",
                "name": "terrain",
                "class": "flat.terrain",
                "file": mesh_rel,
                "color": [0.35, 0.35, 0.37],
                "reflectivity": 0.25,
            },
            *b.objects,
        ],
        "actors": actors(size, terrain, slabs),
    }
    head = (
        f"# simconform urban world ({size_name}): worlds/make_urban.py --size {size_name}, "
        "do not edit.\n# A 3 x 3 block city grid on a terrain mesh; the ego loop "
        f"({stem}.tum) drives around the central block. Map frame (ENU), metres, radians.\n"
    )
    text = yaml.dump(world, Dumper=_NoAliases, sort_keys=False, default_flow_style=None, width=100)
    (out / f"{stem}.yaml").write_text(head + text)
    t, pos, rot = drive(size, smooth)
    q = rot.as_quat()
    q *= np.where(q[:, 3:] < 0, -1.0, 1.0)
    with open(out / f"{stem}.tum", "w") as fh:
        fh.write("# t x y z qx qy qz qw\n")
        for ti, p, qq in zip(t, pos, q, strict=True):
            fh.write(f"{ti:.2f} " + " ".join(f"{v:.6f}" for v in (*p, *qq)) + "\n")
    length = float(np.sum(np.linalg.norm(np.diff(pos, axis=0), axis=1)))
    return {"objects": len(world["objects"]), "triangles": terrain.triangles,
            "duration_s": float(t[-1]), "path_m": length}  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=HERE, help="folder (default: worlds/)")
    ap.add_argument("--size", choices=sorted(SIZES), default="full")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    info = generate(args.out, args.size)
    print(
        f"wrote {args.out}: {info['objects']} objects, terrain {info['triangles']} triangles, "
        f"{info['path_m']:.1f} m in {info['duration_s']:.2f} s"
    )


if __name__ == "__main__":
    main()
