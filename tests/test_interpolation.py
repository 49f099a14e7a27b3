"""Interpolation between a trajectory's poses: the C2 spline (default) and the old linear + SLERP.

The spline must pass through the given poses, be C2 across every knot (velocity, acceleration,
angular rate and angular acceleration continuous), and leave the old mode untouched.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.spatial.transform import Rotation, Slerp

from conftest import bag_digest, cli
from simconform.adapters.kinematics import rates
from simconform.demo import DEMO_SPEC, DEMO_TRAJECTORY, DEMO_WORLD
from simconform.errors import UserError
from simconform.frames import Pose
from simconform.pipeline.schedule import capture_times
from simconform.run import RunConfig, load_inputs, run
from simconform.spec import load_spec
from simconform.trajectory import Trajectory, load_trajectory
from simconform.verify.compare import check_comparable
from simconform.world import load_world

POS_DELTA_NS = 100_000  # one-sided stencil steps; knots are >= 15 ms apart
ROT_DELTA_NS = 20_000


@st.composite
def trajectories(draw, interpolation: str = "spline") -> Trajectory:
    """Irregular knots (15-120 ms apart, starting at any nanosecond), random walk poses."""
    n = draw(st.integers(2, 12))
    dt_ns = draw(st.lists(st.integers(15_000_000, 120_000_000), min_size=n - 1, max_size=n - 1))
    start = draw(st.integers(0, 10**12))
    t = start + np.concatenate([[0], np.cumsum(dt_ns)]).astype(np.int64)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    pos = np.cumsum(rng.normal(0.0, 0.3, (n, 3)), axis=0) + rng.normal(0.0, 50.0, 3)
    rot = Rotation.from_rotvec(np.cumsum(rng.normal(0.0, 0.2, (n, 3)), axis=0))
    return Trajectory(t, pos, rot, interpolation)


@settings(max_examples=60, deadline=None)
@given(traj=trajectories(), mode=st.sampled_from(["spline", "linear"]))
def test_pose_at_passes_through_the_knots(traj: Trajectory, mode: str) -> None:
    traj = Trajectory(traj.times_ns, traj.positions, traj.rotations, mode)
    p = traj.pose_at(traj.times_ns)
    assert np.abs(p.t - traj.positions).max() < 1e-12 * (1 + np.abs(traj.positions).max())
    assert (traj.rotations.inv() * p.rot).magnitude().max() < 1e-12
    one = traj.pose_at(int(traj.times_ns[-1]))  # a scalar stamp gives one pose
    assert one.t.shape == (3,) and one.rot.single


def _stencils(f: np.ndarray, d: float, sign: int) -> tuple[np.ndarray, np.ndarray]:
    """First and second derivative at f[0] from f[0..3] one step d apart on one side: the
    4-point one-sided formulas, exact for a cubic."""
    first = sign * (-11 * f[0] + 18 * f[1] - 9 * f[2] + 2 * f[3]) / (6 * d)
    second = (2 * f[0] - 5 * f[1] + 4 * f[2] - f[3]) / d**2
    return first, second


def _one_sided(traj: Trajectory, knot: int) -> dict[str, np.ndarray]:
    """Velocity, acceleration, body angular rate and angular acceleration just left and just
    right of `knot`, from pose_at only. Position: each side is one cubic piece, so the stencils
    are exact to rounding. Orientation: the rotation vector relative to the knot's rotation,
    whose first and second derivatives at 0 are the body angular rate and acceleration; exact
    on the right piece (the RotationSpline's own cubic), O(delta^2) on the left, which a
    Richardson step (delta and delta / 2) removes."""
    k = np.arange(4)
    at_knot = traj.pose_at(knot).rot.inv()
    out = {}
    for side, sign in (("left", -1), ("right", 1)):
        p = traj.pose_at(knot + sign * k * POS_DELTA_NS).t
        out[f"pos_rate_{side}"], out[f"pos_acc_{side}"] = _stencils(p, POS_DELTA_NS * 1e-9, sign)
        est = []
        for step in (ROT_DELTA_NS, ROT_DELTA_NS // 2):
            rv = (at_knot * traj.pose_at(knot + sign * k * step).rot).as_rotvec()
            est.append(_stencils(rv, step * 1e-9, sign))
        rate, acc = ((4 * fine - coarse) / 3 for coarse, fine in zip(*est))
        out[f"rot_rate_{side}"], out[f"rot_acc_{side}"] = rate, acc
    return out


def _jumps(traj: Trajectory) -> dict[str, float]:
    """Largest jump across an inner knot of each of the four rates (left vs right limit)."""
    worst = dict.fromkeys(("pos_rate", "pos_acc", "rot_rate", "rot_acc"), 0.0)
    for knot in traj.times_ns[1:-1]:
        s = _one_sided(traj, int(knot))
        for name in worst:
            jump = np.abs(s[f"{name}_left"] - s[f"{name}_right"]).max()
            worst[name] = max(worst[name], float(jump))
    return worst


@settings(max_examples=40, deadline=None)
@given(traj=trajectories())
def test_spline_is_c2_across_every_knot(traj: Trajectory) -> None:
    """One-sided limits of velocity, acceleration, angular rate and angular acceleration agree
    at every inner knot (tolerances: stencil rounding and the O(delta^2) left rotation term)."""
    if len(traj) < 3:
        return
    jumps = _jumps(traj)
    assert jumps["pos_rate"] < 1e-6, jumps
    assert jumps["pos_acc"] < 5e-3, jumps  # rounding: 12 eps |p| / delta^2 with |p| ~ 150 m
    assert jumps["rot_rate"] < 1e-6, jumps
    assert jumps["rot_acc"] < 1e-3, jumps


def test_the_continuity_check_sees_the_linear_corners() -> None:
    """The same check on the linear path finds the rate jumps the spline removes."""
    t = np.array([0, 40, 80, 120], dtype=np.int64) * 1_000_000
    pos = np.array([[0.0, 0, 0], [0.1, 0, 0], [0.2, 0.05, 0], [0.3, 0.05, 0.02]])
    rot = Rotation.from_euler("z", [[0.0], [0.05], [0.15], [0.2]])
    linear = _jumps(Trajectory(t, pos, rot, "linear"))
    assert linear["pos_rate"] > 1.0 and linear["rot_rate"] > 1.0
    spline = _jumps(Trajectory(t, pos, rot))
    assert max(spline.values()) < 1e-3, spline


class _OldLinear(Trajectory):
    """pose_at exactly as it was before the spline (linear position, SLERP orientation)."""

    def __init__(self, times_ns, positions, rotations) -> None:
        super().__init__(times_ns, positions, rotations, "linear")
        self._old_slerp = Slerp(self._rel, rotations)

    def pose_at(self, t_ns):
        t = np.asarray(t_ns, dtype=np.int64)
        if t.size and (t.min() < self.start_ns or t.max() > self.end_ns):
            raise ValueError("outside")
        rel = (t - self.start_ns).astype(float)
        i = np.clip(np.searchsorted(self._rel, rel, side="right") - 1, 0, len(self._rel) - 2)
        f = (rel - self._rel[i]) / (self._rel[i + 1] - self._rel[i])
        f = f[..., None]
        pos = self.positions[i] * (1 - f) + self.positions[i + 1] * f
        return Pose(pos, self._old_slerp(rel))


def test_linear_mode_is_the_old_interpolation_byte_for_byte(tmp_path, monkeypatch) -> None:
    """`--interpolation linear` writes the bag the code before the spline wrote (a run whose
    trajectory is the old pose_at), and records its mode; the default records spline."""
    import simconform.run as run_mod

    world = load_world(DEMO_WORLD)
    lin = load_trajectory(DEMO_TRAJECTORY, world, "linear")
    old = _OldLinear(lin.times_ns, lin.positions, lin.rotations)
    t = np.sort(np.random.default_rng(3).integers(lin.start_ns, lin.end_ns, 5000))
    a, b = lin.pose_at(t), old.pose_at(t)
    assert np.array_equal(a.t, b.t) and np.array_equal(a.rot.as_quat(), b.rot.as_quat())

    new = run(RunConfig(out=tmp_path / "new", duration=1.0, interpolation="linear"), False)
    with monkeypatch.context() as m:
        m.setattr(run_mod, "load_trajectory", lambda path, w, interpolation: old)
        ref = run(RunConfig(out=tmp_path / "old", duration=1.0), False)
    assert bag_digest(new.out) == bag_digest(ref.out)
    assert json.loads((new.out / "run.json").read_text())["interpolation"] == "linear"
    assert json.loads((ref.out / "run.json").read_text())["interpolation"] == "spline"


def test_compare_refuses_runs_of_different_interpolation(tmp_path) -> None:
    base = {
        "backend": "reference",
        "spec_content": {},
        "world_content": {},
        "trajectory_sha256": "0" * 64,
        "seed": 1,
        "start_ns": 0,
        "end_ns": 1,
    }
    spline, linear = dict(base, interpolation="spline"), dict(base, interpolation="linear")
    check_comparable(tmp_path / "a", linear, tmp_path / "b", base)  # no key: it was linear
    for a, b in ((spline, linear), (spline, base)):
        with pytest.raises(UserError) as err:
            check_comparable(tmp_path / "a", a, tmp_path / "b", b)
        msg = str(err.value)
        assert "interpolation: got 'linear'; expected 'spline'" in msg
        assert "only the backend may differ" in msg


def test_bad_interpolation_flag_is_one_message_and_exit_2(tmp_path) -> None:
    res = cli("run", "--interpolation", "cubic", "--out", str(tmp_path / "never"))
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert lines == [
        "simconform: error: --interpolation: got 'cubic'; expected spline or linear"
    ], res.stderr
    assert not (tmp_path / "never").exists()
    with pytest.raises(UserError, match="expected spline or linear"):  # the library too
        load_inputs(RunConfig(interpolation="akima"))


DEMO_MAX_ACCEL = 1.0  # m/s^2 at the IMU mount over the demo: measured 0.85 spline, 1.62 linear


def test_demo_imu_truth_has_no_knot_spikes() -> None:
    """The demo's 200 s at 100 Hz at the IMU mount (worlds/make_demo_trajectory.py: a vehicle
    on two axles, so it pitches over a wheelbase at the ramp's edges). The spline's acceleration
    changes smoothly from sample to sample; the linear path's jumps at every 20 ms knot (on
    flat ground between 0 and twice the turn's centripetal acceleration)."""
    world, spec = load_world(DEMO_WORLD), load_spec(DEMO_SPEC)
    imu = spec.sensors["imu"]
    mount = Pose.from_xyz_rpy(imu.mount.xyz, imu.mount.rpy)
    h = round(1e9 / imu.rate_hz)
    acc = {}
    for mode in ("spline", "linear"):
        traj = load_trajectory(DEMO_TRAJECTORY, world, mode)
        t = capture_times(imu.rate_hz, traj.start_ns, traj.end_ns)
        acc[mode] = rates(traj, t, h, mount).accel
    peak = {m: np.linalg.norm(a, axis=1) for m, a in acc.items()}
    assert peak["spline"].max() < DEMO_MAX_ACCEL < peak["linear"].max()
    step = {m: np.linalg.norm(np.diff(a, axis=0), axis=1) for m, a in acc.items()}
    # measured: spline p99 0.015, max 0.37 m/s^2 per 10 ms; linear p99 1.14, max 1.62
    assert np.quantile(step["spline"], 0.99) < 0.05 < 0.5 < np.quantile(step["linear"], 0.99)
    flat = slice(2000, 2100)  # 20 .. 21 s, a steady turn on flat ground
    a = peak["spline"][flat]
    assert a.max() - a.min() < 0.01 < np.ptp(peak["linear"][flat])
