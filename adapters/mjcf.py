"""World to MuJoCo MJCF: every world object becomes one static geom in the worldbody.

The MuJoCo backend ray casts against this model with `mj_ray` / `mj_multiRay`, so geometry and
placement must match `simconform.world` exactly:

- plane: `type="plane"` with size "0 0 1" (infinite), its local +z turned onto the normal;
- box / cylinder: MuJoCo sizes are half sizes (cylinder: "radius half_length");
- mesh: an inline `<mesh>` asset from `World.mesh_triangles`, already in the map frame, so its
  geom sits at the identity pose;
- actor: a mocap body per actor, moved by the backend, with the actor's shape as its geom.

Known differences from the exact reference geometry (`simconform.raycast`):

- MuJoCo planes are one-sided: a ray from below the plane (against its normal) misses it.
- MuJoCo stores mesh vertices as float32, so mesh hits differ by ~1e-7 of the mesh size,
  amplified at grazing incidence (a few micrometres at 0.02 cosine on the demo rock).
- MuJoCo needs a convex hull (collisions) for every colliding mesh and at least 4 vertices: flat
  meshes are therefore written with collisions off (contype/conaffinity 0, still ray cast), and
  a mesh of fewer than 4 vertices gets its unused centroid added.
- `mj_ray` intersects a mesh's actual triangles (not the convex hull used for collisions), so
  concave meshes ray cast correctly.

MuJoCo quaternions are w x y z; scipy's are x y z w.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING
from xml.sax.saxutils import quoteattr

import numpy as np
from scipy.spatial.transform import Rotation

from simconform.world import Box, Cylinder, Mesh, Plane, Sphere, World

if TYPE_CHECKING:
    import mujoco

# Custom text element listing the world geoms' names in world order, so that a compiled model
# maps its geoms back to world objects without the World at hand.
OBJECTS_TEXT = "simconform_objects"


def _num(x: float) -> str:
    """Shortest text that reads back as the same float64 (MJCF parses doubles)."""
    return repr(float(x))


def vec3s(v) -> str:
    return " ".join(_num(x) for x in np.ravel(v))


def quat_wxyz(rot: Rotation) -> str:
    x, y, z, w = rot.as_quat()
    return vec3s((w, x, y, z))


def _plane_rotation(normal) -> Rotation:
    """Rotation taking local +z onto `normal` (MuJoCo planes face +z)."""
    n = np.asarray(normal, dtype=float)
    n = n / np.linalg.norm(n)
    axis = np.cross([0.0, 0.0, 1.0], n)
    s = np.linalg.norm(axis)
    if s < 1e-12:
        return Rotation.identity() if n[2] > 0 else Rotation.from_euler("x", np.pi)
    return Rotation.from_rotvec(axis / s * np.arctan2(s, n[2]))


def geom_names(world: World) -> list[str]:
    """One unique, space-free geom name per world object: its name, else f"obj{i}"."""
    names: list[str] = []
    taken: set[str] = set()
    for i, obj in enumerate(world.objects):
        name = re.sub(r"\s+", "_", obj.name) if obj.name else f"obj{i}"
        if name in taken:
            name = f"{name}_obj{i}"
        taken.add(name)
        names.append(name)
    return names


def actor_body(a: int) -> str:
    """The mocap body that carries actor a."""
    return f"simconform_actor{a}"


def world_to_mjcf(world: World, extra_bodies: str = "") -> str:
    """MJCF XML for `world`; `extra_bodies` (XML) is appended inside the worldbody.

    Each actor becomes a mocap body (`actor_body`) holding its shape as one geom; the backend
    moves it to the actor's pose before each ray batch and frame."""
    names = geom_names(world)
    assets: list[str] = []
    geoms: list[str] = []
    for i, (obj, name) in enumerate(zip(world.objects, names, strict=True)):
        tri = world.mesh_triangles(i) if isinstance(obj, Mesh) else None
        geoms.append(_geom(obj, name, tri, assets))
    first = len(world.objects)
    for a, actor in enumerate(world.actors):
        name = f"actor{a}_{re.sub(r'[^A-Za-z0-9_]', '_', actor.name)}"
        names.append(name)
        tri = world.mesh_triangles(first + a) if isinstance(actor.shape, Mesh) else None
        geom = _geom(actor.shape, name, tri, assets)
        if "contype" not in geom:  # an actor is only seen, never collided with
            geom = geom.replace("<geom ", '<geom contype="0" conaffinity="0" ', 1)
        geoms.append(f'<body name="{actor_body(a)}" mocap="true">{geom}</body>')
    asset = "  <asset>\n" + "".join(f"    {a}\n" for a in assets) + "  </asset>\n"
    body = "\n".join(f"    {g}" for g in geoms)
    return (
        f"<mujoco model={quoteattr(world.name)}>\n"
        '  <compiler angle="radian"/>\n'
        f'  <custom>\n    <text name="{OBJECTS_TEXT}" data={quoteattr(" ".join(names))}/>\n'
        "  </custom>\n"
        f"{asset if assets else ''}"
        f"  <worldbody>\n{body}\n{extra_bodies}\n  </worldbody>\n"
        "</mujoco>\n"
    )


def _geom(obj, name: str, tri: np.ndarray | None, assets: list[str]) -> str:
    """One geom for a world object (or an actor's shape, in its body's frame); a mesh also
    adds its asset to `assets`."""
    rgba = vec3s((*obj.color, 1.0))  # alpha 0 would hide the geom from mj_ray
    common = f"name={quoteattr(name)} rgba={quoteattr(rgba)}"
    if isinstance(obj, Plane):
        quat = quat_wxyz(_plane_rotation(obj.normal))
        return f'<geom {common} type="plane" size="0 0 1" pos="{vec3s(obj.point)}" quat="{quat}"/>'
    if isinstance(obj, Box):
        quat = quat_wxyz(Rotation.from_euler("xyz", obj.rpy))
        half = vec3s(np.asarray(obj.size) / 2)
        return f'<geom {common} type="box" size="{half}" pos="{vec3s(obj.center)}" quat="{quat}"/>'
    if isinstance(obj, Cylinder):
        quat = quat_wxyz(Rotation.from_euler("xyz", obj.rpy))
        size = vec3s((obj.radius, obj.length / 2))
        return (
            f'<geom {common} type="cylinder" size="{size}" pos="{vec3s(obj.center)}" '
            f'quat="{quat}"/>'
        )
    if isinstance(obj, Sphere):
        size, pos = _num(obj.radius), vec3s(obj.center)
        return f'<geom {common} type="sphere" size="{size}" pos="{pos}"/>'
    if isinstance(obj, Mesh) and tri is not None:
        vert, face = _indexed(tri)
        flat = _is_flat(vert)
        if len(vert) < 4:  # MuJoCo wants 4 vertices; an unused centroid changes no face
            vert = np.vstack([vert, vert.mean(axis=0)])
        mesh = f"mesh_{name}"
        # "shell" inertia accepts open and flat meshes, which the reference also casts.
        assets.append(
            f'<mesh name={quoteattr(mesh)} inertia="shell" '
            f'vertex="{vec3s(vert)}" face="{" ".join(map(str, face.ravel()))}"/>'
        )
        # A flat mesh has no convex hull, which MuJoCo needs only for collisions: keep it
        # out of them, so that it compiles and is still seen by mj_ray.
        nocollide = ' contype="0" conaffinity="0"' if flat else ""
        return f'<geom {common} type="mesh" mesh={quoteattr(mesh)}{nocollide}/>'
    raise TypeError(f"unsupported world object {type(obj).__name__}")  # pragma: no cover


def _indexed(tri: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Shared vertices (V, 3) and faces (M, 3) of a triangle soup (M, 3, 3)."""
    vert, inverse = np.unique(tri.reshape(-1, 3), axis=0, return_inverse=True)
    return vert, inverse.reshape(-1, 3)


def _is_flat(vert: np.ndarray) -> bool:
    """True when the vertices span no volume (all coplanar), so no convex hull exists."""
    if len(vert) < 4:
        return True
    sv = np.linalg.svd(vert - vert.mean(axis=0), compute_uv=False)
    return bool(sv[2] <= 1e-9 * max(sv[0], 1e-300))


def geom_object_index(model: mujoco.MjModel) -> np.ndarray:
    """World object index per MuJoCo geom id (-1 for geoms not from the world).

    Read from the custom text that `world_to_mjcf` writes, matched by geom name.
    """
    import mujoco

    out = np.full(model.ngeom, -1, dtype=np.int64)
    tid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_TEXT, OBJECTS_TEXT)
    if tid < 0:
        return out
    adr, size = int(model.text_adr[tid]), int(model.text_size[tid])
    data = bytes(model.text_data[adr : adr + size]).rstrip(b"\0").decode()
    for i, name in enumerate(data.split()):
        gid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, name)
        if gid >= 0:
            out[gid] = i
    return out
