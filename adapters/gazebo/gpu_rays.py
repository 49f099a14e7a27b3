"""A model of Gazebo's gpu_lidar ray directions (gz-rendering 8, Ogre2GpuRays), so the exact
reference can be cast as the engine casts and a comparison can tell the engine's documented
approximation from everything else.

What gz-rendering 8 does (ogre2/src/Ogre2GpuRays.cc and the gpu_rays_*_pass shaders, read at
tag gz-rendering8_8.2.3; nothing here is copied from them):

- First pass: a cube map of range around the sensor, each 90-degree face an N x N texture,
  N = the next power of two above the rays per 90 degrees (horizontal or vertical, whichever is
  larger), clamped to 128 .. 1024 (`ConfigureCamera`). Each texel stores the length of the
  view-space position of the surface seen through the texel's centre, i.e. the range along the
  texel-centre direction (`gpu_rays_1st_pass_fs.glsl`); beyond the far clip it is "no return".
- Second pass: each ray (ring i, column j) looks up a float32 (u, v, face) triple, computed on
  the CPU once (`CreateSampleTexture`: h and v accumulated by repeated addition of the angle
  step from min_angle, the direction yaw(-h) * pitch(-v) * (0, 0, 1) in a y-up cube frame,
  `SampleCubemap`), and reads the face texture with `filtering none`, i.e. the nearest texel.

So Gazebo returns, for each ray, the range along the nearest texel centre's direction, and the
published point lies at that range along the ray's nominal direction. `texel_directions`
gives those directions in the sensor frame (x forward, y left, z up).

The defect (`addressing="wrap"`): the sampler has no clamp addressing, so a coordinate that
rounds to exactly 1.0 in float32 selects texel N, which wraps to texel 0 at the face's opposite
edge. With min_angle 0 and 360-degree sweeps the accumulated azimuth of the column at 45
degrees lands just past pi/4: that column reads the range seen about 90 degrees away.
The emulation used as the engine's documented approximation clamps (as a correct sampler
would); `wrap` reproduces the defect, as evidence for the anomaly the comparison reports.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simconform.spec import LidarSpec

MIN_TEXELS, MAX_TEXELS = 128, 1024
# faces in SampleCubemap's numbering: (major axis, sign) of the y-up cube frame
FACES = {0: (0, 1.0), 1: (0, -1.0), 2: (1, 1.0), 3: (1, -1.0), 4: (2, 1.0), 5: (2, -1.0)}


def sdf_angles(s: LidarSpec) -> tuple[float, float, float, float]:
    """(min, max, vertical min, vertical max) as adapters/gazebo/sdf.py writes them."""
    el = s.rings.elevations()
    return 0.0, 2 * np.pi * (s.columns - 1) / s.columns, float(el.min()), float(el.max())


def first_pass_texels(s: LidarSpec) -> int:
    """N, the texels per side of each cube face (Ogre2GpuRays::ConfigureCamera)."""
    hmin, hmax, vmin, vmax = sdf_angles(s)
    hfov = max(hmax - hmin, 1e-6)
    rings = len(s.rings.elevations())
    vfov = max(vmax - vmin, 1e-6) if rings > 1 else 0.0
    hs = s.columns if hfov < np.pi / 2 else int(np.pi / 2 / hfov * s.columns)
    vs = rings if vfov < np.pi / 2 else int(np.pi / 2 / vfov * rings)
    v = max(hs, vs, 1)
    n = 1 << (v - 1).bit_length()  # next power of two >= v
    return int(np.clip(n, MIN_TEXELS, MAX_TEXELS))


def _accumulated(start: float, step: float, n: int) -> np.ndarray:
    """start, start + step, ... by repeated float64 addition, as the C++ loop does."""
    return np.add.accumulate(np.r_[start, np.full(n - 1, step)]) if n > 1 else np.array([start])


def sample_cubemap(d: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(u, v, face) of y-up cube-frame directions (..., 3), as Ogre2GpuRays::SampleCubemap."""
    x, y, z = d[..., 0], d[..., 1], d[..., 2]
    ax, ay, az = np.abs(x), np.abs(y), np.abs(z)
    on_z = (az >= ax) & (az >= ay)
    on_y = ~on_z & (ay >= ax)
    face = np.where(on_z, np.where(z < 0, 5, 4), np.where(on_y, np.where(y < 0, 3, 2), 0))
    face = np.where(~on_z & ~on_y & (x < 0), 1, face)
    major = np.where(on_z, az, np.where(on_y, ay, ax))
    uu = np.where(on_z, np.where(z < 0, -x, x), np.where(on_y, x, np.where(x < 0, z, -z)))
    vv = np.where(on_z, -y, np.where(on_y, np.where(y < 0, -z, z), -y))
    ma = 0.5 / major
    return uu * ma + 0.5, vv * ma + 0.5, face


def _face_direction(face: np.ndarray, uc: np.ndarray, vc: np.ndarray) -> np.ndarray:
    """The y-up cube-frame direction whose SampleCubemap is (uc, vc) on `face` (its inverse)."""
    s, t = 2 * uc - 1, 2 * vc - 1
    one = np.ones_like(s)
    table = {
        0: (one, -t, -s),
        1: (-one, -t, s),
        2: (s, one, t),
        3: (s, -one, -t),
        4: (s, -t, one),
        5: (-s, -t, -one),
    }
    out = np.zeros((*np.shape(face), 3))
    for f, (x, y, z) in table.items():
        m = face == f
        out[m] = np.stack([x[m], y[m], z[m]], axis=-1)
    return out / np.linalg.norm(out, axis=-1, keepdims=True)


def _cube_to_sensor(d: np.ndarray) -> np.ndarray:
    """y-up cube frame (x right, y up, z forward) -> sensor frame (x forward, y left, z up)."""
    return np.stack([d[..., 2], -d[..., 0], d[..., 1]], axis=-1)


@dataclass
class GpuRays:
    """Per ray (rings, columns): the cube face, texel indices and texel-centre direction."""

    texels: int
    face: np.ndarray  # (rings, columns) int
    texel_u: np.ndarray  # (rings, columns) int, after addressing
    texel_v: np.ndarray
    directions: np.ndarray  # (rings, columns, 3) unit, sensor frame
    wrapped: np.ndarray  # (rings, columns) bool: u or v rounded to 1.0 (wraps without clamp)


def texel_directions(s: LidarSpec, addressing: str = "clamp") -> GpuRays:
    """Where each of the spec's rays really looks in Gazebo (module doc); rows are rings from
    the lowest, columns from azimuth 0, as LidarSpec.directions()."""
    if addressing not in ("clamp", "wrap"):
        raise ValueError(f"addressing {addressing!r}: expected clamp or wrap")
    n = first_pass_texels(s)
    hmin, hmax, vmin, vmax = sdf_angles(s)
    rings = len(s.rings.elevations())
    h = _accumulated(hmin, (hmax - hmin) / (s.columns - 1) if s.columns > 1 else 0.0, s.columns)
    v = _accumulated(vmin, (vmax - vmin) / (rings - 1) if rings > 1 else 1.0, rings)
    hh, vv = np.meshgrid(h, v)
    # yaw(-h) about y after pitch(-v) about x, applied to (0, 0, 1)
    cube = np.stack([-np.cos(vv) * np.sin(hh), np.sin(vv), np.cos(vv) * np.cos(hh)], axis=-1)
    u, w, face = sample_cubemap(cube)
    u32, w32 = u.astype(np.float32), w.astype(np.float32)  # the PFG_RGBA32_FLOAT texture
    iu = np.floor(u32.astype(np.float64) * n).astype(np.int64)
    iv = np.floor(w32.astype(np.float64) * n).astype(np.int64)
    wrapped = (iu >= n) | (iv >= n)
    if addressing == "wrap":
        iu, iv = iu % n, iv % n
    else:
        iu, iv = np.clip(iu, 0, n - 1), np.clip(iv, 0, n - 1)
    d = _face_direction(face, (iu + 0.5) / n, (iv + 0.5) / n)
    return GpuRays(n, face, iu, iv, _cube_to_sensor(d), wrapped)


def cast_from_sensor(scene, s: LidarSpec, mount, dirs: np.ndarray, t_ns: int, motion):
    """Exact casts of sensor-frame directions (..., 3) from the sensor's pose at t_ns (one
    instant) up to range.max: (simconform.raycast Hits, flat, and the world directions (N, 3))."""
    from simconform.actors import MovingScene

    pose = motion.pose_at(int(t_ns)).compose(mount)
    d = pose.rot.apply(dirs.reshape(-1, 3))
    o = np.broadcast_to(pose.t, d.shape)
    if isinstance(scene, MovingScene):  # the actors where they are at that instant
        return scene.cast(o, d, 0.0, s.range.max, int(t_ns)), d
    return scene.cast(o, d, 0.0, s.range.max), d


def emulate_sweep(
    scene, s: LidarSpec, mount, rays: GpuRays, t_ns: int, motion
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What gpu_lidar would return at t_ns on the reference geometry `scene`
    (simconform.raycast.Scene): the whole sweep at one instant (global shutter), each ray along
    its texel-centre direction, no return beyond range.max (the far clip) or below range.min.
    Returns (ranges, |cos incidence|, object index), each (rings, columns); ranges NaN and
    index -1 where there is no return. Gazebo publishes the ranges along the nominal rays."""
    hits, d = cast_from_sensor(scene, s, mount, rays.directions, t_ns, motion)
    shape = rays.directions.shape[:2]
    r = hits.dist.reshape(shape)
    ok = np.isfinite(r) & (r >= s.range.min) & (r <= s.range.max)
    cos_inc = np.abs(np.einsum("ij,ij->i", np.nan_to_num(hits.normal), d)).reshape(shape)
    return np.where(ok, r, np.nan), cos_inc, np.where(ok, hits.index.reshape(shape), -1)
