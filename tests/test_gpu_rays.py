"""The model of Gazebo's gpu_lidar (adapters/gazebo/gpu_rays.py) and the explainer built on
it (verify/compare/explain/lidar.py), without a Gazebo server: the real engine's output is
checked against them in tests/test_gazebo_fixture.py and the `gazebo` tests."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import DEMO_SPEC, REPO
from simconform.adapters.gazebo import gpu_rays
from simconform.spec import LidarSpec, Spec, load_spec


def lidar(columns: int, rings: int = 16, fov=(-15.0, 15.0)) -> LidarSpec:
    return LidarSpec.model_validate(
        {"type": "lidar", "rate_hz": 10, "columns": columns,
         "rings": {"count": rings, "fov_deg": list(fov)}}
    )  # fmt: skip


@pytest.mark.parametrize(
    ("columns", "rings", "texels"),
    [(360, 16, 128), (1800, 16, 512), (90, 16, 128), (4096, 64, 1024), (2048, 128, 512)],
)
def test_cube_face_size_follows_configure_camera(columns, rings, texels) -> None:
    """Next power of two above the rays per 90 degrees, clamped to 128 .. 1024."""
    assert gpu_rays.first_pass_texels(lidar(columns, rings)) == texels


@settings(max_examples=200, deadline=None)
@given(
    st.floats(-1, 1), st.floats(-1, 1), st.floats(-1, 1),
)  # fmt: skip
def test_face_direction_inverts_sample_cubemap(x, y, z) -> None:
    d = np.array([x, y, z])
    if np.linalg.norm(d) < 1e-3:
        return
    d = d / np.linalg.norm(d)
    u, v, face = gpu_rays.sample_cubemap(d[None])
    assert 0 <= u[0] <= 1 and 0 <= v[0] <= 1
    back = gpu_rays._face_direction(face, u, v)[0]
    np.testing.assert_allclose(back, d, atol=1e-12)


@pytest.mark.parametrize("columns", [360, 1800, 90, 1024])
def test_texel_centres_are_within_half_a_texel_of_the_nominal_rays(columns) -> None:
    s = lidar(columns)
    r = gpu_rays.texel_directions(s)
    n = r.texels
    ang = np.arccos(np.clip(np.einsum("...i,...i", r.directions, s.directions()), -1, 1))
    # half a texel diagonal at most: a texel spans 2 / n of the face's tangent plane, and
    # subtends the largest angle at the face centre (sqrt(2) / n for half its diagonal)
    assert ang.max() <= np.sqrt(2) / n
    assert ang.max() > 0  # and they are not the nominal rays
    np.testing.assert_allclose(np.linalg.norm(r.directions, axis=-1), 1.0, atol=1e-12)


def test_the_45_degree_column_wraps_for_the_bundled_specs() -> None:
    """The defect the comparison surfaces: with min_angle 0 and a full sweep, the column at 45
    degrees rounds to u = 1.0 and wraps to the face's opposite edge (about 135 degrees)."""
    for path, column in (
        (DEMO_SPEC, 45),
        (REPO / "sensors_spec" / "vlp16.yaml", 225),
    ):
        s = next(x for x in load_spec(path).sensors.values() if isinstance(x, LidarSpec))
        clamp = gpu_rays.texel_directions(s, "clamp")
        wrap = gpu_rays.texel_directions(s, "wrap")
        assert np.unique(np.nonzero(clamp.wrapped)[1]).tolist() == [column]
        differs = np.any(np.abs(wrap.directions - clamp.directions) > 1e-12, axis=-1)
        assert np.array_equal(differs, clamp.wrapped)
        az = np.degrees(np.arctan2(wrap.directions[..., 1], wrap.directions[..., 0]))
        assert np.all(np.abs(az[:, column] - 135) < 0.5)
        with pytest.raises(ValueError, match="clamp or wrap"):
            gpu_rays.texel_directions(s, "mirror")


def test_emulated_sweep_sees_a_wall_along_the_texel_rays(short_run) -> None:
    """On the demo world the emulation's ranges are the exact casts along the texel-centre
    rays: the same as the reference's where a texel looks exactly along a nominal ray."""
    from simconform.raycast import Scene
    from simconform.verify.compare.explain.inputs import run_inputs

    manifest = json.loads((short_run / "run.json").read_text())
    world, motion = run_inputs(manifest)
    scene = Scene(world)
    s = Spec.model_validate(manifest["spec_content"]).sensors["lidar"]
    from simconform.frames import Pose

    mount = Pose.from_xyz_rpy(s.mount.xyz, s.mount.rpy)
    rays = gpu_rays.texel_directions(s)
    r, cos_inc, idx = gpu_rays.emulate_sweep(scene, s, mount, rays, motion.start_ns, motion)
    hit = np.isfinite(r)
    assert np.array_equal(hit, idx >= 0)
    assert np.all((r[hit] >= s.range.min) & (r[hit] <= s.range.max))
    assert np.all((cos_inc[hit] >= 0) & (cos_inc[hit] <= 1 + 1e-12))
    pose = motion.pose_at(motion.start_ns).compose(mount)
    d = pose.rot.apply(rays.directions.reshape(-1, 3))
    again = scene.cast(np.broadcast_to(pose.t, d.shape), d, 0.0, s.range.max).dist
    np.testing.assert_array_equal(np.where(hit.ravel(), again, np.nan), r.ravel())


def test_explainer_on_its_own_model_and_on_a_wrapped_column(short_run) -> None:
    """Fed the model's own output, every ray is `model` and there is no anomaly; with one
    column replaced by what the wrapped texel sees, that column is the one anomaly and the
    wrap hypothesis reproduces all of it."""
    from simconform.verify.compare.explain.lidar import GazeboLidarExplainer

    manifest = json.loads((short_run / "run.json").read_text())
    s = Spec.model_validate(manifest["spec_content"]).sensors["lidar"]
    clean = GazeboLidarExplainer(manifest, s)
    faulty = GazeboLidarExplainer(manifest, s)
    nominal = s.directions()
    for k in range(12, 24):  # from 1.2 s on, an obstacle is in view at 45 or 135 degrees
        t = clean.motion.start_ns + k * 100_000_000
        r, _, _ = gpu_rays.emulate_sweep(clean.scene, s, clean.mount, clean.rays, t, clean.motion)
        clean.add(t, r[..., None] * nominal, r[..., None] * nominal)
        w, _, _ = gpu_rays.emulate_sweep(clean.scene, s, clean.mount, clean.wrap, t, clean.motion)
        faulty.add(t, w[..., None] * nominal)
    rep = clean.report()
    assert rep["within_tolerance_of_model"] == 1.0
    assert rep["anomalies"] == [] and rep["unexplained_rays"] == []
    assert rep["predicted"]["hit_agreement"] == 1.0
    assert rep["predicted"]["range_diff_p99"] == 0.0
    bad = faulty.report()
    assert sum(bad["classes"].values()) == bad["rays"] == 12 * nominal.shape[0] * nominal.shape[1]
    cols = [a["column"] for a in bad["anomalies"] if "column" in a]
    assert cols == [45]
    assert bad["anomalies"][0]["hypothesis_reproduced"] == 1.0
    assert bad["unexplained_outside_anomalies"] == 0


@pytest.mark.parametrize("side", [0, 1])
def test_predicted_difference_is_b_minus_a_whichever_run_is_gazebo(short_run, side) -> None:
    """The model's predicted range difference has compare's sign (B - A): with the other
    engine 1 % farther than the model, it is negative when Gazebo is B, positive when A."""
    from simconform.verify.compare.explain.lidar import GazeboLidarExplainer

    manifest = json.loads((short_run / "run.json").read_text())
    s = Spec.model_validate(manifest["spec_content"]).sensors["lidar"]
    ex = GazeboLidarExplainer(manifest, s, side)
    t = ex.motion.start_ns
    r, _, _ = gpu_rays.emulate_sweep(ex.scene, s, ex.mount, ex.rays, t, ex.motion)
    model, farther = r[..., None] * s.directions(), 1.01 * r[..., None] * s.directions()
    ex.add(t, *((model, farther) if side == 0 else (farther, model)))
    bias = ex.report()["predicted"]["range_diff_bias"]
    assert (bias < 0) if side == 1 else (bias > 0), bias
