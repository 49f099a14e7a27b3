"""Gazebo's camera colour model (adapters/shading.py, ReferenceBackend(emulate="gazebo")), and
`simconform compare`'s camera judgement when one side is a gazebo run: PSNR against the
reference re-rendered in that model, and edge agreement. Marked `gazebo`: a real 2 s run."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from conftest import DEMO_TRAJECTORY, DEMO_WORLD, cli, demo_spec, write_yaml
from simconform.adapters.reference import ReferenceBackend
from simconform.adapters.shading import (
    GZ_F0,
    gazebo_radiance,
    linear_to_srgb8,
    srgb8_to_linear,
    srgb_decode,
    srgb_encode,
)
from simconform.spec import Spec
from simconform.trajectory import Trajectory, load_trajectory
from simconform.verify.compare import CameraTruthDiff
from simconform.verify.compare.explain.camera import EDGE_AGREEMENT_MIN, edge_agreement, edge_map
from simconform.world import World, load_world

# ------------------------------------------------------------------ sRGB transfer function


def test_srgb_known_values_and_round_trip() -> None:
    assert srgb_encode(0.0) == 0.0 and srgb_encode(1.0) == pytest.approx(1.0, abs=1e-15)
    # the two pieces meet at the breakpoint (IEC 61966-2-1: 0.0031308 <-> 0.04045)
    assert srgb_encode(0.0031308) == pytest.approx(0.04045, abs=1e-6)
    assert srgb_encode(0.18) == pytest.approx(0.4613561, abs=1e-6)  # mid grey
    assert srgb_encode(0.5) == pytest.approx(0.7353570, abs=1e-6)
    assert srgb_decode(0.5) == pytest.approx(0.2140411, abs=1e-6)
    assert srgb_encode(-0.2) == 0.0 and srgb_encode(1.5) == pytest.approx(1.0)  # clamped
    x = np.linspace(0.0, 1.0, 10001)
    assert np.allclose(srgb_decode(srgb_encode(x)), x, atol=1e-12)
    # 8-bit: rounded to nearest, and every code survives decode -> encode
    assert linear_to_srgb8(np.array([0.0, 0.5, 1.0])).tolist() == [0, 188, 255]
    codes = np.arange(256, dtype=np.uint8)
    assert np.array_equal(linear_to_srgb8(srgb8_to_linear(codes)), codes)


def test_gazebo_radiance_closed_forms() -> None:
    amb, dif = 0.3, 0.7
    up = np.array([[0.0, 0.0, 1.0]])
    # head-on: N = V = L, so NdotL = NdotV = VdotH = 1: Disney's factor is its energy factor
    energy = 1 + (1 / 1.51 - 1) * 0.5
    s = gazebo_radiance(up, up, up[0], amb, dif)
    assert s[0] == pytest.approx(amb / math.pi + dif * energy * (1 - GZ_F0), rel=1e-12)
    # facing away from the light: the ambient alone, divided by pi (kD = albedo / pi)
    s = gazebo_radiance(up, up, np.array([0.0, 0.0, -1.0]), amb, dif)
    assert s[0] == pytest.approx(amb / math.pi, rel=1e-12)
    # grazing light (NdotL = 0) lights nothing either
    s = gazebo_radiance(up, up, np.array([1.0, 0.0, 0.0]), amb, dif)
    assert s[0] == pytest.approx(amb / math.pi, rel=1e-12)


def _sphere_world() -> World:
    return World.model_validate(
        {
            "name": "s",
            "origin": {"lat": 0, "lon": 0, "alt": 0},
            "sky_color": [0.55, 0.7, 0.9],
            # the light shines along +x (from behind the camera onto the sphere's front)
            "light": {"direction": [1.0, 0.0, 0.0], "ambient": 0.3, "diffuse": 0.7},
            "objects": [
                {"type": "sphere", "center": [20, 0, 0], "radius": 2.0, "color": [0.8, 0.3, 0.2]}
            ],
        }
    )


def _static() -> Trajectory:
    return Trajectory(np.array([0, 10**9]), np.zeros((2, 3)), Rotation.identity(2))


def _cam_spec(w: int = 101, h: int = 101) -> Spec:
    cam = {"type": "camera", "rate_hz": 1, "width": w, "height": h, "hfov_deg": 40}
    return Spec.model_validate({"name": "s", "sensors": {"cam": cam}})


def test_emulated_camera_pixels() -> None:
    world, spec = _sphere_world(), _cam_spec()
    b = ReferenceBackend(emulate="gazebo")
    b.open(world, spec)
    s = b.capture("cam", 0, _static())
    assert s.image[0, 0].tolist() == linear_to_srgb8(np.array(world.sky_color)).tolist()
    # the centre pixel sees the sphere head-on, lit head-on
    energy = 1 + (1 / 1.51 - 1) * 0.5
    shade = 0.3 / math.pi + 0.7 * energy * (1 - GZ_F0)
    expected = linear_to_srgb8(np.array([0.8, 0.3, 0.2]) * shade)
    assert s.image[50, 50].tolist() == expected.tolist()
    lam = ReferenceBackend()
    lam.open(world, spec)
    ls = lam.capture("cam", 0, _static())
    assert np.array_equal(ls.depth, s.depth)  # the same geometry
    assert not np.array_equal(ls.image, s.image)
    with pytest.raises(ValueError, match="emulate"):
        ReferenceBackend(emulate="unity")


def test_emulated_camera_clips_at_gazebo_far_plane_and_plane_size() -> None:
    """Gazebo's <plane> is a 2000 m square and its camera clips at z 1000 m: beyond, sky."""
    world = World.model_validate(
        {
            "name": "g",
            "origin": {"lat": 0, "lon": 0, "alt": 0},
            "objects": [{"type": "plane", "point": [0, 0, 0], "normal": [0, 0, 1]}],
        }
    )
    cam = {"type": "camera", "rate_hz": 1, "width": 64, "height": 480, "hfov_deg": 10}
    spec = Spec.model_validate({"name": "g", "sensors": {"cam": cam}})
    traj = Trajectory(np.array([0, 10**9]), np.array([[0, 0, 2.0]] * 2), Rotation.identity(2))
    out = {}
    for emulate in (None, "gazebo"):
        b = ReferenceBackend(emulate=emulate)
        b.open(world, spec)
        out[emulate] = b.capture("cam", 0, traj)
    z = out[None].depth[:, 32]
    far = np.isfinite(z) & (z > 1000.0)
    assert far.any() and (np.isfinite(z) & (z < 990.0)).any()
    assert np.all(np.isinf(out["gazebo"].depth[:, 32][far]))
    sky = linear_to_srgb8(np.array(world.sky_color))
    assert np.all(out["gazebo"].image[far, 32] == sky)
    near = np.isfinite(z) & (z < 990.0)
    assert np.array_equal(out["gazebo"].depth[near, 32], z[near])


def test_default_lambert_path_is_unchanged() -> None:
    """ReferenceBackend() renders the linear Lambert model, bit for bit what emulate=None does,
    and the documented formula at a pixel."""
    world = load_world(DEMO_WORLD)
    traj = load_trajectory(DEMO_TRAJECTORY, world)
    cam = demo_spec()["sensors"]["camera"] | {"width": 96, "height": 72}
    spec = Spec.model_validate({"name": "c", "sensors": {"camera": cam}})
    a, b = ReferenceBackend(), ReferenceBackend(emulate=None)
    a.open(world, spec)
    b.open(world, spec)
    for t in (0, 12 * 10**9):
        ia, ib = a.capture("camera", t, traj), b.capture("camera", t, traj)
        assert np.array_equal(ia.image, ib.image)
        assert np.array_equal(ia.depth, ib.depth)
    # the sphere world's centre pixel: albedo * 255 * (ambient + diffuse * NdotL), rounded
    s = ReferenceBackend()
    s.open(_sphere_world(), _cam_spec())
    px = s.capture("cam", 0, _static()).image[50, 50]
    assert px.tolist() == np.floor(np.array([0.8, 0.3, 0.2]) * 255 * 1.0 + 0.5).tolist()


# ------------------------------------------------------------------ edges


def _scene(w: int = 96, h: int = 72) -> np.ndarray:
    """A synthetic rgb8 frame: sky, ground, a box and a disc (steps in both directions)."""
    img = np.zeros((h, w, 3), dtype=np.uint8)
    img[: h // 2] = (196, 218, 243)
    img[h // 2 :] = (120, 110, 100)
    img[20:50, 15:40] = (200, 80, 50)
    yy, xx = np.mgrid[:h, :w]
    img[(yy - 40) ** 2 + (xx - 70) ** 2 < 12**2] = (60, 160, 60)
    return img


def _shift(img: np.ndarray, dy: int, dx: int) -> np.ndarray:
    """Shift by whole pixels, repeating the border (no wrap-around edges)."""
    out = img
    if dx:
        out = np.concatenate([out[:, :1]] * dx + [out[:, :-dx]], axis=1)
    if dy:
        out = np.concatenate([out[:1]] * dy + [out[:-dy]], axis=0)
    return out


def test_edge_agreement_identical_and_shifted() -> None:
    img = _scene()
    e = edge_map(img)
    assert e.any() and e.mean() < 0.2
    same = edge_agreement(img, img.copy())
    assert same["dice"] == 1.0 and same["offset"] == 0.0
    # a grey-level of colour difference moves no edge
    brighter = np.clip(img.astype(int) + 1, 0, 255).astype(np.uint8)
    assert edge_agreement(img, brighter)["dice"] == 1.0
    for dy, dx in ((0, 1), (1, 0), (1, 1)):
        r = edge_agreement(img, _shift(img, dy, dx))
        assert r["dice"] < EDGE_AGREEMENT_MIN, (dy, dx, r)
        assert r["offset"] > 0.1, (dy, dx, r)
    # no edges at all on either side: perfect agreement, by definition
    flat = np.full_like(img, 128)
    assert edge_agreement(flat, flat)["dice"] == 1.0


def test_camera_truth_diff_gazebo_metrics() -> None:
    """With a gazebo side and no colour model the gazebo frame is linearised; raw PSNR turns
    informational, the edge agreement is gated."""
    img = _scene()
    gz = linear_to_srgb8(img / 255.0)  # what an sRGB writer makes of the same linear image
    d = CameraTruthDiff(30.0, gazebo=(1, None))
    d.add_image(0, img, gz)
    d.add_image(1, img, _shift(gz, 0, 1))
    m = d.metrics()
    assert m["psnr_mean"]["verdict"] == "not_applicable" and "sRGB" in m["psnr_mean"]["reason"]
    assert m["psnr_model_mean"]["measured"] > m["psnr_mean"]["measured"] + 10
    assert m["edge_agreement"]["verdict"] == "fail"  # one of two frames shifted
    for key in ("psnr_model_mean", "edge_agreement", "edge_offset_mean", "psnr_model_min"):
        assert {"measured", "unit", "n", "verdict"} <= set(m[key])
    plain = CameraTruthDiff(30.0)
    plain.add_image(0, img, img)
    assert "edge_agreement" not in plain.metrics()


# ------------------------------------------------------------------ real Gazebo

# measured 53.6 dB (min frame 46.2) for this spec, raw 17.5 dB (docs/gazebo.md); the margin
# allows for other Mesa/GPU drivers' rounding
PSNR_MODEL_MIN_DB = 45.0


@pytest.mark.gazebo
def test_gazebo_camera_matches_the_emulated_reference(tmp_path) -> None:
    """2 s of the rover's camera alone (320 x 240) through gz-sim 8 and the reference; compare
    re-renders the reference in Gazebo's colour model."""
    spec = demo_spec()
    cam = spec["sensors"]["camera"] | {"width": 320, "height": 240}
    spec["sensors"] = {"camera": cam}
    spec_path = write_yaml(tmp_path / "camera.yaml", spec)
    runs = {}
    for backend in ("reference", "gazebo"):
        runs[backend] = tmp_path / backend
        r = cli("run", "--backend", backend, "--spec", str(spec_path), "--duration", "2",
                "--out", str(runs[backend]), "--no-progress")  # fmt: skip
        assert r.returncode in (0, 1), r.stderr
    out = tmp_path / "compare"
    c = cli("compare", str(runs["reference"]), str(runs["gazebo"]), "--out", str(out))
    assert c.returncode in (0, 1), c.stderr
    t = json.loads((out / "compare.json").read_text())["truth"]["camera"]
    assert t["psnr_model_mean"]["verdict"] == "pass"
    assert t["psnr_model_mean"]["measured"] > PSNR_MODEL_MIN_DB
    assert t["psnr_model_mean"]["measured"] > t["psnr_mean"]["measured"] + 20
    assert t["edge_agreement"]["verdict"] == "pass"
    assert t["depth_finite_agreement"]["measured"] > 0.99
