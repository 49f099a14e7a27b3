"""Ground-truth 3D boxes of a world's bounded objects, and the dataset category of each.

A box, a cylinder and a sphere each have an exact oriented bounding box (a cylinder's axis is
its local z); simconform/actors.py makes them. Planes are unbounded and static meshes have no
box of their own in the world file, so neither is annotated. Moving actors (world.actors) get
their box where they are at each instant, a mesh actor the box of its triangles.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.spatial.transform import Rotation

from simconform.actors import ActorSet, shape_box
from simconform.world import Box, Cylinder, Sphere, World

# A world object's `class` -> nuScenes category (the 23 detection categories of nuScenes v1.0).
# A class that already is a nuScenes category name is kept; any other becomes
# static_object.<class>, and an object without one static_object.unlabeled.
NUSCENES_CATEGORY = {
    "car": "vehicle.car",
    "truck": "vehicle.truck",
    "bus": "vehicle.bus.rigid",
    "trailer": "vehicle.trailer",
    "construction_vehicle": "vehicle.construction",
    "bicycle": "vehicle.bicycle",
    "motorcycle": "vehicle.motorcycle",
    "pedestrian": "human.pedestrian.adult",
    "child": "human.pedestrian.child",
    "traffic_cone": "movable_object.trafficcone",
    "barrier": "movable_object.barrier",
    "debris": "movable_object.debris",
    "bicycle_rack": "static_object.bicycle_rack",
    "animal": "animal",
}
NUSCENES_CATEGORIES = {
    *NUSCENES_CATEGORY.values(), "human.pedestrian.wheelchair", "human.pedestrian.stroller",
    "human.pedestrian.personal_mobility", "human.pedestrian.police_officer",
    "human.pedestrian.construction_worker", "vehicle.bus.bendy", "vehicle.emergency.ambulance",
    "vehicle.emergency.police", "movable_object.pushable_pullable",
}  # fmt: skip
# nuScenes attributes of an object that stands still
PARKED = {"vehicle": "vehicle.parked", "human": "pedestrian.standing"}
CYCLES = ("vehicle.bicycle", "vehicle.motorcycle")


def category(class_name: str | None) -> str:
    if class_name is None:
        return "static_object.unlabeled"
    if class_name in NUSCENES_CATEGORIES:
        return class_name
    return NUSCENES_CATEGORY.get(class_name.lower(), f"static_object.{class_name}")


MOVING = {"vehicle": "vehicle.moving", "human": "pedestrian.moving"}


def attribute(cat: str, moving: bool = False) -> str | None:
    """The nuScenes attribute of an object of this category: still objects are parked (or
    standing), actors are moving (a moving cycle has a rider)."""
    if cat in CYCLES:
        return "cycle.with_rider" if moving else "cycle.without_rider"
    return (MOVING if moving else PARKED).get(cat.split(".")[0])


@dataclass(frozen=True)
class ObjectBox:
    key: str  # stable per object across instants: the instance
    category: str
    center: np.ndarray  # (3,) map frame
    size_lwh: np.ndarray  # (3,) along the box's own x, y, z
    rot: Rotation  # box frame -> map frame
    moving: bool = False  # an actor

    def wlh(self) -> list[float]:
        """nuScenes' size order: width (y), length (x), height (z)."""
        return [float(self.size_lwh[1]), float(self.size_lwh[0]), float(self.size_lwh[2])]

    def contains(self, points_map: np.ndarray) -> np.ndarray:
        """Which points (map frame) lie inside the box (faces included)."""
        local = self.rot.inv().apply(points_map - self.center)
        return np.all(np.abs(local) <= self.size_lwh / 2, axis=1)


class ObjectSource:
    """The boxes of the world's bounded objects and actors at any instant; the actors'
    waypoint times count from `start_ns`, the run's first instant."""

    def __init__(self, world: World, start_ns: int) -> None:
        self.boxes: list[ObjectBox] = []
        for i, o in enumerate(world.objects):
            if isinstance(o, Box | Cylinder | Sphere):
                b = shape_box(o)
                key = o.name or f"object_{i}"
                self.boxes.append(ObjectBox(key, category(o.class_), b.center, b.size, b.rot))
        self.radius = np.array([np.linalg.norm(b.size_lwh) / 2 for b in self.boxes])
        self.centers = np.array([b.center for b in self.boxes]).reshape(-1, 3)
        self.actors = ActorSet(world, start_ns)
        self.actor_keys = [(a.name, category(a.class_)) for a in world.actors]

    def at(self, t_ns: int, near: np.ndarray, within_m: float) -> list[ObjectBox]:
        """The boxes at t_ns whose extent comes within `within_m` of `near` (map frame)."""
        d = np.linalg.norm(self.centers - near, axis=1) - self.radius
        out = [b for b, di in zip(self.boxes, d) if di <= within_m]
        for (key, cat), b in zip(self.actor_keys, self.actors.boxes(t_ns)):
            if np.linalg.norm(b.center - near) - np.linalg.norm(b.size) / 2 <= within_m:
                out.append(ObjectBox(key, cat, b.center, b.size, b.rot, moving=True))
        return out
