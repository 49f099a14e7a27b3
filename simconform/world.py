"""World files (worlds/*.yaml): analytic primitives and triangle meshes, in the map frame (ENU).

The map frame's origin is anchored to WGS84 by `origin`, which GNSS truth and the Gazebo
`<spherical_coordinates>` both use.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
from pydantic import ConfigDict, Field, PrivateAttr, field_validator

from simconform.errors import UserError, load_yaml, validate
from simconform.fields import Angle, ClassName, Coord, Direction, Name, Rpy, Strict, Vec3

Color = tuple[
    Annotated[float, Field(ge=0, le=1)],
    Annotated[float, Field(ge=0, le=1)],
    Annotated[float, Field(ge=0, le=1)],
]
Positive = Annotated[float, Field(gt=0, le=1e5)]


class Origin(Strict):
    lat: float = Field(ge=-90, le=90, description="WGS84 latitude of the map origin, deg")
    lon: float = Field(ge=-180, le=180, description="WGS84 longitude of the map origin, deg")
    alt: float = Field(ge=-1000, le=10000, description="height above the WGS84 ellipsoid, m")


class Light(Strict):
    direction: Direction = (-0.4, -0.3, -1.0)
    ambient: float = Field(0.3, ge=0, le=1)
    diffuse: float = Field(0.7, ge=0, le=1)


class _Primitive(Strict):
    # `class` is a Python keyword: the field is class_, written and read as `class`
    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True)

    name: Name | None = None
    class_: ClassName | None = Field(None, alias="class", description="object class, optional")
    color: Color = (0.6, 0.6, 0.6)
    reflectivity: float = Field(0.5, ge=0, le=1, description="lidar intensity scale")


class Plane(_Primitive):
    """Infinite plane through `point` with unit normal `normal` (normalised on load)."""

    type: Literal["plane"]
    point: Vec3 = (0.0, 0.0, 0.0)
    normal: Vec3 = (0.0, 0.0, 1.0)

    @field_validator("normal")
    @classmethod
    def _nonzero(cls, v: Vec3) -> Vec3:
        n = np.linalg.norm(v)
        if not n > 1e-9:
            raise ValueError("normal must be a non-zero vector")
        return tuple(float(x / n) for x in v)


class Box(_Primitive):
    type: Literal["box"]
    center: Vec3
    size: tuple[Positive, Positive, Positive]
    rpy: Rpy = (0.0, 0.0, 0.0)


class Cylinder(_Primitive):
    """Capped cylinder; its axis is the local z axis, rotated by rpy."""

    type: Literal["cylinder"]
    center: Vec3
    radius: Positive
    length: Positive
    rpy: Rpy = (0.0, 0.0, 0.0)


class Sphere(_Primitive):
    type: Literal["sphere"]
    center: Vec3
    radius: Positive


class Mesh(_Primitive):
    """Triangle mesh (OBJ, STL, PLY through trimesh), path relative to the world file."""

    type: Literal["mesh"]
    file: str
    position: Vec3 = (0.0, 0.0, 0.0)
    rpy: Rpy = (0.0, 0.0, 0.0)
    scale: Positive = 1.0


Primitive = Annotated[Plane | Box | Cylinder | Sphere | Mesh, Field(discriminator="type")]
Shape = Annotated[Box | Cylinder | Sphere | Mesh, Field(discriminator="type")]
# one waypoint of an actor's path: t (s from the run's start), x, y, z (m, map), yaw (rad)
Waypoint = tuple[Annotated[float, Field(ge=0, le=1e6)], Coord, Coord, Coord, Angle]


class Actor(Strict):
    """A rigid object moving along its own path: `shape` is given in the actor's frame, whose
    pose at time t is the waypoints' linear interpolation (yaw the shorter way round), held at
    the last waypoint afterwards, or repeated with `loop`."""

    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True)

    name: Name
    class_: ClassName | None = Field(None, alias="class", description="object class, optional")
    shape: Shape
    path: list[Waypoint] = Field(min_length=2, max_length=100000)
    loop: bool = False

    @field_validator("path")
    @classmethod
    def _increasing(cls, v: list) -> list:
        t = [w[0] for w in v]
        if any(b <= a for a, b in itertools.pairwise(t)):
            raise ValueError("expected waypoint times (the first value) strictly increasing")
        return v


class World(Strict):
    name: Name
    origin: Origin
    sky_color: Color = (0.55, 0.7, 0.9)
    light: Light = Light()
    objects: list[Primitive] = Field(min_length=1)
    actors: list[Actor] = Field(default_factory=list, max_length=1000)

    _source: Path | None = PrivateAttr(default=None)
    _meshes: dict[int, np.ndarray] = PrivateAttr(default_factory=dict)

    @property
    def source(self) -> Path | None:
        return self._source

    def mesh_triangles(self, index: int) -> np.ndarray:
        """Triangles (M, 3, 3) of object `index` in the map frame, loaded once; an index past
        the objects is an actor's mesh, in the actor's frame."""
        return self._meshes[index]

    @field_validator("actors")
    @classmethod
    def _unique_actor_names(cls, v: list[Actor]) -> list[Actor]:
        names = [a.name for a in v]
        dup = next((n for n in names if names.count(n) > 1), None)
        if dup is not None:
            raise ValueError(f"expected unique actor names ({dup!r} repeats)")
        return v


def load_world(path: str | Path) -> World:
    path = Path(path)
    world: World = validate(World, load_yaml(path), path)
    world._source = path.resolve()
    for i, obj in enumerate(world.objects):
        if isinstance(obj, Mesh):
            world._meshes[i] = _load_mesh(path, f"objects.{i}.file", obj)
    for a, actor in enumerate(world.actors):
        if isinstance(actor.shape, Mesh):
            field = f"actors.{a}.shape.file"
            world._meshes[len(world.objects) + a] = _load_mesh(path, field, actor.shape)
    return world


def _load_mesh(world_path: Path, field: str, obj: Mesh) -> np.ndarray:
    import trimesh
    from scipy.spatial.transform import Rotation

    mesh_path = (world_path.parent / obj.file).resolve()
    if not mesh_path.is_file():
        raise UserError(world_path, field, obj.file, "expected a mesh file relative to the world")
    try:  # unprocessed first: trimesh's processing silently drops faces on NaN/inf vertices
        mesh = trimesh.load(mesh_path, force="mesh", process=False)
        raw = np.asarray(mesh.vertices, dtype=float)[np.asarray(mesh.faces, dtype=np.int64)]
    except Exception as exc:  # trimesh raises many types for unreadable files
        raise UserError(world_path, field, obj.file, f"expected a readable mesh ({exc})") from None
    if not np.all(np.isfinite(raw)):
        bad = int(np.flatnonzero(~np.isfinite(raw).all(axis=(1, 2)))[0])
        raise UserError(
            world_path, field, obj.file, f"expected finite vertex coordinates (face {bad} has not)"
        )
    mesh.process()  # merged vertices, as trimesh.load(process=True) gives
    if len(mesh.faces) == 0:
        raise UserError(world_path, field, obj.file, "expected a mesh with at least one triangle")
    tri = np.asarray(mesh.triangles, dtype=float) * obj.scale
    if not np.all(np.isfinite(tri)):
        raise UserError(world_path, field, obj.file, "expected finite vertex coordinates")
    area = np.linalg.norm(np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0]), axis=1)
    if not np.any(area > 0):
        raise UserError(
            world_path, field, obj.file, "expected a mesh with a triangle of non-zero area"
        )
    rot = Rotation.from_euler("xyz", obj.rpy)
    return rot.apply(tri.reshape(-1, 3)).reshape(-1, 3, 3) + np.asarray(obj.position)
