"""Camera colour models: the sRGB transfer function and Gazebo's (gz-rendering 8, ogre2) shading.

Gazebo's camera renders with Ogre-next's HLMS PBS material into a `PFG_RGBA8_UNORM_SRGB` render
target (gz-rendering `Ogre2RenderTarget.cc`), so what it publishes is the sRGB encoding of a
linear PBS result, rounded to 8 bits. For a world exported by `adapters/gazebo/sdf.py` (one
colour per object written as <ambient> and <diffuse>, <specular> 0, no <pbr>, a directional
light with <diffuse> = light.diffuse and the default <intensity> 1, scene <ambient> =
light.ambient, shadows off) the PBS pixel shader reduces to, per channel:

    linear = albedo * (ambient / pi + diffuse * NdotL * Fd * (1 - Fs))

- albedo / pi is the datablock's kD (`HlmsPbsDatablock::setDiffuse` divides by pi); the
  directional light's colour is multiplied by its power scale, intensity * pi
  (`Ogre2Light::SetIntensity`), which cancels that pi for the light but not for the ambient.
- The ambient term: both hemispheres get the same colour (`Ogre2Scene::SetAmbientLight`), so
  Ogre uses its fixed ambient, `finalColour = ambientUpperHemi * kD` (800.PixelShader_piece_ps).
  The material's own <ambient> is not used by ogre2 (Ogre2Material does not forward it).
- Fd is the normalised Disney diffuse of BRDF_Default (200.BRDFs_piece_ps) with perceptual
  roughness 0.5 (gz-common's default `Pbr`, since the export writes no <pbr>):
  fd90 = 0.5 r + 2 r VdotH^2, Fd = (1 + (fd90 - 1)(1 - NdotL)^5)(1 + (fd90 - 1)(1 - NdotV)^5)
  * lerp(1, 1/1.51, r).
- Fs is Schlick's Fresnel F0 + (1 - F0)(1 - VdotH)^5 with F0 = 0.03 (metallic workflow,
  metalness 0); the diffuse lobe is weighted by 1 - Fs.
- The specular lobe is zero (material specular 0, light specular 0).
- The background (nothing hit) is the clear colour, the world's sky colour, which the sRGB
  render target stores encoded. Gazebo's geometry differs from the reference's in two ways that
  show at the horizon: planes are finite squares of sdf.PLANE_SIZE metres, and nothing beyond
  the far clip plane (z-depth sdf.CAMERA_FAR_M) is drawn; `gazebo_unseen` marks those hits.

Fitted on real frames of the demo (gz-sim 8, ogre2 on Mesa llvmpipe) this model reproduces
Gazebo's interior pixels (away from silhouettes) to within one grey level (docs/gazebo.md).
"""

from __future__ import annotations

import numpy as np

GZ_ROUGHNESS = 0.5  # gz-common 5 Pbr default roughness (no <pbr> in the exported SDF)
GZ_F0 = 0.03  # Ogre-next metallic workflow: lerp(0.03, albedo, metalness), metalness 0


def srgb_encode(x: np.ndarray) -> np.ndarray:
    """Linear [0, 1] -> sRGB [0, 1] (IEC 61966-2-1); values are clamped to [0, 1] first."""
    x = np.clip(np.asarray(x, dtype=np.float64), 0.0, 1.0)
    return np.where(x <= 0.0031308, 12.92 * x, 1.055 * np.power(x, 1 / 2.4) - 0.055)


def srgb_decode(v: np.ndarray) -> np.ndarray:
    """sRGB [0, 1] -> linear [0, 1] (the inverse of `srgb_encode` on [0, 1])."""
    v = np.clip(np.asarray(v, dtype=np.float64), 0.0, 1.0)
    return np.where(v <= 0.04045, v / 12.92, np.power((v + 0.055) / 1.055, 2.4))


SRGB8_TO_LINEAR = srgb_decode(np.arange(256) / 255.0)  # decode table for 8-bit sRGB


def linear_to_srgb8(x: np.ndarray) -> np.ndarray:
    """Linear [0, 1] -> 8-bit sRGB, rounded to nearest as a UNORM8 render target stores it."""
    return np.floor(srgb_encode(x) * 255.0 + 0.5).astype(np.uint8)


def srgb8_to_linear(img: np.ndarray) -> np.ndarray:
    """8-bit sRGB image -> linear float64 in [0, 1] (exact table look-up)."""
    return SRGB8_TO_LINEAR[np.asarray(img, dtype=np.uint8)]


def gazebo_radiance(
    normal: np.ndarray,
    view: np.ndarray,
    to_light: np.ndarray,
    ambient: float,
    diffuse: float,
    roughness: float = GZ_ROUGHNESS,
    f0: float = GZ_F0,
) -> np.ndarray:
    """Per-pixel factor s with linear colour = albedo * s (module docstring's formula).

    normal (N, 3) unit surface normals facing the camera, view (N, 3) unit vectors from the
    surface towards the camera, to_light (3,) unit vector towards the light. NaN normals (no
    hit) give NaN.
    """
    n = np.asarray(normal, dtype=np.float64)
    v = np.asarray(view, dtype=np.float64)
    lt = np.asarray(to_light, dtype=np.float64)
    h = v + lt
    h /= np.maximum(np.linalg.norm(h, axis=-1, keepdims=True), 1e-12)  # V = -L: unlit anyway
    ndl = np.clip(n @ lt, 0.0, 1.0)
    ndv = np.clip(np.einsum("...i,...i->...", n, v), 0.0, 1.0)
    vdh = np.clip(h @ lt, 0.0, 1.0)  # = V.H: H bisects V and L
    fd90 = 0.5 * roughness + 2.0 * roughness * vdh * vdh
    energy = 1.0 + (1.0 / 1.51 - 1.0) * roughness
    fd = (1.0 + (fd90 - 1.0) * (1.0 - ndl) ** 5) * (1.0 + (fd90 - 1.0) * (1.0 - ndv) ** 5)
    fresnel_s = f0 + (1.0 - f0) * (1.0 - vdh) ** 5
    return ambient / np.pi + diffuse * ndl * fd * energy * (1.0 - fresnel_s)


def gazebo_pixels(
    albedo: np.ndarray,
    index: np.ndarray,
    normal: np.ndarray,
    directions: np.ndarray,
    to_light: np.ndarray,
    ambient: float,
    diffuse: float,
) -> np.ndarray:
    """(N, 3) uint8 sRGB pixels as Gazebo's camera renders them.

    albedo (objects + 1, 3) with the sky colour last (index -1 = nothing hit), index (N,) hit
    object per ray, normal (N, 3) facing the ray, directions (N, 3) the rays (camera -> scene).
    """
    hit = index >= 0
    d = np.asarray(directions, dtype=np.float64)
    view = -d / np.linalg.norm(d, axis=-1, keepdims=True)
    s = gazebo_radiance(np.where(hit[:, None], normal, 0.0), view, to_light, ambient, diffuse)
    s = np.where(hit, s, 1.0)  # the sky is the clear colour itself
    return linear_to_srgb8(np.asarray(albedo)[index] * s[:, None])


def gazebo_unseen(
    world, index: np.ndarray, origins: np.ndarray, directions: np.ndarray, dist: np.ndarray,
    zdepth: np.ndarray,
) -> np.ndarray:  # fmt: skip
    """(N,) bool: hits that Gazebo's camera does not draw (sky there instead): beyond the far
    clip plane, or on a plane outside its finite PLANE_SIZE square (sdf.py writes a <plane>
    visual with <size> PLANE_SIZE x PLANE_SIZE at the plane's point; its in-plane axes are taken
    as the shortest-arc rotation of x and y onto the normal, exact for a horizontal ground)."""
    from simconform.adapters.gazebo.sdf import CAMERA_FAR_M, PLANE_SIZE
    from simconform.world import Plane

    out = zdepth > CAMERA_FAR_M
    for i, obj in enumerate(world.objects):
        if not isinstance(obj, Plane):
            continue
        m = index == i
        if not m.any():
            continue
        o = origins[m] if np.ndim(origins) == 2 else origins
        p = o + dist[m, None] * directions[m] - np.asarray(obj.point, dtype=float)
        nz = np.asarray(obj.normal, dtype=float)
        nz = nz / np.linalg.norm(nz)
        ax = np.cross([0.0, 0.0, 1.0], nz)
        if np.linalg.norm(ax) < 1e-12:
            u, v = np.array([1.0, 0.0, 0.0]), np.array([0.0, 1.0, 0.0])
        else:
            from scipy.spatial.transform import Rotation

            angle = np.arctan2(np.linalg.norm(ax), nz[2])
            rot = Rotation.from_rotvec(ax / np.linalg.norm(ax) * angle).as_matrix()
            u, v = rot[:, 0], rot[:, 1]
        half = 0.5 * PLANE_SIZE
        out[m] |= (np.abs(p @ u) > half) | (np.abs(p @ v) > half)
    return out
