"""Moving actors: where each one is at any instant, its ground-truth box, and exact rays on it.

An actor is one rigid shape given in its own frame, moved along its waypoints (world.py). A ray
is intersected with an actor by carrying the ray into the actor's frame at the ray's own time
(a lidar column's, a replayed point's, a camera row's) and casting it against the shape there
with the same exact caster as the static world. A rigid transform keeps distances, so the
range stays float64-exact however fast the actor moves during a sweep.

Actors are indexed after the world's objects: hit index len(world.objects) + a is actor a.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.spatial.transform import Rotation

from simconform.raycast import Hits, Scene
from simconform.world import Actor, Box, Cylinder, Mesh, Sphere, World

# a return this close to an actor's box counts for the actor where the engine names no object
# (Gazebo's gpu_lidar): the range tolerance compare allows, twice
LABEL_MARGIN_M = 0.02


@dataclass(frozen=True)
class ShapeBox:
    """An oriented box around a shape: centre and rotation (box frame -> parent), and size
    along the box's own x, y, z."""

    center: np.ndarray  # (3,)
    size: np.ndarray  # (3,)
    rot: Rotation


def shape_box(shape: Box | Cylinder | Sphere | Mesh, triangles: np.ndarray | None = None):
    """The tight oriented box of a bounded shape in its parent frame (a mesh: the axis-aligned
    box of its `triangles`, which are already in the parent frame)."""
    if isinstance(shape, Box):
        return ShapeBox(np.array(shape.center), np.array(shape.size), _euler(shape.rpy))
    if isinstance(shape, Cylinder):
        d = 2 * shape.radius
        return ShapeBox(np.array(shape.center), np.array([d, d, shape.length]), _euler(shape.rpy))
    if isinstance(shape, Sphere):
        return ShapeBox(np.array(shape.center), np.full(3, 2 * shape.radius), Rotation.identity())
    if triangles is None:
        raise ValueError("a mesh's box needs its triangles")
    pts = triangles.reshape(-1, 3)
    lo, hi = pts.min(axis=0), pts.max(axis=0)
    return ShapeBox((lo + hi) / 2, hi - lo, Rotation.identity())


def _euler(rpy) -> Rotation:
    return Rotation.from_euler("xyz", rpy)


class ActorSet:
    """The world's actors prepared for poses, boxes and casting; times are absolute ns, with the
    waypoints' t counted from `start_ns` (the run's first instant)."""

    def __init__(self, world: World, start_ns: int) -> None:
        self.world = world
        self.start_ns = int(start_ns)
        self.first = len(world.objects)
        self.actors: list[Actor] = list(world.actors)
        self._paths = [np.asarray(a.path, dtype=float) for a in self.actors]
        for p in self._paths:
            p[:, 4] = np.unwrap(p[:, 4])  # yaw interpolates the shorter way round
        self._scenes: list[Scene] = []
        self._local: list[ShapeBox] = []
        for a, actor in enumerate(self.actors):
            own = World(name=actor.name, origin=world.origin, objects=[actor.shape])
            tri = None
            if isinstance(actor.shape, Mesh):
                tri = world.mesh_triangles(self.first + a)
                own._meshes[0] = tri
            self._scenes.append(Scene(own))
            self._local.append(shape_box(actor.shape, tri))

    def __len__(self) -> int:
        return len(self.actors)

    def pose(self, a: int, t_ns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Actor a's frame at each time: positions (N, 3) and yaws (N,) in the map frame."""
        p = self._paths[a]
        t = (np.asarray(t_ns, dtype=np.int64).ravel() - self.start_ns) * 1e-9
        if self.actors[a].loop:
            t0, t1 = p[0, 0], p[-1, 0]
            t = np.where(t > t1, t0 + np.mod(t - t0, t1 - t0), t)
        xyz = np.stack([np.interp(t, p[:, 0], p[:, k]) for k in (1, 2, 3)], axis=1)
        return xyz, np.interp(t, p[:, 0], p[:, 4])

    def boxes(self, t_ns: int) -> list[ShapeBox]:
        """Every actor's box in the map frame at t_ns, in actor order."""
        out = []
        for a, local in enumerate(self._local):
            xyz, yaw = self.pose(a, np.array([t_ns]))
            turn = Rotation.from_euler("z", yaw[0])
            out.append(ShapeBox(turn.apply(local.center) + xyz[0], local.size, turn * local.rot))
        return out

    def label(self, t_ns: int, points_map: np.ndarray, margin_m: float) -> np.ndarray:
        """(N,) int32: for each point (map frame, NaN rows for no return) the index of the actor
        whose box at t_ns, grown by margin_m, holds it (len(world.objects) + a), else -1: how a
        return is attributed when the engine names no object (Gazebo's gpu_lidar)."""
        labels = np.full(len(points_map), -1, dtype=np.int32)
        ok = np.all(np.isfinite(points_map), axis=1)
        for a, box in enumerate(self.boxes(t_ns)):
            local = box.rot.inv().apply(np.nan_to_num(points_map) - box.center)
            inside = ok & np.all(np.abs(local) <= box.size / 2 + margin_m, axis=1)
            labels[inside] = self.first + a
        return labels

    def cast(
        self,
        origins: np.ndarray,
        directions: np.ndarray,
        times_ns: np.ndarray,
        t_min: float,
        t_max: float,
        hits: Hits,
    ) -> None:
        """Bring the actors into `hits` (the static world's, one per ray), in place.

        origins (N, 3) or (3,), directions (N, 3), times_ns (N,) absolute: each ray meets each
        actor where the actor is at that ray's time. A nearer actor surface replaces the hit.
        """
        if not self.actors:
            return
        d = np.asarray(directions, dtype=float).reshape(-1, 3)
        o = np.broadcast_to(np.asarray(origins, dtype=float), d.shape)
        times = np.broadcast_to(np.asarray(times_ns, dtype=np.int64), (len(d),))
        # one pose per distinct time (a sweep's columns, a camera's rows), not per ray
        uniq, inverse = np.unique(times, return_inverse=True)
        for a, scene in enumerate(self._scenes):
            xyz, yaw = self.pose(a, uniq)
            c, s = np.cos(yaw)[inverse], np.sin(yaw)[inverse]
            rel = o - xyz[inverse]
            # the ray in the actor's frame
            ol = np.stack(
                [c * rel[:, 0] + s * rel[:, 1], c * rel[:, 1] - s * rel[:, 0], rel[:, 2]], 1
            )
            dl = np.stack([c * d[:, 0] + s * d[:, 1], c * d[:, 1] - s * d[:, 0], d[:, 2]], 1)
            h = scene.cast(ol, dl, t_min, t_max)
            near = np.flatnonzero(h.dist < hits.dist)
            if not len(near):
                continue
            n = h.normal[near]
            cn, sn = c[near], s[near]
            hits.dist[near] = h.dist[near]
            hits.index[near] = self.first + a
            hits.normal[near] = np.stack(
                [cn * n[:, 0] - sn * n[:, 1], sn * n[:, 0] + cn * n[:, 1], n[:, 2]], axis=1
            )


def _turn_back(v: np.ndarray, c: np.ndarray, s: np.ndarray) -> np.ndarray:
    """R_z(yaw)^T v per row, with c, s the cos and sin of each row's yaw."""
    return np.stack([c * v[:, 0] + s * v[:, 1], c * v[:, 1] - s * v[:, 0], v[:, 2]], axis=1)


class MovingScene:
    """The static world's exact caster with the actors added at each ray's time: what every
    exact-geometry consumer (reference backend, compare's object labels) casts against."""

    def __init__(self, world: World, start_ns: int, scene: Scene | None = None) -> None:
        self.scene = Scene(world) if scene is None else scene
        self.actors = ActorSet(world, start_ns)
        self.names = [o.name or f"object_{i}" for i, o in enumerate(world.objects)] + [
            a.name for a in world.actors
        ]

    def cast(
        self,
        origins: np.ndarray,
        directions: np.ndarray,
        t_min: float = 0.0,
        t_max: float = np.inf,
        times_ns: np.ndarray | int | None = None,
        width: int | None = None,
    ) -> Hits:
        """Scene.cast, plus the actors where they are at `times_ns` (one per ray, or one for
        all); without times the actors are left out (the world's static part). `width` as
        in Scene.cast."""
        hits = self.scene.cast(origins, directions, t_min, t_max, width)
        if len(self.actors) and times_ns is not None:
            self.actors.cast(origins, directions, times_ns, t_min, t_max, hits)
        return hits


def refuse_actors(world: World, backend: str) -> None:
    """One clear refusal for a backend that cannot move actors yet (exit 2, nothing run)."""
    from simconform.errors import UserError

    if world.actors:
        raise UserError(
            world.source,
            "actors",
            f"{len(world.actors)} actors",
            f"a world without moving actors for --backend {backend}, which does not move them "
            "yet (the reference backend does)",
        )
