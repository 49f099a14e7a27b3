"""`simconform compare RUN_A RUN_B`: the same spec, world, trajectory and seed on two backends.

Two questions, answered separately:

1. Do the engines agree? Engine truth of A against engine truth of B, capture by capture
   (paired by sensor and header.stamp of the /truth topics): lidar per-ray range difference and
   hit agreement, camera PSNR/SSIM and depth, IMU/GNSS/odometry differences. These are computed
   over every ray, pixel and sample recorded, not estimated from a sample, so a verdict compares
   the value itself with its threshold (lidar hit agreement, range bias and p99, camera PSNR);
   the other differences are informational.
2. Does the pipeline behave the same on both engines? Each run's published-minus-own-truth
   errors (the verifier's accumulators, so decoding and error definitions are the verifier's)
   are compared with two-sample tests (KS, Anderson-Darling k-sample; informational) and with an
   equivalence test (TOST) per metric against the spec's tolerances: the (1 - 2 alpha) interval
   of the difference B - A, from a bootstrap that resamples whole captures and applies the same
   resample to both runs (so the strong correlation that a shared seed creates is used, not
   ignored), must lie inside +-tolerance to pass; wholly outside fails; otherwise inconclusive.

With one seed both runs draw identical noise (every capture consumes the same draws whatever it
hits), so published errors differ only where engine truth does; where it does not, part 2
passes trivially and part 1 is the informative one.

"""

from __future__ import annotations

import contextlib
import functools
import itertools
import math
import shutil
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import ValidationError

from simconform.errors import UserError, from_validation
from simconform.explain.camera import (
    EDGE_AGREEMENT_MIN,
    EDGE_CAP_PX,
    EDGE_STEP,
    GazeboCameraModel,
    edge_agreement,
    gazebo_camera,
)
from simconform.spec import CameraSpec, GnssSpec, ImuSpec, LidarSpec, OdomSpec, Spec
from simconform.world import Origin

# scipy.stats, the verifier and rosbags' type store are imported where they are used, so that
# registering this command does not slow down every `simconform` start by about a second.
if TYPE_CHECKING:
    from simconform.verify.metrics import Accumulator

HIT_AGREEMENT_MIN = 0.995
RANGE_TOLERANCE = 0.01  # m
PSNR_MIN = 30.0  # dB
MIN_CAPTURES = 5  # fewer captures with data than this: the bootstrap cannot say anything
BOOTSTRAP = 2000
BOOTSTRAP_SEED = 0x5C0_C0A1
AD_MAX = 5000  # per side, as for the verifier's normality check
KS_MAX = 200_000  # per side
PIXELS_PER_FRAME = 4096  # camera errors kept per frame for the two-sample tests
IDENTITY = (
    "spec_content",
    "world_content",
    "trajectory_sha256",
    "interpolation",
    "seed",
    "start_ns",
    "end_ns",
)
SSIM_SIGMA, SSIM_TRUNCATE, SSIM_K1, SSIM_K2 = 1.5, 3.5, 0.01, 0.03
INFORMATIONAL = "informational"


@dataclass
class CompareConfig:
    run_a: Path
    run_b: Path
    out: Path | None = None
    confidence: float = 0.95
    range_tolerance: float = RANGE_TOLERANCE
    psnr_min: float = PSNR_MIN
    hit_agreement_min: float = HIT_AGREEMENT_MIN
    force: bool = False
    objects: bool = True  # per-object lidar breakdown (needs the world and trajectory files)
    bootstrap: int = BOOTSTRAP


# ---------------------------------------------------------------- small helpers


def _f(v: Any) -> float | None:
    """JSON-safe float: NaN and inf become null (the report says why where it matters)."""
    if v is None:
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def informational(value: Any, unit: str, n: int, **extra: Any) -> dict:
    out = {"measured": _f(value), "unit": unit, "n": int(n), "verdict": "not_applicable"}
    out["reason"] = INFORMATIONAL
    out.update(extra)
    return out


def gated(value: float, band: tuple[float, float], unit: str, n: int, **extra: Any) -> dict:
    """A truth metric with a threshold: the value is exact (every ray/pixel), so no interval."""
    from simconform.verify.stats import verdict as decide

    v = float(value)
    verdict = "inconclusive" if math.isnan(v) else decide((v, v), band)
    out = {"measured": _f(v), "tolerance": [_f(band[0]), _f(band[1])], "unit": unit}
    out.update(n=int(n), verdict=verdict, **extra)
    return out


def skipped(reason: str, unit: str = "") -> dict:
    return {"verdict": "not_applicable", "reason": reason, "unit": unit}


def tost_level(confidence: float) -> float:
    """Two one-sided tests at alpha = 1 - confidence are one (1 - 2 alpha) two-sided interval."""
    return 2.0 * confidence - 1.0


def tost_verdict(ci: tuple[float, float], bound: float) -> str:
    """pass: the interval of the difference lies inside +-bound (equivalent); fail: wholly
    outside (shown different); inconclusive: it straddles a bound, or is NaN."""
    from simconform.verify.stats import verdict

    return verdict(ci, (-bound, bound))


def psnr(a: np.ndarray, b: np.ndarray, data_range: float = 255.0) -> float:
    """Peak signal-to-noise ratio in dB; inf for identical images."""
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return math.inf if mse == 0 else 10.0 * math.log10(data_range**2 / mse)


def ssim(a: np.ndarray, b: np.ndarray, data_range: float = 255.0) -> float:
    """Mean SSIM (Wang et al. 2004) per channel, averaged over channels.

    Gaussian window sigma 1.5 truncated at 3.5 sigma (11 x 11), K1 0.01, K2 0.03, population
    (co)variances; the map's border where the window leaves the image is left out of the mean
    when the image is large enough (as scikit-image does), edges reflected.
    """
    from scipy.ndimage import gaussian_filter

    x = np.asarray(a, dtype=np.float64)
    y = np.asarray(b, dtype=np.float64)
    if x.shape != y.shape:
        raise ValueError(f"images differ in shape: {x.shape} vs {y.shape}")
    if x.ndim == 2:
        x, y = x[..., None], y[..., None]
    c1, c2 = (SSIM_K1 * data_range) ** 2, (SSIM_K2 * data_range) ** 2
    pad = int(SSIM_TRUNCATE * SSIM_SIGMA + 0.5)

    def blur(z: np.ndarray) -> np.ndarray:
        return gaussian_filter(z, SSIM_SIGMA, truncate=SSIM_TRUNCATE, mode="reflect")

    means = []
    for ch in range(x.shape[2]):
        xc, yc = x[..., ch], y[..., ch]
        mx, my = blur(xc), blur(yc)
        sxx = blur(xc * xc) - mx * mx
        syy = blur(yc * yc) - my * my
        sxy = blur(xc * yc) - mx * my
        num = (2 * mx * my + c1) * (2 * sxy + c2)
        den = (mx * mx + my * my + c1) * (sxx + syy + c2)
        m = num / den
        if m.shape[0] > 2 * pad and m.shape[1] > 2 * pad:
            m = m[pad:-pad, pad:-pad]
        means.append(float(m.mean()))
    return float(np.mean(means))


def depth_array(msg) -> np.ndarray:
    """32FC1 depth Image as (h, w) float32 metres."""
    if msg.encoding != "32FC1":
        raise ValueError(f"depth image encoding {msg.encoding!r}; expected 32FC1")
    raw = np.asarray(msg.data, dtype=np.uint8).reshape(msg.height, msg.step)[:, : 4 * msg.width]
    return np.frombuffer(raw.tobytes(), dtype=">f4" if msg.is_bigendian else "<f4").reshape(
        msg.height, msg.width
    )


class Moments:
    """Streaming count, mean, M2 and max |x| (Chan et al. merge), for arrays too big to keep."""

    def __init__(self) -> None:
        self.n, self.mean, self.m2, self.maxabs = 0, 0.0, 0.0, 0.0

    def add(self, x: np.ndarray) -> None:
        x = np.asarray(x, dtype=np.float64).ravel()
        if x.size == 0:
            return
        n, mean = x.size, float(x.mean())
        m2 = float(np.sum((x - mean) ** 2))
        tot = self.n + n
        delta = mean - self.mean
        self.mean += delta * n / tot
        self.m2 += m2 + delta * delta * self.n * n / tot
        self.n = tot
        self.maxabs = max(self.maxabs, float(np.abs(x).max()))

    @property
    def std(self) -> float:
        return math.sqrt(self.m2 / (self.n - 1)) if self.n > 1 else math.nan


# ---------------------------------------------------------------- inputs


def _first_difference(a: Any, b: Any, path: str) -> tuple[str, Any, Any] | None:
    """The first field path where two run.json values differ, with both values."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in list(a) + [k for k in b if k not in a]:
            if key not in a or key not in b:
                return f"{path}.{key}", a.get(key), b.get(key)
            found = _first_difference(a[key], b[key], f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{path} (length)", len(a), len(b)
        for i, (x, y) in enumerate(zip(a, b)):
            found = _first_difference(x, y, f"{path}.{i}")
            if found:
                return found
        return None
    return None if a == b else (path, a, b)


def check_comparable(dir_a: Path, a: dict, dir_b: Path, b: dict) -> None:
    """Refuse two runs unless spec, world, trajectory, seed and time span are the same.

    A replay run (a bag from another simulator) has no seed or trajectory file of ours: it is
    compared with a run of the same world whose spec holds each replayed sensor unchanged,
    over the stamps both recorded.
    """
    if "replay" in (a.get("backend"), b.get("backend")):
        _check_replay_comparable(dir_a, a, dir_b, b)
        return
    for side, d, m in (("a", dir_a, a), ("b", dir_b, b)):
        if m.get("trajectory_sha256") is None or m.get("seed") is None:
            key = "trajectory_sha256" if m.get("trajectory_sha256") is None else "seed"
            raise UserError(
                d / "run.json",
                key,
                None,
                "compare needs runs made by `simconform run` with a known trajectory and seed "
                f"(run {side.upper()} has none; a replayed bag cannot be shown to match)",
            )
    for key in IDENTITY:
        diff = _first_difference(_identity(a, key), _identity(b, key), key)
        if diff is not None:
            where, va, vb = diff
            raise UserError(
                dir_b / "run.json",
                where,
                vb,
                f"expected {_short(va)} as in {dir_a / 'run.json'}: compare needs runs of one "
                "spec, world, trajectory, interpolation, seed and time span (only the backend "
                "may differ)",
            )


def _identity(m: dict, key: str) -> Any:
    """run.json's value of an IDENTITY key; runs from before --interpolation were linear."""
    if key == "interpolation":
        from simconform.trajectory import run_interpolation

        return run_interpolation(m)
    return m.get(key)


def _check_replay_comparable(dir_a: Path, a: dict, dir_b: Path, b: dict) -> None:
    replay_dir, rep, other = (dir_b, b, a) if b.get("backend") == "replay" else (dir_a, a, b)
    diff = _first_difference(other.get("world_content"), rep.get("world_content"), "world_content")
    if diff is not None:
        where, va, vb = diff
        raise UserError(
            replay_dir / "run.json",
            where,
            vb,
            f"expected {_short(va)}: a replay run is compared with a run of the same world",
        )
    theirs = (other.get("spec_content") or {}).get("sensors", {})
    for name, s in ((rep.get("spec_content") or {}).get("sensors") or {}).items():
        diff = _first_difference(theirs.get(name), s, f"spec_content.sensors.{name}")
        if diff is not None:
            where, va, vb = diff
            raise UserError(
                replay_dir / "run.json",
                where,
                vb,
                f"expected {_short(va)}: every "
                "replayed sensor must be configured as in the other run",
            )


def replay_side(a: dict, b: dict) -> int | None:
    """0 or 1 for the replay run of a pair, None when neither is one."""
    if b.get("backend") == "replay":
        return 1
    return 0 if a.get("backend") == "replay" else None


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_out(out: Path, force: bool, runs: tuple[Path, Path]) -> None:
    out_r = out.resolve()
    if any(out_r == r.resolve() for r in runs):
        raise UserError(None, "--out", str(out), "expected a folder other than the runs compared")
    if out.exists() and not out.is_dir():
        raise UserError(None, "--out", str(out), "expected a folder, not a file")
    if out.exists() and any(out.iterdir()):
        if not (out / "compare.json").exists():
            raise UserError(
                None,
                "--out",
                str(out),
                "is not empty and not a comparison; refusing to delete it even with --force",
            )
        if not force:
            raise UserError(
                None,
                "--out",
                str(out),
                "a comparison already exists there; pass --force to replace it",
            )


def _spec_and_origin(run_dir: Path, manifest: dict) -> tuple[Spec, Origin]:
    try:
        spec = Spec.model_validate(manifest["spec_content"])
        origin = Origin.model_validate(manifest["world_content"]["origin"])
    except ValidationError as err:
        raise from_validation(run_dir / "run.json", err) from None
    return spec, origin


def run_info(run_dir: Path, m: dict) -> dict:
    return {
        "path": str(run_dir),
        "backend": m["backend"],
        "seed": m["seed"],
        "complete": bool(m.get("complete", False)),
        "stopped_by": m.get("stopped_by"),
        "spec": m.get("spec"),
        "world": m.get("world"),
        "trajectory": m.get("trajectory"),
        "duration_s": (m["end_ns"] - m["start_ns"]) / 1e9,
        "simconform": m.get("simconform"),
        "git_commit": m.get("git_commit"),
    }


# ---------------------------------------------------------------- truth vs truth


def _truth_parts(spec: Spec) -> dict[str, tuple[str, str]]:
    """truth topic -> (sensor, part) for every truth topic of the spec."""
    out = {}
    for name, s in spec.sensors.items():
        topic = spec.data_topics(name)[1]
        out[topic] = (name, "image" if isinstance(s, CameraSpec) else "main")
        if isinstance(s, CameraSpec) and s.depth:
            out[f"/truth{spec.topic(name)}/depth"] = (name, "depth")
    return out


def _decoder(s, part: str) -> Callable[[Any], Any]:
    """The verifier's decoding of each truth message."""
    from simconform.bag.messages import image_array, odom_pose
    from simconform.verify.metrics import GnssAccumulator, ImuAccumulator, LidarAccumulator

    if isinstance(s, LidarSpec):
        return LidarAccumulator.decode
    if isinstance(s, ImuSpec):
        return ImuAccumulator.decode
    if isinstance(s, GnssSpec):
        return GnssAccumulator.decode
    if isinstance(s, OdomSpec):
        return lambda msg: (lambda o: np.array([o.x, o.y, o.yaw]))(odom_pose(msg))
    if isinstance(s, CameraSpec):
        return depth_array if part == "depth" else image_array
    raise TypeError(type(s).__name__)


def _open_bag(bag: Path):
    from rosbags.highlevel import AnyReader

    from simconform.bag.messages import TYPESTORE

    try:
        reader = AnyReader([bag], default_typestore=TYPESTORE)
        reader.open()
    except Exception as exc:  # rosbags raises several types for unreadable bags
        raise UserError(
            bag, "bag", str(bag), f"expected a readable rosbag2 directory ({exc})"
        ) from None
    return reader


def _truth_stream(
    bag: Path, parts: dict[str, tuple[str, str]], decode: dict, notes: list[str], label: str
) -> Iterator[tuple[int, tuple[str, str, int], Any]]:
    """(log_ns, (sensor, part, stamp), decoded value) of every truth message, in log order."""
    from simconform.bag.messages import stamp_ns

    reader = _open_bag(bag)
    try:
        present = {c.topic for c in reader.connections}
        missing = sorted(set(parts) - present)
        if missing:
            raise UserError(
                bag,
                "topics",
                missing[0],
                f"expected the truth topic in the bag (has: {', '.join(sorted(present))})",
            )
        conns = [c for c in reader.connections if c.topic in parts]
        it = reader.messages(connections=conns)
        while True:
            try:
                conn, log_ns, raw = next(it)
            except StopIteration:
                break
            except Exception as exc:  # cut off mid-write: keep what was readable
                notes.append(f"run {label}: bag cut off ({type(exc).__name__}: {exc})")
                break
            msg = reader.deserialize(raw, conn.msgtype)
            sensor, part = parts[conn.topic]
            key = (sensor, part, stamp_ns(msg.header))
            try:
                value = decode[(sensor, part)](msg)
            except ValueError as exc:
                raise UserError(bag, conn.topic, key[2], str(exc)) from None
            yield log_ns, key, value
    finally:
        reader.close()


def paired_truth(
    bag_a: Path, bag_b: Path, spec: Spec, notes: list[str]
) -> Iterator[tuple[tuple[str, str, int], Any, Any] | tuple[str, dict]]:
    """Merge both truth streams by log time and yield (key, value_a, value_b) for every key
    present in both; at the end yield ("unpaired", {(sensor, part): [only_a, only_b]})."""
    parts = _truth_parts(spec)
    decode = {p: _decoder(spec.sensors[p[0]], p[1]) for p in parts.values()}
    gens = [
        _truth_stream(bag_a, parts, decode, notes, "A"),
        _truth_stream(bag_b, parts, decode, notes, "B"),
    ]
    with contextlib.ExitStack() as stack:
        for g in gens:
            stack.callback(g.close)
        heads = [next(g, None) for g in gens]
        pending: list[dict] = [{}, {}]
        while heads[0] is not None or heads[1] is not None:
            side = (
                0
                if heads[1] is None or (heads[0] is not None and heads[0][0] <= heads[1][0])
                else 1
            )
            _, key, value = heads[side]
            other = pending[1 - side]
            if key in other:
                v_other = other.pop(key)
                yield (key, value, v_other) if side == 0 else (key, v_other, value)
            else:
                pending[side][key] = value
            heads[side] = next(gens[side], None)
    left: dict[tuple[str, str], list[int]] = {}
    for side in (0, 1):
        for sensor, part, _ in pending[side]:
            left.setdefault((sensor, part), [0, 0])[side] += 1
    yield "unpaired", left


class ObjectLabels:
    """Which world object the exact ray of every lidar beam hits (reference geometry), so that
    disagreement can be told per object. Needs the world and trajectory files unchanged."""

    def __init__(self, manifest: dict, spec: Spec, sensor: str) -> None:
        from simconform.explain.inputs import run_inputs
        from simconform.frames import Pose
        from simconform.raycast import Scene

        self.world, self.motion = run_inputs(manifest)
        self.scene = Scene(self.world)
        self.spec: LidarSpec = spec.sensors[sensor]
        s = self.spec
        self.mount = Pose.from_xyz_rpy(s.mount.xyz, s.mount.rpy)
        self.local = s.directions()
        self.names = [o.name or f"object_{i}" for i, o in enumerate(self.world.objects)]
        self.reflect = np.zeros(len(self.world.objects) + 1)

    def labels(self, t_ns: int) -> np.ndarray:
        from simconform.adapters.sweep import lidar_sweep

        got: dict[str, np.ndarray] = {}

        def cast(origins, d_world, max_range):
            rings, cols = d_world.shape[:2]
            o = np.broadcast_to(origins[None, :, :], (rings, cols, 3)).reshape(-1, 3)
            hits = self.scene.cast(o, d_world.reshape(-1, 3), 0.0, max_range)
            got["index"] = hits.index.reshape(rings, cols)
            return (
                hits.dist.reshape(rings, cols),
                hits.normal.reshape(rings, cols, 3),
                got["index"],
            )

        sweep = lidar_sweep(
            self.spec, self.mount, self.local, t_ns, self.motion, cast, self.reflect
        )
        return np.where(np.isfinite(sweep.ranges), got["index"], -1)


class LidarTruthDiff:
    """Per-ray distance between the two engines' points, signed by the nominal ray direction
    (as the verifier's range error), and hit/no-hit agreement, over every paired sweep."""

    def __init__(self, spec: LidarSpec, tol: float, hit_min: float, labels: ObjectLabels | None):
        self.spec, self.tol, self.hit_min, self.labels = spec, tol, hit_min, labels
        self.nominal = spec.directions()
        shape = self.nominal.shape[:2]
        self.diffs: list[np.ndarray] = []
        self.disagree = np.zeros(shape, dtype=np.int64)
        self.captures = self.rays = self.agree = self.only_a = self.only_b = 0
        self.beyond = 0
        self.objects: dict[int, np.ndarray] = {}  # index -> [rays, mismatch, beyond, both, sum d]

    def add(self, t_ns: int, pa: np.ndarray, pb: np.ndarray) -> None:
        from simconform.verify.metrics import along_ray

        if pa.shape != pb.shape or pa.shape[:2] != self.nominal.shape[:2]:
            raise ValueError(
                f"truth cloud shapes {pa.shape[:2]} / {pb.shape[:2]} do not match the spec's "
                f"{self.nominal.shape[:2]} rings x columns"
            )
        fa, fb = np.isfinite(pa[..., 0]), np.isfinite(pb[..., 0])
        both = fa & fb
        delta = pb[both].astype(np.float64) - pa[both].astype(np.float64)
        d = along_ray(delta, self.nominal[both])
        self.diffs.append(d)
        absd = np.zeros(fa.shape)
        absd[both] = np.abs(d)
        far = both & (absd > self.tol)
        mismatch = fa != fb
        self.disagree += mismatch | far
        self.captures += 1
        self.rays += fa.size
        self.agree += int((~mismatch).sum())
        self.only_a += int((fa & ~fb).sum())
        self.only_b += int((fb & ~fa).sum())
        self.beyond += int(far.sum())
        if self.labels is not None:
            idx = self.labels.labels(t_ns)
            dd = np.zeros(fa.shape)
            dd[both] = d
            for i in np.unique(idx):
                m = idx == i
                row = np.array(
                    [m.sum(), (mismatch & m).sum(), (far & m).sum(), (both & m).sum(), dd[m].sum()],
                    dtype=float,
                )
                self.objects[int(i)] = self.objects.get(int(i), np.zeros(5)) + row

    def metrics(self) -> dict[str, dict]:
        if self.captures == 0:
            return {"hit_agreement": skipped("no capture of this sensor in both runs", "1")}
        tol = self.tol
        d = np.concatenate(self.diffs)
        out = {
            "hit_agreement": gated(self.agree / self.rays, (self.hit_min, 1.0), "1", self.rays),
            "hit_only_a": informational(self.only_a / self.rays, "1", self.rays),
            "hit_only_b": informational(self.only_b / self.rays, "1", self.rays),
        }
        if d.size == 0:
            out["range_diff_bias"] = skipped("no ray hit in both runs", "m")
            return out
        a = np.abs(d)
        out["range_diff_bias"] = gated(float(d.mean()), (-tol, tol), "m", d.size)
        out["range_diff_std"] = informational(np.std(d, ddof=1) if d.size > 1 else 0.0, "m", d.size)
        out["range_diff_p99"] = gated(float(np.quantile(a, 0.99)), (0.0, tol), "m", d.size)
        out["range_diff_max"] = informational(a.max(), "m", d.size)
        out["range_beyond_tolerance"] = informational(
            self.beyond / d.size, "1", d.size, tolerance_m=tol
        )
        out["ray_disagreement"] = informational(
            int(self.disagree.sum()) / self.rays, "1", self.rays, tolerance_m=tol
        )
        return out

    def breakdown(self) -> dict:
        if self.labels is None:
            return {}
        rows = {}
        for i, (rays, mismatch, beyond, both, sum_d) in sorted(self.objects.items()):
            name = "(no exact hit)" if i < 0 else self.labels.names[i]
            rows[name] = {
                "rays": int(rays),
                "hit_disagreement": _f(mismatch / rays) if rays else None,
                "range_beyond_tolerance": _f(beyond / both) if both else None,
                "range_diff_mean": _f(sum_d / both) if both else None,
            }
        return rows


class CameraTruthDiff:
    """PSNR/SSIM per frame and z-depth differences. With `gazebo` = (side, model) one side is
    Gazebo's camera, which writes sRGB of ogre2's PBS shading while the other engines write
    linear Lambert: raw PSNR then measures the colour models, so it is informational, and the
    camera is judged by geometry (depth, and edge agreement) and by the PSNR of the Gazebo
    frame against the reference re-rendered in Gazebo's colour model at the same stamp."""

    def __init__(
        self, psnr_min: float, gazebo: tuple[int, GazeboCameraModel | None] | None = None
    ) -> None:
        self.psnr_min = psnr_min
        self.psnr: list[float] = []
        self.ssim: list[float] = []
        self.worst: tuple[float, int, np.ndarray, np.ndarray] | None = None
        self.depth = Moments()
        self.depth_pixels = self.depth_agree = 0
        self.gazebo = gazebo
        self.psnr_model: list[float] = []
        self.edges: list[dict] = []

    def add_image(self, t_ns: int, a: np.ndarray, b: np.ndarray) -> None:
        if a.shape != b.shape:
            raise ValueError(f"truth images differ in shape: {a.shape} vs {b.shape}")
        p = psnr(a, b)
        self.psnr.append(p)
        self.ssim.append(ssim(a, b))
        if self.worst is None or p < self.worst[0]:
            self.worst = (p, t_ns, a, b)
        if self.gazebo is not None:
            side, model = self.gazebo
            gz, other = (a, b) if side == 0 else (b, a)
            if model is not None:
                other = model.image(t_ns)
            else:  # no model: both sides linear, the reference's Lambert as it is
                from simconform.adapters.shading import srgb8_to_linear

                gz = np.floor(srgb8_to_linear(gz) * 255.0 + 0.5)
            self.psnr_model.append(psnr(gz, other))
            self.edges.append(edge_agreement(gz, other))

    def add_depth(self, a: np.ndarray, b: np.ndarray) -> None:
        if a.shape != b.shape:
            raise ValueError(f"truth depth images differ in shape: {a.shape} vs {b.shape}")
        fa, fb = np.isfinite(a), np.isfinite(b)
        both = fa & fb
        self.depth.add(b[both].astype(np.float64) - a[both].astype(np.float64))
        self.depth_pixels += a.size
        self.depth_agree += int((fa == fb).sum())

    def metrics(self) -> dict[str, dict]:
        n = len(self.psnr)
        if n == 0:
            return {"psnr_mean": skipped("no capture of this sensor in both runs", "dB")}
        p = np.array(self.psnr)
        finite = p[np.isfinite(p)]
        identical = int(n - finite.size)
        mean = float(finite.mean()) if finite.size else math.inf
        extra = {"frames": n, "identical_frames": identical}
        out = {
            "psnr_mean": gated(mean, (self.psnr_min, math.inf), "dB", n, **extra),
            "psnr_min": informational(p.min(), "dB", n, **extra),
            "ssim_mean": informational(np.mean(self.ssim), "1", n),
            "ssim_min": informational(np.min(self.ssim), "1", n),
        }
        if self.gazebo is not None:
            out.update(self._gazebo_metrics(mean, n, extra))
        if self.depth_pixels:
            dm = self.depth
            out["depth_finite_agreement"] = informational(
                self.depth_agree / self.depth_pixels, "1", self.depth_pixels
            )
            out["depth_diff_bias"] = informational(dm.mean if dm.n else math.nan, "m", dm.n)
            out["depth_diff_std"] = informational(dm.std, "m", dm.n)
            out["depth_diff_maxabs"] = informational(dm.maxabs if dm.n else math.nan, "m", dm.n)
        return out

    def _gazebo_metrics(self, raw_mean: float, n: int, extra: dict) -> dict[str, dict]:
        modelled = self.gazebo[1] is not None
        against = (
            "the reference re-rendered in Gazebo's colour model (sRGB of ogre2 PBS shading, "
            "adapters/shading.py) at the same stamp"
            if modelled
            else "the other side, after sRGB -> linear on the gazebo side (no colour model: "
            "the world or trajectory file was not found unchanged)"
        )
        pm = np.array(self.psnr_model)
        fin = pm[np.isfinite(pm)]
        total = sum(x["a"] + x["b"] for x in self.edges)
        dice = 2.0 * sum(x["both"] for x in self.edges) / total if total else 1.0
        offset = sum(x["dist_sum"] for x in self.edges) / total if total else 0.0
        edges = (
            f"edge pixels (Sobel magnitude of a luminance step >= {EDGE_STEP:g} grey levels) of "
            f"the Gazebo frame and of {against}"
        )
        return {
            "psnr_mean": informational(
                raw_mean,
                "dB",
                n,
                **extra,
                reason="raw: Gazebo writes sRGB of ogre2 PBS shading, the other linear "
                "Lambert; judged by psnr_model_mean and edge_agreement",
                note=f"raw PSNR of different colour models; psnr_model_mean compares with "
                f"{against}",
            ),
            "psnr_model_mean": gated(
                float(fin.mean()) if fin.size else math.inf,
                (self.psnr_min, math.inf),
                "dB",
                n,
                frames=n,
                identical_frames=int(pm.size - fin.size),
                note=f"PSNR of the Gazebo frame against {against}",
            ),
            "psnr_model_min": informational(pm.min(), "dB", n),
            "edge_agreement": gated(
                dice,
                (EDGE_AGREEMENT_MIN, 1.0),
                "1",
                total,
                note=f"Dice 2|A&B|/(|A|+|B|) of the {edges}: 1 for the same geometry, about "
                "0.5 on edges crossed by a one-pixel shift",
            ),
            "edge_offset_mean": informational(
                offset,
                "px",
                total,
                reason=f"edge pixel to nearest edge, both ways, capped at {EDGE_CAP_PX:g} px",
                note=f"mean distance between the {edges}",
            ),
        }


class VectorTruthDiff:
    """IMU (accel, gyro), GNSS (ENU) and odometry (x, y, yaw) truth, B - A per capture."""

    def __init__(self, spec, origin: Origin) -> None:
        self.spec, self.origin = spec, origin
        self.rows: list[tuple[int, np.ndarray, np.ndarray]] = []

    def add(self, t_ns: int, a: np.ndarray, b: np.ndarray) -> None:
        self.rows.append((t_ns, np.asarray(a, dtype=float), np.asarray(b, dtype=float)))

    def diffs(self) -> tuple[list[tuple[str, str, str]], np.ndarray]:
        """[(quantity, axis, unit)] and the (captures, axes) differences B - A."""
        rows = sorted(self.rows, key=lambda r: r[0])
        a = np.array([r[1] for r in rows])
        b = np.array([r[2] for r in rows])
        s = self.spec
        if isinstance(s, ImuSpec):
            axes = [("accel", x, "m/s^2") for x in "xyz"] + [("gyro", x, "rad/s") for x in "xyz"]
            return axes, b - a
        if isinstance(s, GnssSpec):
            import pymap3d

            o = self.origin

            def enu(v: np.ndarray) -> np.ndarray:
                return np.stack(
                    pymap3d.geodetic2enu(v[:, 0], v[:, 1], v[:, 2], o.lat, o.lon, o.alt), 1
                )

            return [("position", x, "m") for x in "enu"], enu(b) - enu(a)
        d = b - a
        d[:, 2] = (d[:, 2] + np.pi) % (2 * np.pi) - np.pi
        return [("pose", "x", "m"), ("pose", "y", "m"), ("pose", "yaw", "rad")], d

    def metrics(self) -> dict[str, dict]:
        if not self.rows:
            return {"paired_captures": skipped("no capture of this sensor in both runs")}
        axes, d = self.diffs()
        out = {}
        n = len(d)
        for j, (q, axis, unit) in enumerate(axes):
            e = d[:, j]
            out[f"{q}_diff_mean_{axis}"] = informational(e.mean(), unit, n)
            out[f"{q}_diff_std_{axis}"] = informational(
                np.std(e, ddof=1) if n > 1 else 0.0, unit, n
            )
            out[f"{q}_diff_maxabs_{axis}"] = informational(np.abs(e).max(), unit, n)
        return out


def _gazebo_explainer(name: str, s: LidarSpec, manifests: tuple[dict, dict], notes: list):
    """An explainer (simconform/explain/lidar.py) when exactly one side is a gazebo run."""
    from simconform.explain.inputs import gazebo_side

    side = gazebo_side(manifests)
    if side is None:
        return None
    if s.shutter == "rolling":
        notes.append(
            f"{name}: the spec's lidar has a rolling shutter, but Gazebo's gpu_lidar renders a "
            "whole sweep at one instant (global shutter): the raw lidar difference includes up "
            "to one sweep of the vehicle's motion. The engine model casts the reference with "
            "the engine's global shutter."
        )
    from simconform.explain.lidar import GazeboLidarExplainer

    try:
        return GazeboLidarExplainer(manifests[side], s, side)
    except (OSError, UserError, ValueError, KeyError, TypeError) as exc:
        notes.append(f"{name}: the Gazebo lidar model was not applied: {exc}")
        return None


def _explained_metrics(rep: dict) -> dict[str, dict]:
    """The engine model's verdict lines: its agreement is gated at its target; the rest say
    what the model predicted for the raw difference and what it leaves unexplained."""
    if not rep["rays"]:
        return {}
    n = rep["rays"]
    out = {
        "engine_model_agreement": gated(
            rep["within_tolerance_of_model"],
            (rep["model_target"], 1.0),
            "1",
            n,
            tolerance_m=rep["tolerance_m"],
        ),
        "engine_model_anomalies": informational(len(rep["anomalies"]), "1", n),
        "engine_model_unexplained": informational(rep["unexplained_outside_anomalies"] / n, "1", n),
    }
    for key, value in rep["predicted"].items():
        out[f"predicted_{key}"] = informational(value, "1" if "agreement" in key else "m", n)
    return out


def compare_truth(
    cfg: CompareConfig, spec: Spec, origin: Origin, manifests: tuple[dict, dict], notes: list
):
    """Engine truth of A against B: (metrics per sensor, pairing counts, breakdown, artifacts)."""
    diffs: dict[str, Any] = {}
    labels_note = None
    for name, s in spec.sensors.items():
        if isinstance(s, LidarSpec):
            labels = None
            for m in manifests if cfg.objects else ():  # A's input files, else B's
                try:
                    labels = ObjectLabels(m, spec, name)
                    break
                except (OSError, UserError, ValueError, KeyError, TypeError) as exc:
                    labels_note = f"per-object lidar breakdown skipped: {exc}"
            if labels is not None:
                labels_note = None
            diffs[name] = LidarTruthDiff(s, cfg.range_tolerance, cfg.hit_agreement_min, labels)
            diffs[name].explainer = _gazebo_explainer(name, s, manifests, notes)
        elif isinstance(s, CameraSpec):
            diffs[name] = CameraTruthDiff(cfg.psnr_min, gazebo_camera(name, spec, manifests, notes))
        else:
            diffs[name] = VectorTruthDiff(s, origin)
    if labels_note:
        notes.append(labels_note)
    paired: dict[str, int] = {n: 0 for n in spec.sensors}
    unpaired: dict = {}
    for item in paired_truth(Path(cfg.run_a) / "bag", Path(cfg.run_b) / "bag", spec, notes):
        if item[0] == "unpaired":
            unpaired = item[1]
            continue
        (sensor, part, st), va, vb = item
        acc = diffs[sensor]
        try:
            if part == "depth":
                acc.add_depth(va, vb)
                continue
            paired[sensor] += 1
            if isinstance(acc, CameraTruthDiff):
                acc.add_image(st, va, vb)
            else:
                acc.add(st, va, vb)
            explainer = getattr(acc, "explainer", None)
            if explainer is not None:
                explainer.add(st, va, vb)
        except ValueError as exc:
            raise UserError(
                Path(cfg.run_b) / "bag", spec.data_topics(sensor)[1], st, str(exc)
            ) from None
    captures = {}
    for name, s in spec.sensors.items():
        part = "image" if isinstance(s, CameraSpec) else "main"
        only = unpaired.get((name, part), [0, 0])
        captures[name] = {"paired": paired[name], "only_a": only[0], "only_b": only[1]}
        if only[0] or only[1]:
            notes.append(
                f"{name}: {only[0]} truth captures only in A and {only[1]} only in B "
                "(left out of the comparison)"
            )
    truth = {n: d.metrics() for n, d in diffs.items()}
    for n, d in diffs.items():
        if getattr(d, "explainer", None) is not None:
            d.explained = d.explainer.report()  # once: compare.json and the plot read it too
            truth[n].update(_explained_metrics(d.explained))
    breakdown = {n: d.breakdown() for n, d in diffs.items() if isinstance(d, LidarTruthDiff)}
    breakdown = {n: b for n, b in breakdown.items() if b}
    return truth, captures, breakdown, diffs


# ---------------------------------------------------------------- published vs published


@dataclass
class Series:
    """One error field of one run, per capture: sums the paired bootstrap resamples, plus the
    raw values for the two-sample tests. Values are shifted by `shift` (the configured bias or
    latency, common to both runs) before summing, so a large offset costs no digits in the std."""

    kind: str  # "moments" or "proportion"
    keys: np.ndarray  # capture stamps (int64), sorted
    n: np.ndarray
    s1: np.ndarray
    s2: np.ndarray
    values: np.ndarray = field(default_factory=lambda: np.zeros(0))
    shift: float = 0.0

    @staticmethod
    def of_groups(keys, groups: list[np.ndarray], shift: float, values=None) -> Series:
        order = np.argsort(np.asarray(keys, dtype=np.int64), kind="stable")
        keys = np.asarray(keys, dtype=np.int64)[order]
        groups = [np.asarray(groups[i], dtype=np.float64) - shift for i in order]
        n = np.array([g.size for g in groups], dtype=float)
        s1 = np.array([g.sum() for g in groups], dtype=float)
        s2 = np.array([g @ g for g in groups], dtype=float)
        vals = np.concatenate(groups) + shift if values is None and groups else values
        return Series("moments", keys, n, s1, s2, np.zeros(0) if vals is None else vals, shift)

    @staticmethod
    def proportion(keys, k, n) -> Series:
        order = np.argsort(np.asarray(keys, dtype=np.int64), kind="stable")
        k = np.asarray(k, dtype=float)[order]
        return Series(
            "proportion", np.asarray(keys, np.int64)[order], np.asarray(n, float)[order], k, k
        )


def _stat(kind: str, n, s1, s2, shift: float):
    """Mean / std (ddof 1) / proportion from sums; NaN where undefined. Works on arrays."""
    with np.errstate(invalid="ignore", divide="ignore"):
        if kind == "mean":
            return np.where(n > 0, s1 / n, np.nan) + shift
        if kind == "proportion":
            return np.where(n > 0, s1 / n, np.nan)
        var = np.where(n > 1, (s2 - s1 * s1 / n) / (n - 1), np.nan)
        return np.sqrt(np.maximum(var, 0.0))


def paired_bootstrap(
    a: Series, b: Series, kinds: list[str], level: float, n_boot: int, seed: int
) -> dict[str, tuple[float, float, float, tuple[float, float]]]:
    """Per statistic: (value A, value B, difference B - A, percentile interval of the difference
    at `level`) from resampling the union of captures with replacement, the same resample for
    both runs (captures a run has no data for contribute nothing to it)."""
    keys = np.union1d(a.keys, b.keys)
    cols = []
    for s in (a, b):
        idx = np.searchsorted(keys, s.keys)
        arr = np.zeros((3, keys.size))
        arr[0, idx], arr[1, idx], arr[2, idx] = s.n, s.s1, s.s2
        cols.append(arr)
    tot_a, tot_b = cols[0].sum(1), cols[1].sum(1)
    out_point = {
        k: (float(_stat(k, *tot_a, a.shift)), float(_stat(k, *tot_b, b.shift))) for k in kinds
    }
    rng = np.random.default_rng(seed)
    k_n = keys.size
    boot = {k: [] for k in kinds}
    chunk = max(1, min(n_boot, 1_000_000 // max(k_n, 1)))
    done = 0
    while done < n_boot:
        m = min(chunk, n_boot - done)
        idx = rng.integers(0, k_n, size=(m, k_n))
        ra = cols[0][:, idx].sum(axis=2)
        rb = cols[1][:, idx].sum(axis=2)
        for k in kinds:
            boot[k].append(_stat(k, *rb, b.shift) - _stat(k, *ra, a.shift))
        done += m
    alpha = (1.0 - level) / 2.0
    out = {}
    for k in kinds:
        va, vb = out_point[k]
        d = np.concatenate(boot[k])
        d = d[np.isfinite(d)]
        if d.size < n_boot // 2:
            ci = (math.nan, math.nan)
        else:
            lo, hi = np.quantile(d, [alpha, 1.0 - alpha])
            # a skewed bootstrap can leave the point estimate outside: widen, never narrow
            ci = (float(min(lo, vb - va)), float(max(hi, vb - va)))
        out[k] = (va, vb, vb - va, ci)
    return out


def two_sample(a: np.ndarray, b: np.ndarray, seed: int) -> dict:
    """KS and Anderson-Darling k-sample tests of two error samples (seeded subsamples)."""
    import inspect

    from scipy import stats as sps

    out = {"ks_statistic": None, "ks_p": None, "ad_statistic": None, "ad_p": None}
    if a.size < 2 or b.size < 2:
        return out

    def sub(x: np.ndarray, k: int) -> np.ndarray:
        # a fresh generator per sample: equal samples give equal subsamples
        rng = np.random.default_rng(seed)
        return x if x.size <= k else x[np.sort(rng.choice(x.size, k, replace=False))]

    ks = sps.ks_2samp(sub(a, KS_MAX), sub(b, KS_MAX))
    out["ks_statistic"], out["ks_p"] = _f(ks.statistic), _f(ks.pvalue)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # p-values capped to [0.001, 0.25] by scipy's table
        try:
            kw = (
                {"variant": "midrank"}  # scipy >= 1.17 asks for it; the default before
                if "variant" in inspect.signature(sps.anderson_ksamp).parameters
                else {}
            )
            res = sps.anderson_ksamp([sub(a, AD_MAX), sub(b, AD_MAX)], **kw)
        except ValueError:  # a single distinct value in both samples
            return out
    out["ad_statistic"], out["ad_p"] = _f(res.statistic), _f(res.pvalue)
    return out


@functools.cache
def _error_accumulators() -> tuple[type, type]:
    """(lidar, camera) accumulators built on the verifier's; defined on first use so that the
    verifier (and scipy.stats) is imported only when a comparison runs."""
    from simconform.bag.messages import image_array
    from simconform.verify.metrics import Accumulator, LidarAccumulator

    class LidarErrors(LidarAccumulator):
        """The verifier's lidar accumulator, remembering which capture each error came from."""

        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            self.per: list[tuple[int, int, int]] = []  # stamp, lost, finite truth

        def add_pair(self, pair) -> None:
            lost, finite = self.lost, self.finite_truth
            super().add_pair(pair)
            self.per.append((pair.stamp_ns, self.lost - lost, self.finite_truth - finite))

    class CameraErrors(Accumulator):
        """Camera intensity error published - truth per pixel and channel, decoded like the
        verifier's camera accumulator; a fixed subset of pixels per frame for the two-sample
        tests (the same pixels in both runs, drawn from the capture stamp)."""

        decode = staticmethod(image_array)

        def __init__(self, name: str, spec: CameraSpec, level: float, duration_s: float) -> None:
            super().__init__(name, spec, level, duration_s)
            self.stamps: list[int] = []
            self.sums: list[tuple[float, float, float]] = []
            self.values: list[np.ndarray] = []

        def add_pair(self, pair) -> None:
            s: CameraSpec = self.spec
            truth, pub = pair.truth, pair.published
            if truth.shape != pub.shape or truth.shape[:2] != (s.height, s.width):
                raise ValueError(
                    f"image {pub.shape} / truth {truth.shape} does not match the spec's "
                    f"{s.height} x {s.width} x 3"
                )
            e = (pub.astype(np.int16) - truth.astype(np.int16)).ravel().astype(np.float64)
            c = e - s.noise.intensity.bias
            self.stamps.append(pair.stamp_ns)
            self.sums.append((float(e.size), float(c.sum()), float(c @ c)))
            rng = np.random.default_rng([BOOTSTRAP_SEED, pair.stamp_ns])
            k = min(PIXELS_PER_FRAME, e.size)
            self.values.append(e[rng.choice(e.size, k, replace=False)])

        def field_metrics(self) -> dict[str, dict]:
            return {}

    return LidarErrors, CameraErrors


def _published_accumulator(name: str, s, level: float, duration_s: float, origin: Origin):
    from simconform.verify.metrics import make_accumulator

    lidar, camera = _error_accumulators()
    if isinstance(s, LidarSpec):
        return lidar(name, s, level, duration_s)
    if isinstance(s, CameraSpec):
        return camera(name, s, level, duration_s)
    return make_accumulator(name, s, level, duration_s, origin)


def published_series(
    run_dir: Path, spec: Spec, origin: Origin, duration_s: float, level: float
) -> dict[str, dict[str, tuple[Series, dict]]]:
    """Per sensor, per error field: (Series, {sigma, bias, unit}) of one run's published errors."""
    from simconform.verify.pairing import BagSummary, stream_pairs

    accs = {
        n: _published_accumulator(n, s, level, duration_s, origin) for n, s in spec.sensors.items()
    }
    topics = {n: spec.data_topics(n) for n in spec.sensors}
    decode = {n: type(a).decode for n, a in accs.items()}
    for sensor, item in stream_pairs(run_dir / "bag", topics, decode, BagSummary()):
        try:
            accs[sensor].add(item)
        except ValueError as exc:
            raise UserError(
                run_dir / "bag", topics[sensor][0], getattr(item, "stamp_ns", None), str(exc)
            ) from None
    return {n: _series_of(acc) for n, acc in accs.items()}


def _series_of(acc: Accumulator) -> dict[str, tuple[Series, dict]]:
    from simconform.verify.metrics import OdomAccumulator

    lidar_cls, camera_cls = _error_accumulators()
    s = acc.spec
    out: dict[str, tuple[Series, dict]] = {}
    if isinstance(acc, camera_cls):
        n = s.noise.intensity
        if acc.stamps:
            sums = np.array(acc.sums)
            order = np.argsort(np.array(acc.stamps, dtype=np.int64), kind="stable")
            keys = np.array(acc.stamps, dtype=np.int64)[order]
            n_, s1, s2 = sums[order].T
            ser = Series("moments", keys, n_, s1, s2, np.concatenate(acc.values), n.bias)
            out["intensity"] = (ser, {"sigma": n.sigma, "bias": n.bias, "unit": "levels"})
    else:
        acc.field_metrics()  # fills acc.samples with the verifier's error arrays
        fields = {k: v for k, v in acc.samples.items() if not k.startswith("_")}
        if isinstance(acc, lidar_cls):
            keys = [p[0] for p in acc.per]
            for name, f in fields.items():
                out[name] = (Series.of_groups(keys, acc.errors, f["bias"]), f)
            out["point_dropout"] = (
                Series.proportion(keys, [p[1] for p in acc.per], [p[2] for p in acc.per]),
                {"unit": "1"},
            )
        else:
            if isinstance(acc, OdomAccumulator):
                keys = [
                    b
                    for a, b in itertools.pairwise(sorted(acc.truth))
                    if a in acc.pub and b in acc.pub
                ]
            else:
                keys = sorted(r[0] for r in acc.rows)
            for name, f in fields.items():
                e = np.asarray(f["errors"], dtype=float)
                if len(e) != len(keys):
                    raise RuntimeError(f"{acc.name}.{name}: {len(e)} errors for {len(keys)} keys")
                out[name] = (Series.of_groups(keys, [x[None] for x in e], f["bias"], e), f)
    truth = np.asarray(acc.truth_stamps, dtype=np.int64)
    pub = set(acc.pub_stamps)
    out["sample_dropout"] = (
        Series.proportion(truth, [st not in pub for st in acc.truth_stamps], np.ones(truth.size)),
        {"unit": "1"},
    )
    if acc.pub_stamps:
        lat = (np.asarray(acc.log_ns) - np.asarray(acc.pub_stamps)) / 1e6
        ser = Series.of_groups(acc.pub_stamps, [x[None] for x in lat], s.latency.fixed_ms, lat)
        out["latency_ms"] = (ser, {"unit": "ms"})
    return out


def _metric_names(field_name: str) -> tuple[str, str]:
    """verify's names: range -> range_bias, range_std; accel_x -> accel_bias_x, accel_std_x."""
    q, _, axis = field_name.partition("_")
    sfx = f"_{axis}" if axis else ""
    return f"{q}_bias{sfx}", f"{q}_std{sfx}"


def compare_published(
    spec: Spec,
    sa: dict[str, dict[str, tuple[Series, dict]]],
    sb: dict[str, dict[str, tuple[Series, dict]]],
    confidence: float,
    n_boot: int,
) -> dict[str, dict[str, dict]]:
    from simconform.verify import tolerances as tl

    level = tost_level(confidence)
    out: dict[str, dict[str, dict]] = {}
    for sensor, s in spec.sensors.items():
        tol = s.tolerances
        metrics: dict[str, dict] = {}
        fa, fb = sa[sensor], sb[sensor]
        names = list(fa) + [k for k in fb if k not in fa]
        for i, fname in enumerate(names):
            seed = BOOTSTRAP_SEED + 7919 * i
            if fname not in fa or fname not in fb:
                which = "A" if fname not in fa else "B"
                metrics[fname] = skipped(f"run {which} has no samples for {fname}")
                continue
            (ser_a, info), (ser_b, _) = fa[fname], fb[fname]
            unit = info["unit"]
            if fname in ("sample_dropout", "point_dropout"):
                plan = [(fname, "proportion", tol.dropout_abs)]
            elif fname == "latency_ms":
                half = tl.latency_band(s.latency.fixed_ms, tol)[1] - s.latency.fixed_ms
                plan = [(fname, "mean", half)]
            else:
                sigma, bias = info["sigma"], info["bias"]
                bias_half = tl.bias_band(bias, sigma, tol)[1] - bias
                std_half = max(sigma * tol.sigma_rel, 1e-12 * max(1.0, sigma))
                mb, ms = _metric_names(fname)
                plan = [(mb, "mean", bias_half), (ms, "std", std_half)]
            common = np.intersect1d(ser_a.keys, ser_b.keys).size
            union = np.union1d(ser_a.keys, ser_b.keys).size
            if union < MIN_CAPTURES:
                for mname, _, _ in plan:
                    m = skipped(f"fewer than {MIN_CAPTURES} captures with samples", unit)
                    m["verdict"] = "inconclusive"
                    metrics[mname] = m
                continue
            res = paired_bootstrap(ser_a, ser_b, [k for _, k, _ in plan], level, n_boot, seed)
            tests = (
                two_sample(ser_a.values, ser_b.values, seed)
                if ser_a.kind == "moments"
                else dict.fromkeys(("ks_statistic", "ks_p", "ad_statistic", "ad_p"))
            )
            for mname, kind, bound in plan:
                va, vb, diff, ci = res[kind]
                metrics[mname] = {
                    "measured_a": _f(va),
                    "measured_b": _f(vb),
                    "difference": _f(diff),
                    "ci": [_f(ci[0]), _f(ci[1])],
                    "tolerance": [_f(-bound), _f(bound)],
                    "verdict": tost_verdict(ci, bound),
                    **tests,
                    "n_a": int(ser_a.n.sum()),
                    "n_b": int(ser_b.n.sum()),
                    "captures": int(union),
                    "captures_in_both": int(common),
                    "level": level,
                    "unit": unit,
                }
        out[sensor] = metrics
    return out


# ---------------------------------------------------------------- driver


@dataclass
class Comparison:
    report: dict
    truth_diffs: dict = field(default_factory=dict)
    samples: dict = field(default_factory=dict)  # sensor -> field -> (values a, values b, unit)


def overall(sections: list[dict]) -> str:
    from simconform.verify.verifier import VERDICT_ORDER

    verdicts = {
        m["verdict"] for sec in sections for sensor in sec.values() for m in sensor.values()
    }
    for v in VERDICT_ORDER:
        if v in verdicts:
            return v
    return "not_applicable"


def validate_config(cfg: CompareConfig) -> None:
    if not 0.5 < cfg.confidence < 1:
        raise UserError(None, "--confidence", cfg.confidence, "expected a level in (0.5, 1)")
    if not (cfg.range_tolerance > 0 and math.isfinite(cfg.range_tolerance)):
        raise UserError(None, "--range-tolerance", cfg.range_tolerance, "expected metres > 0")
    if not math.isfinite(cfg.psnr_min):
        raise UserError(None, "--psnr-min", cfg.psnr_min, "expected a finite number of dB")
    if not 0 <= cfg.hit_agreement_min <= 1:
        raise UserError(None, "hit_agreement_min", cfg.hit_agreement_min, "expected [0, 1]")


def compare_runs(cfg: CompareConfig) -> Comparison:
    """Everything but writing: validate, refuse incomparable runs, compute both parts."""
    from simconform.verify.verifier import load_manifest

    validate_config(cfg)
    dir_a, dir_b = Path(cfg.run_a), Path(cfg.run_b)
    ma, mb = load_manifest(dir_a), load_manifest(dir_b)
    check_comparable(dir_a, ma, dir_b, mb)
    if cfg.out is not None:
        _check_out(Path(cfg.out), cfg.force, (dir_a, dir_b))
    side = replay_side(ma, mb)  # a replay run holds only its mapped sensors: use its spec
    spec, origin = _spec_and_origin(*((dir_b, mb) if side == 1 else (dir_a, ma)))
    notes: list[str] = []
    same_dir = dir_a.resolve() == dir_b.resolve()
    if same_dir:
        notes.append("RUN_A and RUN_B are the same folder: every difference is zero by design")
    notes.append(
        "Both runs use the same seed, so they drew identical noise streams (every capture "
        "consumes the same draws whatever it hits): published errors differ only where engine "
        "truth differs, and where it does not the two-sample tests and equivalence checks pass "
        "trivially. The truth-vs-truth section is the informative one."
    )
    noise = (ma.get("noise", "pipeline"), mb.get("noise", "pipeline"))
    if noise[0] != noise[1]:
        notes.append(
            f"run A's noise came from the {noise[0]}, run B's from the {noise[1]} "
            "(`--noise`): engine truth is noiseless in both and compares as usual, but the "
            "published errors compare two different noise generators, not one pipeline on two "
            "engines"
        )
    for side, m in (("A", ma), ("B", mb)):
        if not m.get("complete", False):
            notes.append(f"run {side} is incomplete; compared over the captures both recorded")
    truth, captures, breakdown, diffs = compare_truth(cfg, spec, origin, (ma, mb), notes)
    span = mb if side == 1 else ma
    duration_s = (span["end_ns"] - span["start_ns"]) / 1e9
    level = tost_level(cfg.confidence)
    series_a = published_series(dir_a, spec, origin, duration_s, level)
    series_b = series_a if same_dir else published_series(dir_b, spec, origin, duration_s, level)
    published = compare_published(spec, series_a, series_b, cfg.confidence, cfg.bootstrap)
    samples = {
        n: {
            f: (series_a[n][f][0].values, series_b[n][f][0].values, series_a[n][f][1]["unit"])
            for f in series_a[n]
            if f in series_b[n] and series_a[n][f][0].kind == "moments"
        }
        for n in spec.sensors
    }
    report = {
        "runs": {"a": run_info(dir_a, ma), "b": run_info(dir_b, mb)},
        "confidence": cfg.confidence,
        "tost_level": level,
        "thresholds": {
            "range_tolerance_m": cfg.range_tolerance,
            "hit_agreement_min": cfg.hit_agreement_min,
            "psnr_min_db": cfg.psnr_min,
        },
        "captures": captures,
        "truth": truth,
        "published": published,
        "breakdown": breakdown,
        "explained": {n: d.explained for n, d in diffs.items() if hasattr(d, "explained")},
        "notes": notes,
        "verdict": overall([truth, published]),
    }
    return Comparison(report, diffs, samples)


def compare(cfg: CompareConfig, write: bool = True) -> dict:
    """Compare two runs and (with cfg.out) write compare.md, compare.json, junit.xml, plots."""
    res = compare_runs(cfg)
    if write and cfg.out is not None:
        from simconform.compare_report import write_compare

        out = Path(cfg.out)
        _check_out(out, cfg.force, (Path(cfg.run_a), Path(cfg.run_b)))
        if out.exists():
            shutil.rmtree(out)
        write_compare(out, res)
    return res.report
