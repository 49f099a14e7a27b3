"""Time alignment of a replay: the constant offset between the pose stream's clock and a sensor's.

A foreign bag's ground-truth poses and its sensors are often stamped by different clocks or at
different points of the pipeline. Truth recomputed at the wrong instant moves every lidar point
by velocity x offset; that is millimetres, but at silhouettes a ray then hits the background
instead of the edge (0.5 ms late poses gave range_std 0.066 m for a 0.03 m sensor in
tests/test_align.py before such edge outliers were left out, verify/lidar_edges.py), and
sideways motion in the offset moves every point off its ray.

The offset d is pose-stream time minus sensor stamp: the capture stamped t happened at pose time
t + d (a pose stream 2 ms late has d = +2 ms), so truth is recomputed from the motion shifted by
d (motion.Shifted). Per sensor, d is the least-squares fit of a linearised model, iterated
(Gauss-Newton): residual(d) ~ residual(d0) - derivative x (d - d0), the derivative by central
differences of the truth at d0 +- 0.5 ms, restricted to the bracket +- twice the latency
tolerance (at least 5 ms):

- lidar: over up to 32 scans spread over the bag, the along-ray residual (published minus true
  point, as the verifier measures range) of the rays whose true point moves smoothly with d;
  edge and grazing rays, whose truth jumps to another surface, carry no usable slope and are
  left out, as are residuals beyond 5 robust sigmas. Truth is cast by the reference backend.
- IMU: angular rate and specific force, measured minus derived from the poses, in units of the
  spec's sigmas, each axis' mean removed (a bias does not pull): the least-squares
  cross-correlation of the two signals, refined below the sample period. Specific force
  carries d through gravity turning with roll and pitch.

Residuals are centred per scan (lidar: a range bias does not pull either). The interval is
Student-t with a cluster-robust (sandwich) variance over scans, or over 20 blocks of
consecutive IMU samples, so errors correlated inside a scan or a block do not narrow it. An
estimate whose interval is wider than the tolerance is reported but not applied (it would
shift truth by noise). The verifier judges d (`time_offset_ms`) against the spec's latency
tolerance, max(latency_rel x fixed_ms, latency_abs_ms): a capture stamped d away from its
instant makes every latency measured from the stamps wrong by d. GNSS and odometry are not
estimated (their offset moves truth by millimetres against noise of decimetres), nor is truth
recorded in the bag (mode "off").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy.stats import t as student_t

from simconform.adapters.reference import ReferenceBackend
from simconform.adapters.replay.convert import organize
from simconform.adapters.replay.pairing import PairStats, RayGrid, pair_by_direction
from simconform.adapters.replay.state import Sensor
from simconform.bag.cloud import deskew
from simconform.bag.messages import cloud_arrays, stamp_ns
from simconform.errors import UserError
from simconform.spec import ImuSpec, LidarSpec

if TYPE_CHECKING:
    from simconform.adapters.replay.scan import Scan

LIDAR_SCANS = 32  # scans sampled for the lidar's estimate (evenly spread)
IMU_SAMPLES = 4000  # IMU samples at most (evenly spread)
IMU_BLOCKS = 20  # blocks of consecutive IMU samples: the CI's clusters
MIN_BRACKET_NS = 5_000_000
STEP_NS = 500_000  # finite-difference step of the truth's derivative in the offset
MAX_ITER = 6
CONVERGED_NS = 1_000
TRUNCATE = 5.0  # robust sigmas beyond which a lidar residual is left out
CURVE_M = 2e-3  # a ray whose true range bends more than this over +-STEP is not smooth
MAX_RANGE_RATE = 30.0  # m/s: a faster range change is a jump to another surface
LIDAR_METHOD = "lidar range residual of smooth rays (Gauss-Newton, reference ray caster)"
IMU_METHOD = "IMU rates and specific force against the pose-derived ones (least squares)"


def tolerance_ms(s: Any) -> float:
    """Half the spec's latency band: how far a stamp may be from the capture instant."""
    tol = s.tolerances
    return max(tol.latency_rel * s.latency.fixed_ms, tol.latency_abs_ms)


@dataclass
class Alignment:
    """One sensor's offset: estimated (with a CI), fixed by the user, or not estimated."""

    mode: str  # "estimated" | "fixed" | "off" | "not estimated"
    applied_ms: float  # the offset truth was recomputed with
    tolerance_ms: float
    method: str | None = None
    offset_ms: float | None = None
    ci_ms: tuple[float, float] | None = None
    level: float = 0.95
    bracket_ms: tuple[float, float] | None = None
    samples: int = 0
    rays_or_values: int = 0
    rms_before: float | None = None  # residual rms at offset 0 and at the estimate (lidar:
    # m, centred per scan; IMU: in units of the spec's sigmas)
    rms_after: float | None = None
    note: str | None = None

    def as_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


def parse_offsets(values: list[str], sensors: list[str]) -> dict[str | None, float]:
    """--time-offset values: "MS" (every sensor) or "SENSOR=MS"; None keys every sensor."""
    out: dict[str | None, float] = {}
    for v in values:
        name, _, num = v.rpartition("=")
        key = name or None
        if key is not None and key not in sensors:
            raise UserError(
                None, "--time-offset", v, f"expected a mapped sensor ({', '.join(sensors)})"
            )
        try:
            ms = float(num)
        except ValueError:
            ms = float("nan")
        if not np.isfinite(ms) or abs(ms) > 60_000:
            raise UserError(
                None, "--time-offset", v, "expected MS or SENSOR=MS, a number of ms within 60 s"
            )
        out[key] = ms
    return out


def align(job: Scan, mode: str, fixed: dict[str | None, float], level: float = 0.95) -> dict:
    """Estimate (mode "auto") or set (`fixed`) each sensor's offset, store it in
    `Sensor.offset_ns`, plan the captures again on the shifted clocks, and return run.json's
    `replay.alignment` (sensor -> Alignment.as_dict())."""
    out: dict[str, dict] = {}
    recompute = job.truth == "recompute" and job.motion is not None
    if fixed and not recompute:  # it would be recorded as applied while nothing used it
        given = ", ".join(f"{k}={v:g}" if k else f"{v:g}" for k, v in fixed.items())
        raise UserError(
            None,
            "--time-offset",
            given,
            "expected only where truth is recomputed from a pose stream (truth: recompute); "
            "this bag's truth is recorded in it, with its own clock",
        )
    for sn in job.sensors:
        tol = tolerance_ms(sn.s)
        given = fixed.get(sn.name, fixed.get(None))
        if not recompute:
            a = Alignment("off", 0.0, tol, note="truth recorded in the bag: nothing to align")
        elif given is not None:
            a = Alignment("fixed", given, tol, offset_ms=given, ci_ms=(given, given))
            a.note = "offset given by --time-offset, not estimated"
        elif mode == "off":
            a = Alignment("off", 0.0, tol, note="alignment turned off (--no-align)")
        elif isinstance(sn.s, LidarSpec | ImuSpec):
            a = _estimate(job, sn, tol, level)
        else:
            a = Alignment("not estimated", 0.0, tol, note=f"no estimator for {sn.s.type}")
        sn.offset_ns = round(a.applied_ms * 1e6)
        out[sn.name] = a.as_dict()
    if any(sn.offset_ns for sn in job.sensors):
        for sn in job.sensors:
            sn.missing_after = {}
        job._plan_captures()
    return out


def _estimate(job: Scan, sn: Sensor, tol_ms: float, level: float) -> Alignment:
    m = job.motion
    span = m.end_ns - m.start_ns
    half = int(min(max(2 * tol_ms * 1e6, MIN_BRACKET_NS), span / 4))
    lidar = isinstance(sn.s, LidarSpec)
    # captures whose whole window stays inside the motion for every offset of the bracket
    sn.offset_ns = 0
    margin = half + 2 * STEP_NS
    stamps = sorted(
        t for t in sn.kept if sn.window_ok(t - margin, m) and sn.window_ok(t + margin, m)
    )
    need = 3 if lidar else 50
    if len(stamps) < need:
        return Alignment(
            "not estimated",
            0.0,
            tol_ms,
            note=f"fewer than {need} captures inside the ground truth with a "
            f"+-{half / 1e6:g} ms margin",
        )
    backend = ReferenceBackend()
    backend.open(job.world, job.spec)
    if lidar:
        lin, method = _lidar_linear(job, backend, sn, stamps), LIDAR_METHOD
    else:
        lin, method = _imu_linear(job, backend, sn, stamps), IMU_METHOD
    d, first_cost, groups = 0.0, None, []
    for _ in range(MAX_ITER):
        groups = lin(round(d))
        if first_cost is None:  # residual rms at the stamps as given
            n0 = max(1, sum(len(e) for e, _g in groups))
            first_cost = sum(float(e @ e) for e, _g in groups) / n0
        sgg = sum(float(g @ g) for _e, g in groups)
        if sgg == 0 or len(groups) < 2:
            return Alignment(
                "not estimated",
                0.0,
                tol_ms,
                method=method,
                note="the motion does not move the data: nothing tells the offset",
            )
        step = sum(float(g @ e) for e, g in groups) / sgg
        d = float(np.clip(d + step, -half, half))
        if abs(step) < CONVERGED_NS:
            break
    groups = lin(round(d))
    sgg = sum(float(g @ g) for _e, g in groups)
    step = sum(float(g @ e) for e, g in groups) / sgg
    d = float(np.clip(d + step, -half, half))
    # cluster-robust (sandwich) variance over scans / blocks: errors may correlate inside one
    u = [e - g * step for e, g in groups]
    k = len(groups)
    var = sum(float(g @ uu) ** 2 for (_e, g), uu in zip(groups, u)) / sgg**2 * k / (k - 1)
    half_ci = float(student_t.ppf(0.5 + level / 2, k - 1)) * np.sqrt(var)
    resolved = half_ci <= tol_ms * 1e6  # else the estimate is mostly noise: stamps as given
    a = Alignment(
        "estimated",
        round(d) / 1e6 if resolved else 0.0,
        tol_ms,
        method=method,
        offset_ms=round(d) / 1e6,
        ci_ms=((d - half_ci) / 1e6, (d + half_ci) / 1e6),
        level=level,
        bracket_ms=(-half / 1e6, half / 1e6),
        samples=k,
        rays_or_values=int(sum(len(e) for e, _g in groups)),
        rms_before=float(np.sqrt(first_cost)),
        rms_after=float(np.sqrt(sum(float(x @ x) for x in u) / max(1, sum(len(x) for x in u)))),
    )
    notes = []
    if abs(d) >= half:
        notes.append("the estimate is at the edge of the bracket: the offset may be larger")
    if not resolved:
        notes.append(
            f"not compensated: the data do not determine the offset to the tolerance "
            f"(interval +-{half_ci / 1e6:.3g} ms); more rotation and acceleration, or a longer "
            "recording, would"
        )
    a.note = "; ".join(notes) or None
    return a


def _read(job: Scan, sn: Sensor, stamps: set[int]) -> dict[int, Any]:
    """The published messages of `stamps` (a third, partial read of the sensor's topic)."""
    got: dict[int, Any] = {}
    for topic, msgtype, _log, raw in job.src.messages({sn.entry.topic}):
        msg = job._deserialize(topic, msgtype, raw)
        st = stamp_ns(msg.header)
        if st in stamps:
            got[st] = msg
            if len(got) == len(stamps):
                break
    return got


def _lidar_linear(
    job: Scan, backend: ReferenceBackend, sn: Sensor, stamps: list[int]
) -> Callable[[int], list]:
    """Per scan, the range residuals of smooth rays at offset d and their derivative in d.

    A ray is smooth where its true range is nearly linear over d +- STEP (no edge, no jump
    to another surface or out of range): such rays carry the offset as a millimetre shift
    each; the others (edges, grazing) are left out, as are residuals beyond 5 robust sigmas.
    Residuals and derivatives are centred per scan (a range bias does not pull the offset).
    """
    idx = np.unique(np.round(np.linspace(0, len(stamps) - 1, LIDAR_SCANS)).astype(int))
    pick = [stamps[i] for i in idx]
    msgs = _read(job, sn, set(pick))
    clouds = []
    for st in pick:
        f = cloud_arrays(msgs[st])
        clouds.append((st, np.stack([f["x"], f["y"], f["z"]], axis=-1).astype(np.float64)))
    elev = sn.s.rings.elevations()
    h = STEP_NS
    # a cloud whose points are each at their own time (or the spec's column schedule) is
    # judged as the replay judges it (truth.Recompute.capture): every ray cast at its point's
    # time, which the offset does not move; only the pose stream shifts
    own_time = sn.time_mode != "deskewed"
    ray_ns: dict[int, np.ndarray] = {}

    off = sn.s.stamp_offset_ns()

    def truth_at(d: int, st: int) -> Any:
        if own_time:
            return backend.lidar_at(sn.name, st, ray_ns[st], job.motion.shifted(d))
        # deskewed clouds: the sweep from its start, moved into the frame at the stamp
        lt = backend.capture(sn.name, st - off, job.motion.shifted(d))
        cols = lt.ranges.shape[1]
        return dataclasses.replace(lt, points=deskew(lt, 0 if off == 0 else cols - 1))

    def points(d: int, st: int, xyz: np.ndarray) -> tuple[np.ndarray, Any]:
        motion = job.motion.shifted(d)
        if own_time:
            pub = organize(sn, msgs[st], st, None, motion)
            ray_ns[st] = st + np.round(pub.t_offset * 1e9).astype(np.int64)
            return pub.points.reshape(-1, 3), truth_at(d, st)
        lt = truth_at(d, st)
        pts = xyz
        if sn.entry.points_frame == "world":
            pose = motion.pose_at(st).compose(sn.mount)
            pts = pose.inverse().apply(xyz.reshape(-1, 3)).reshape(xyz.shape)
        if sn.entry.pair_by() == "index":
            cloud = pts
        else:
            grid = RayGrid.from_truth(lt.points, lt.directions, elev)
            flat = pts.reshape(-1, 3)
            cloud, _ = pair_by_direction(flat, np.zeros(len(flat)), grid, PairStats("align"))
        return cloud.reshape(-1, 3), lt

    def lin(d: int) -> list:
        raw = []
        for st, xyz in clouds:
            p, lt = points(d, st, xyz)
            tp = truth_at(d + h, st).points.reshape(-1, 3)
            tm = truth_at(d - h, st).points.reshape(-1, 3)
            t0, ray = lt.points.reshape(-1, 3), lt.directions.reshape(-1, 3)
            # along the ray, as the verifier measures range (a rolling shutter moves the
            # ray's origin away from the frame's origin during the sweep)
            e = np.einsum("ij,ij->i", p - t0, ray)
            g = np.einsum("ij,ij->i", tp - tm, ray) / (2 * h)
            bend = np.linalg.norm(tp + tm - 2 * t0, axis=1)
            ok = np.isfinite(e) & np.isfinite(g) & np.isfinite(bend)
            ok[ok] &= (bend[ok] < CURVE_M) & (np.abs(g[ok]) * 1e9 < MAX_RANGE_RATE)
            raw.append((e[ok], g[ok]))
        allr = np.concatenate([e - np.median(e) for e, _g in raw if e.size] or [np.zeros(1)])
        cut = TRUNCATE * max(1.4826 * float(np.median(np.abs(allr))), 1e-6)
        out = []
        for e, g in raw:
            if e.size < 2:
                continue
            keep = np.abs(e - np.median(e)) < cut
            e, g = e[keep], g[keep]
            if e.size >= 2:
                out.append((e - e.mean(), g - g.mean()))
        return out

    return lin


def _imu_linear(
    job: Scan, backend: ReferenceBackend, sn: Sensor, stamps: list[int]
) -> Callable[[int], list]:
    """Per block of consecutive samples, the angular-rate and specific-force residuals
    (measured minus derived from the poses at offset d, in units of the spec's sigma, each
    axis' mean removed so a bias does not pull) and their derivative in d: least squares on
    them is the cross-correlation of measured and pose-derived signals, refined below the
    sample period. The specific force carries the offset through gravity turning with the
    vehicle's roll and pitch (g x rate), often more than the rates do."""
    idx = np.unique(np.round(np.linspace(0, len(stamps) - 1, IMU_SAMPLES)).astype(int))
    pick = np.array([stamps[i] for i in idx], np.int64)
    msgs = _read(job, sn, set(pick.tolist()))
    pick = np.array([t for t in pick.tolist() if t in msgs], np.int64)
    meas = np.array(
        [
            [getattr(msgs[t].angular_velocity, a) for a in "xyz"]
            + [getattr(msgs[t].linear_acceleration, a) for a in "xyz"]
            for t in pick
        ]
    )
    noise = sn.s.noise
    weight = 1 / np.maximum(np.r_[noise.gyro.sigma, noise.accel.sigma], 1e-9)
    blocks = np.array_split(np.arange(len(pick)), IMU_BLOCKS)
    h = STEP_NS

    def truth(d: int) -> np.ndarray:
        got = backend.capture_batch(sn.name, pick, job.motion.shifted(d))
        return np.array([np.r_[t.gyro, t.accel] for t in got])

    def lin(d: int) -> list:
        e = (meas - truth(d)) * weight
        g = (truth(d + h) - truth(d - h)) / (2 * h) * weight
        e, g = e - e.mean(axis=0), g - g.mean(axis=0)
        return [(e[b].ravel(), g[b].ravel()) for b in blocks if len(b)]

    return lin
