"""Reference camera geometry, rendering, and the verifier's prediction of encoded noise."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.spatial.transform import Rotation
from scipy.stats import binom

from conftest import DEMO_TRAJECTORY, DEMO_WORLD, demo_spec
from simconform.adapters.base import CameraTruth
from simconform.adapters.reference import ReferenceBackend
from simconform.pipeline.chain import SensorPipeline
from simconform.spec import CameraSpec, Spec
from simconform.trajectory import Trajectory, load_trajectory
from simconform.verify.camera import CameraAccumulator, raw_error_tables
from simconform.verify.pairing import Pair
from simconform.world import World, load_world


def camera(**kw) -> CameraSpec:
    base = {"type": "camera", "rate_hz": 10, "width": 64, "height": 48, "hfov_deg": 90.0}
    return CameraSpec.model_validate(base | kw)


def test_principal_point_and_fov_edge_rays() -> None:
    spec = camera(width=65, height=49, hfov_deg=70.0)
    rays = spec.rays_optical()
    assert np.allclose(rays[24, 32], [0, 0, 1])  # principal point looks down the optical axis
    fx, fy, cx, cy = spec.k()
    # the outer edge of pixel 0 (u = -0.5) lies exactly on the horizontal FOV
    assert np.isclose(np.degrees(np.arctan((cx + 0.5) / fx)), 35.0)
    corner = rays[0, 0]
    assert np.isclose(corner[0] / corner[2], -cx / fx) and np.isclose(
        corner[1] / corner[2], -cy / fy
    )
    explicit = camera(hfov_deg=None, intrinsics={"fx": 100, "fy": 90, "cx": 10, "cy": 20})
    r = explicit.rays_optical()[20, 10]
    assert np.allclose(r, [0, 0, 1])


def _static(pose_xyz=(0, 0, 0)) -> Trajectory:
    return Trajectory(
        np.array([0, 10**9]), np.array([pose_xyz, pose_xyz], float), Rotation.identity(2)
    )


def test_sphere_silhouette_matches_the_analytic_projection() -> None:
    d, r = 20.0, 2.0
    world = World.model_validate(
        {
            "name": "s",
            "origin": {"lat": 0, "lon": 0, "alt": 0},
            "objects": [{"type": "sphere", "center": [d, 0, 0], "radius": r}],
        }
    )
    spec = Spec.model_validate(
        {
            "name": "s",
            "sensors": {
                "cam": {"type": "camera", "rate_hz": 1, "width": 401, "height": 401, "hfov_deg": 40}
            },
        }
    )
    b = ReferenceBackend()
    b.open(world, spec)
    s = b.capture("cam", 0, _static())
    hit = np.isfinite(s.depth)
    fx = spec.sensors["cam"].k()[0]
    # a sphere seen head-on projects to a disc of radius fx * tan(asin(r / d))
    expected = fx * np.tan(np.arcsin(r / d))
    assert abs(np.sqrt(hit.sum() / np.pi) - expected) < 0.5
    assert np.isclose(s.depth[200, 200], d - r, atol=1e-9)  # z-depth at the centre
    sky = np.array(world.sky_color) * 255
    assert np.allclose(s.image[0, 0], np.floor(sky + 0.5))  # round half up


@cache
def demo_frames(w: int = 160, h: int = 120, n: int = 8) -> tuple[np.ndarray, ...]:
    """Truth frames of the demo world at a few poses (real content: sky, ground, obstacles)."""
    world = load_world(DEMO_WORLD)
    traj = load_trajectory(DEMO_TRAJECTORY, world)
    cam = demo_spec()["sensors"]["camera"] | {"width": w, "height": h}
    spec = Spec.model_validate({"name": "c", "sensors": {"camera": cam}})
    b = ReferenceBackend()
    b.open(world, spec)
    return tuple(b.capture("camera", k * 20 * 10**9 + 5 * 10**8, traj).image for k in range(n))


def measure(spec: CameraSpec, seed: int, frames) -> dict:
    pipe = SensorPipeline("camera", spec, seed)
    acc = CameraAccumulator("camera", spec, 0.95, len(frames) / spec.rate_hz)
    from simconform.bag.messages import image_array
    from simconform.pipeline.encode import decode_image

    for k, img in enumerate(frames):
        pub = pipe.process(CameraTruth(image=img, depth=None), k * 100_000_000)
        got = decode_image(pub.sample.encoded) if pub.sample.encoded else pub.sample.image
        acc.add(Pair(k * 100_000_000, pub.publish_ns, img, got))
    assert image_array  # the decode used for bags is the one tested in test_camera_topics
    return acc.metrics()


EXAMPLES = 100
JPEG: list = []


@settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None)
@given(
    quality=st.integers(50, 100),
    sigma=st.floats(1.0, 20.0),
    seed=st.integers(0, 2**32 - 1),
    sub=st.sampled_from(["4:2:0", "4:4:4"]),
)
def _collect_jpeg(quality: int, sigma: float, seed: int, sub: str) -> None:
    spec = camera(
        width=160,
        height=120,
        jpeg_quality=quality,
        jpeg_subsampling=sub,
        noise={"intensity": {"sigma": sigma}},
    )
    m = measure(spec, seed, demo_frames())
    JPEG.append((sigma, m["intensity_std"], m["intensity_bias"]))


def test_jpeg_prediction_matches_measured_sigma_across_qualities() -> None:
    JPEG.clear()
    _collect_jpeg()
    misses = sum(not (std["ci"][0] <= std["predicted"] <= std["ci"][1]) for _, std, _ in JPEG)
    misses += sum(not (b["ci"][0] <= b["predicted"] <= b["ci"][1]) for _, _, b in JPEG)
    assert misses <= binom.ppf(1 - 1e-6, 2 * EXAMPLES, 0.05), misses
    # the encoding does change what is measured: it is not the configured sigma
    assert any(abs(std["measured"] - s) / s > 0.05 for s, std, _ in JPEG)
    assert all(std["verdict"] == "pass" for _, std, _ in JPEG if std["frames"] >= 8)


@pytest.mark.parametrize("sigma", [2.0, 20.0])
def test_raw_encoding_is_predicted_exactly(sigma: float) -> None:
    frames = demo_frames()
    spec = camera(
        width=160, height=120, encoding="raw", noise={"intensity": {"sigma": sigma, "bias": 3.0}}
    )
    m = measure(spec, 11, frames)
    for key in ("intensity_bias", "intensity_std"):
        assert m[key]["ci"][0] <= m[key]["predicted"] <= m[key]["ci"][1]
        assert m[key]["verdict"] == "pass"


def test_raw_error_tables_match_monte_carlo() -> None:
    rng = np.random.default_rng(3)
    mean_e, mean_e2 = raw_error_tables(bias=2.0, sigma=7.0)
    for v in (0, 3, 128, 250, 255):
        x = np.clip(np.rint(v + 2.0 + 7.0 * rng.standard_normal(2_000_000)), 0, 255) - v
        assert abs(x.mean() - mean_e[v]) < 5 * x.std() / np.sqrt(len(x))
        assert abs((x**2).mean() - mean_e2[v]) < 5 * (x**2).std() / np.sqrt(len(x))
    assert mean_e[255] < 0 < mean_e[0]  # clamping biases both ends towards the middle


def test_histogram_sample_is_the_first_frames_errors_held_once() -> None:
    """The intensity histogram's sample: the first HIST_FRAMES frames' int16 errors, in order,
    as a view of the accumulator's own buffer (no second copy while figures are drawn); and
    the JPEG prediction's noise tables are released once the stream ends."""
    from simconform.pipeline import image_noise
    from simconform.verify.camera import HIST_FRAMES

    frames = demo_frames()
    spec = camera(width=160, height=120, noise={"intensity": {"sigma": 4.0}})
    pipe = SensorPipeline("camera", spec, 5)
    acc = CameraAccumulator("camera", spec, 0.95, len(frames) / spec.rate_hz)
    from simconform.pipeline.encode import decode_image

    published = []
    for k, img in enumerate(frames):
        pub = pipe.process(CameraTruth(image=img, depth=None), k * 100_000_000)
        published.append((pub.publish_ns, decode_image(pub.sample.encoded)))
    image_noise.release_tables()  # the pipeline's own, so that the verifier's are seen below
    expected = []
    for k, (img, (publish_ns, got)) in enumerate(zip(frames, published)):
        expected.append((got.astype(np.int16) - img.astype(np.int16)).ravel())
        acc.add(Pair(k * 100_000_000, publish_ns, img, got))
    assert image_noise._tables.cache_info().currsize > 0  # the JPEG prediction built them
    acc.metrics()
    errors = acc.samples["intensity"]["errors"]
    assert errors.dtype == np.int16
    assert np.array_equal(errors, np.concatenate(expected[:HIST_FRAMES]))
    assert np.shares_memory(errors, acc.hist)
    assert acc.samples["intensity"]["note"] == f"pixels of the first {HIST_FRAMES} frames"
    assert image_noise._tables.cache_info().currsize == 0
