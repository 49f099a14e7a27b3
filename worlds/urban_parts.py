"""Parts of worlds/urban.yaml (see make_urban.py): the terrain, buildings with façade detail
and street furniture, as world-file objects.

Everything a 16-ring lidar uses to fix height, pitch and roll is horizontal structure at the
heights its rings reach (a VLP-16 1.2 m up sees 0-3.5 m of a façade 7 m away): kerbs,
plinths, window sills, string courses, awnings, balconies, low walls, bins and cars of
varied heights. Numbers are rounded (mm, 0.1 mrad) so that the files are stable text.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

TERRAIN_STEP_M = 1.6
SIDEWALK_M = 3.5  # building line to kerb
KERB_M = 0.15  # sidewalk top above the road


def r3(v: float) -> float:
    return round(float(v), 3)


def r4(v: float) -> float:
    return round(float(v), 4)


@dataclass
class Terrain:
    """The ground: a regular grid of heights, split into two triangles per cell (the diagonal
    from the cell's lower-left to its upper-right corner), written as an OBJ. `height` is the
    mesh's own surface (barycentric on the rounded vertices), so what rests on it rests on
    exactly what the lidar sees."""

    x0: float
    y0: float
    nx: int  # vertices along x
    ny: int
    z: np.ndarray  # (ny, nx), rounded to 0.1 mm

    @staticmethod
    def make(x0: float, x1: float, y0: float, y1: float, relief, rng, grain: float) -> Terrain:
        nx = math.ceil((x1 - x0) / TERRAIN_STEP_M) + 1
        ny = math.ceil((y1 - y0) / TERRAIN_STEP_M) + 1
        gx = x0 + TERRAIN_STEP_M * np.arange(nx)
        gy = y0 + TERRAIN_STEP_M * np.arange(ny)
        xx, yy = np.meshgrid(gx, gy)
        z = relief(xx, yy) + rng.uniform(-grain, grain, xx.shape)  # texture: patches, bumps
        return Terrain(x0, y0, nx, ny, np.round(z, 4))

    @property
    def triangles(self) -> int:
        return 2 * (self.nx - 1) * (self.ny - 1)

    def height(self, x, y) -> np.ndarray:
        x, y = np.broadcast_arrays(np.asarray(x, float), np.asarray(y, float))
        u = (x - self.x0) / TERRAIN_STEP_M
        v = (y - self.y0) / TERRAIN_STEP_M
        i = np.clip(np.floor(u).astype(int), 0, self.nx - 2)
        j = np.clip(np.floor(v).astype(int), 0, self.ny - 2)
        fu, fv = u - i, v - j
        z00, z10 = self.z[j, i], self.z[j, i + 1]
        z01, z11 = self.z[j + 1, i], self.z[j + 1, i + 1]
        lower = fu >= fv  # below the diagonal: triangle (00, 10, 11)
        return np.where(
            lower,
            z00 + fu * (z10 - z00) + fv * (z11 - z10),
            z00 + fv * (z01 - z00) + fu * (z11 - z01),
        )

    def obj_text(self) -> str:
        lines = [
            "# urban terrain: worlds/make_urban.py, do not edit",
            f"# {self.nx} x {self.ny} vertices, {TERRAIN_STEP_M} m apart, "
            f"{self.triangles} triangles",
        ]
        for j in range(self.ny):
            y = self.y0 + TERRAIN_STEP_M * j
            for i in range(self.nx):
                x = self.x0 + TERRAIN_STEP_M * i
                lines.append(f"v {x:.3f} {y:.3f} {self.z[j, i]:.4f}")
        for j in range(self.ny - 1):
            for i in range(self.nx - 1):
                a = j * self.nx + i + 1  # OBJ counts from 1
                b, c, d = a + 1, a + self.nx + 1, a + self.nx
                lines.append(f"f {a} {b} {c}")
                lines.append(f"f {a} {c} {d}")
        return "\n".join(lines) + "\n"


@dataclass
class Frontage:
    """A block edge facing a street: from `o` along unit `u` for `length` m; `n` points to the
    street. Local (s, e, z): s along the edge, e towards the street (0: the building line)."""

    o: tuple[float, float]
    u: tuple[float, float]
    length: float

    @property
    def n(self) -> tuple[float, float]:
        return (self.u[1], -self.u[0])  # u turned clockwise: blocks are walked anticlockwise

    @property
    def yaw(self) -> float:
        return math.atan2(self.u[1], self.u[0])

    def xy(self, s: float, e: float) -> tuple[float, float]:
        n = self.n
        return (self.o[0] + s * self.u[0] + e * n[0], self.o[1] + s * self.u[1] + e * n[1])


@dataclass
class Builder:
    """Collects objects, each named `<part>_<number>` and classed."""

    objects: list[dict] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    def _name(self, part: str) -> str:
        k = self.counts.get(part, 0)
        self.counts[part] = k + 1
        return f"{part}_{k:04d}"

    def box(self, part, cls, center, size, yaw=0.0, color=(0.6, 0.6, 0.6), pitch=0.0, refl=0.5):
        self.objects.append(
            {
                "type": "box",
                "name": self._name(part),
                "class": cls,
                "center": [r3(c) for c in center],
                "size": [r3(max(s, 0.01)) for s in size],
                "rpy": [0.0, r4(pitch), r4(yaw)],
                "color": [r3(c) for c in color],
                "reflectivity": refl,
            }
        )

    def cylinder(self, part, cls, center, radius, length, color=(0.5, 0.5, 0.5), refl=0.5):
        self.objects.append(
            {
                "type": "cylinder",
                "name": self._name(part),
                "class": cls,
                "center": [r3(c) for c in center],
                "radius": r3(radius),
                "length": r3(length),
                "color": [r3(c) for c in color],
                "reflectivity": refl,
            }
        )

    def fbox(self, f: Frontage, part, cls, s0, s1, e0, e1, z0, z1, color, pitch=0.0, refl=0.5):
        """A box on frontage `f`, spanning s0..s1 along it, e0..e1 across, z0..z1 up."""
        x, y = f.xy((s0 + s1) / 2, (e0 + e1) / 2)
        size = (s1 - s0, e1 - e0, z1 - z0)
        self.box(part, cls, (x, y, (z0 + z1) / 2), size, f.yaw, color, pitch, refl)


BUILDING = "static.building"


def building(b: Builder, f: Frontage, s0: float, w: float, z0: float, floors: int, rng) -> None:
    """One building on frontage f from s0, w wide: body, plinth, shop fronts or sills on the
    ground floor, string courses, pilasters, sills, balconies, cornice. z0: sidewalk top."""
    s1 = s0 + w
    gh = float(rng.uniform(3.4, 4.4))  # ground floor
    fh = float(rng.uniform(2.9, 3.4))
    top = z0 + gh + (floors - 1) * fh
    sb = float(rng.choice([0.0, 0.0, 0.4, 0.8, 1.5]))  # set back from the building line
    depth = float(rng.uniform(10, 16))
    tone = float(rng.uniform(0.45, 0.8))
    wall = (tone, tone * rng.uniform(0.85, 1.0), tone * rng.uniform(0.7, 0.95))
    trim = (min(1, tone + 0.15),) * 3
    b.fbox(f, "bldg_body", BUILDING, s0, s1, -sb - depth, -sb, z0 - 1.0, top, wall)
    bays = max(2, round(w / rng.uniform(2.4, 3.6)))
    bw = w / bays
    # plinth: a step at knee height along the whole front
    ph = float(rng.uniform(0.25, 0.8))
    b.fbox(f, "bldg_plinth", BUILDING, s0, s1, -sb, -sb + rng.uniform(0.08, 0.2), z0 - 0.2,
           z0 + ph, trim)  # fmt: skip
    shops = rng.random() < 0.6
    for k in range(bays):
        a, c = s0 + k * bw, s0 + (k + 1) * bw
        m = (a + c) / 2
        if shops:
            sill = float(rng.uniform(0.45, 0.95))
            b.fbox(f, "bldg_shopsill", BUILDING, a + 0.25, c - 0.25, -sb, -sb + 0.18,
                   z0 + sill - 0.1, z0 + sill, trim)  # fmt: skip
            if rng.random() < 0.55:  # awning, sloping down towards the street
                d = float(rng.uniform(1.0, 1.8))
                slope = float(rng.uniform(0.15, 0.35))
                zc = z0 + gh - 0.7 - d / 2 * math.sin(slope)
                x, y = f.xy(m, -sb + d / 2 * math.cos(slope))
                col = tuple(rng.uniform(0.2, 0.9, 3))
                # pitch about the frontage's u axis: roll in the box frame (local x along u)
                b.objects.append(
                    {
                        "type": "box",
                        "name": b._name("awning"),
                        "class": BUILDING,
                        "center": [r3(x), r3(y), r3(zc)],
                        "size": [r3(bw - 0.3), r3(d), 0.06],
                        "rpy": [r4(slope), 0.0, r4(f.yaw)],
                        "color": [r3(v) for v in col],
                        "reflectivity": 0.5,
                    }
                )
        else:
            b.fbox(f, "bldg_sill", BUILDING, m - bw * 0.25, m + bw * 0.25, -sb, -sb + 0.2,
                   z0 + 0.85, z0 + 0.95, trim)  # fmt: skip
    if not shops:  # a canopy over the door
        m = s0 + bw * (int(rng.integers(0, bays)) + 0.5)
        b.fbox(f, "door_canopy", BUILDING, m - 0.8, m + 0.8, -sb, -sb + 0.9, z0 + 2.5,
               z0 + 2.62, trim)  # fmt: skip
    if rng.random() < 0.6:
        x, y = f.xy(s0 + 0.25, -sb + 0.1)
        b.cylinder("drainpipe", BUILDING, (x, y, (z0 + top) / 2), 0.06, top - z0, (0.35,) * 3)
    lintels = rng.random() < 0.5
    pil = rng.random() < 0.5
    if pil:
        pw, pd = float(rng.uniform(0.35, 0.6)), float(rng.uniform(0.12, 0.25))
        for k in range(bays + 1):
            sc = min(max(s0 + k * bw, s0 + pw / 2), s1 - pw / 2)
            b.fbox(f, "bldg_pilaster", BUILDING, sc - pw / 2, sc + pw / 2, -sb, -sb + pd,
                   z0 + ph, top, trim)  # fmt: skip
    course_d = float(rng.uniform(0.15, 0.4))
    balcony = rng.random() < 0.35
    for fl in range(1, floors):
        zf = z0 + gh + (fl - 1) * fh
        if fl == 1 or rng.random() < 0.6:
            b.fbox(f, "bldg_course", BUILDING, s0, s1, -sb, -sb + course_d, zf - 0.25, zf,
                   trim)  # fmt: skip
        for k in range(bays):
            m = s0 + (k + 0.5) * bw
            if balcony and k % 2 == 1:
                bwid = bw * 0.7
                b.fbox(f, "balcony", BUILDING, m - bwid / 2, m + bwid / 2, -sb, -sb + 1.2,
                       zf, zf + 0.15, trim)  # fmt: skip
                b.fbox(f, "balcony_rail", BUILDING, m - bwid / 2, m + bwid / 2, -sb + 1.14,
                       -sb + 1.2, zf + 0.15, zf + 1.05, (0.3, 0.3, 0.32))  # fmt: skip
            else:
                b.fbox(f, "bldg_sill", BUILDING, m - bw * 0.25, m + bw * 0.25, -sb,
                       -sb + rng.uniform(0.12, 0.25), zf + 0.8, zf + 0.9, trim)  # fmt: skip
                if lintels:
                    b.fbox(f, "bldg_lintel", BUILDING, m - bw * 0.28, m + bw * 0.28, -sb,
                           -sb + 0.1, zf + 2.3, zf + 2.5, trim)  # fmt: skip
    cd = float(rng.uniform(0.3, 0.7))
    b.fbox(f, "bldg_cornice", BUILDING, s0, s1, -sb, -sb + cd, top - 0.5, top + 0.1, trim)


KINDS = ["lamp", "tree", "tree", "bin", "bollards", "bench", "wall", "sign", "bikes", "hydrant"]


def furniture(b: Builder, f: Frontage, s0: float, s1: float, z_at, rng) -> None:
    """Sidewalk furniture between s0 and s1 on frontage f: lamps, trees, bins, bollards,
    benches, low walls, bicycles. z_at(x, y): the sidewalk top there. The band 1.4-2.4 m from
    the building line stays clear: pedestrians walk there (make_urban.WALK_M)."""
    kerb = SIDEWALK_M
    s = s0 + float(rng.uniform(2, 10))
    while s < s1 - 2:
        kind = rng.choice(KINDS)
        x, y = f.xy(s, kerb - 0.5)
        z = z_at(x, y)
        if kind == "lamp":
            h = float(rng.uniform(5.5, 8.0))
            b.cylinder("lamp_pole", "static.pole", (x, y, z + h / 2), 0.09, h, (0.3, 0.3, 0.3))
            ax, ay = f.xy(s, kerb + 0.5)
            b.box("lamp_arm", "static.pole", (ax, ay, z + h - 0.1), (0.15, 2.0, 0.12), f.yaw,
                  (0.3, 0.3, 0.3))  # fmt: skip
        elif kind == "tree":
            x, y = f.xy(s, kerb - 0.8)
            z = z_at(x, y)
            th = float(rng.uniform(2.2, 3.5))
            cr = float(rng.uniform(1.0, 1.8))
            ch = float(rng.uniform(2.0, 3.5))
            trunk_r = rng.uniform(0.14, 0.25)
            b.cylinder("tree_trunk", "static.vegetation", (x, y, z + th / 2), trunk_r, th,
                       (0.4, 0.3, 0.2))  # fmt: skip
            b.cylinder("tree_crown", "static.vegetation", (x, y, z + th + ch / 2), cr, ch,
                       (0.25, 0.5, 0.2), 0.3)  # fmt: skip
        elif kind == "bin":
            h = float(rng.uniform(0.7, 1.3))
            x, y = f.xy(s, rng.uniform(kerb - 0.65, kerb - 0.4))
            b.cylinder("bin", "static.other", (x, y, z_at(x, y) + h / 2), rng.uniform(0.25, 0.4),
                       h, (0.2, 0.35, 0.25))  # fmt: skip
        elif kind == "bollards":
            for k in range(int(rng.integers(3, 7))):
                x, y = f.xy(s + 1.4 * k, kerb - 0.3)
                b.cylinder("bollard", "static.barrier", (x, y, z_at(x, y) + 0.45), 0.1, 0.9,
                           (0.25, 0.25, 0.25))  # fmt: skip
            s += 1.4 * k
        elif kind == "bench":
            x, y = f.xy(s, 1.0)
            zz = z_at(x, y)
            b.box("bench_seat", "static.other", (x, y, zz + 0.45), (1.8, 0.5, 0.08), f.yaw,
                  (0.5, 0.35, 0.2))  # fmt: skip
            x, y = f.xy(s, 0.8)
            b.box("bench_back", "static.other", (x, y, zz + 0.7), (1.8, 0.08, 0.45), f.yaw,
                  (0.5, 0.35, 0.2))  # fmt: skip
        elif kind == "wall":
            length = float(rng.uniform(2.0, 6.0))
            h = float(rng.uniform(0.4, 1.1))
            e = float(rng.uniform(0.3, 1.2))
            x, y = f.xy(s + length / 2, e)
            zz = z_at(x, y)
            b.fbox(f, "low_wall", "static.barrier", s, s + length, e - 0.2, e + 0.2, zz - 0.1,
                   zz + h, (0.55, 0.5, 0.45))  # fmt: skip
            s += length
        elif kind == "bikes":  # bicycles parked along the building line
            for k in range(int(rng.integers(2, 6))):
                x, y = f.xy(s + 1.9 * k, 0.5)
                b.box("bicycle", "vehicle.bicycle", (x, y, z_at(x, y) + 0.55), (1.7, 0.06, 0.7),
                      f.yaw, (0.2, 0.2, 0.6))  # fmt: skip
            s += 1.9 * k
        elif kind == "hydrant":
            b.cylinder("hydrant", "static.other", (x, y, z + 0.35), 0.12, 0.7, (0.8, 0.1, 0.1))
        else:
            b.cylinder("sign_pole", "static.pole", (x, y, z + 1.3), 0.04, 2.6, (0.5, 0.5, 0.5))
            b.box("sign", "static.other", (x, y, z + 2.4), (0.6, 0.04, 0.6), f.yaw,
                  (0.9, 0.9, 0.9), refl=0.9)  # fmt: skip
        s += float(rng.uniform(3, 11))


def parked_cars(b: Builder, f: Frontage, s0: float, s1: float, ground, rng) -> None:
    """Cars, vans and small trucks along the kerb in front of frontage f (their centres 1.1 m
    into the road), with gaps; ground(x, y): the road's height."""
    s = s0 + float(rng.uniform(0, 4))
    while True:
        kind = rng.choice(["car", "car", "car", "van", "truck"])
        length = {"car": rng.uniform(3.8, 5.0), "van": rng.uniform(4.8, 5.6),
                  "truck": rng.uniform(6.0, 7.5)}[kind]  # fmt: skip
        if s + length > s1:
            break
        if rng.random() < 0.8:
            width = float(rng.uniform(1.7, 1.9)) if kind == "car" else float(rng.uniform(1.9, 2.2))
            e = SIDEWALK_M + 0.25 + width / 2
            x, y = f.xy(s + length / 2, e)
            z = float(ground(x, y))
            yaw = f.yaw + float(rng.uniform(-0.03, 0.03))
            col = tuple(rng.uniform(0.1, 0.9, 3))
            if kind == "car":
                bh = float(rng.uniform(0.7, 0.95))
                b.box("car_body", "vehicle.car", (x, y, z + 0.3 + bh / 2), (length, width, bh),
                      yaw, col, refl=0.7)  # fmt: skip
                ch = float(rng.uniform(0.45, 0.7))
                off = float(rng.uniform(-0.4, 0.1)) * length / 4
                cx, cy = x + off * math.cos(yaw), y + off * math.sin(yaw)
                b.box("car_cabin", "vehicle.car", (cx, cy, z + 0.3 + bh + ch / 2),
                      (length * 0.55, width * 0.9, ch), yaw, col, refl=0.7)  # fmt: skip
            else:
                h = float(rng.uniform(1.9, 2.5)) if kind == "van" else float(rng.uniform(2.6, 3.3))
                cls = "vehicle.car" if kind == "van" else "vehicle.truck"
                b.box(kind, cls, (x, y, z + 0.3 + h / 2), (length, width, h), yaw, col, refl=0.7)
        s += length + float(rng.uniform(0.8, 5.0))
