"""Lidar truth of A against B: per-ray range difference along the nominal ray and hit/no-hit
agreement, broken down by the world object each ray hits; when one side is a gazebo run, the
verdict lines of its explanation (explain/lidar.py)."""

from __future__ import annotations

import numpy as np

from simconform.errors import UserError
from simconform.spec import LidarSpec, Spec
from simconform.verify.compare.verdicts import gated, informational, json_float, skipped


class ObjectLabels:
    """Which world object the exact ray of every lidar beam hits (reference geometry), so that
    disagreement can be told per object. Needs the world and trajectory files unchanged."""

    def __init__(self, manifest: dict, spec: Spec, sensor: str) -> None:
        from simconform.actors import MovingScene
        from simconform.frames import Pose
        from simconform.verify.compare.explain.inputs import run_inputs

        self.world, self.motion = run_inputs(manifest)
        self.scene = MovingScene(self.world, self.motion.start_ns)
        self.spec: LidarSpec = spec.sensors[sensor]
        s = self.spec
        self.mount = Pose.from_xyz_rpy(s.mount.xyz, s.mount.rpy)
        self.local = s.directions()
        self.names = self.scene.names  # world objects, then actors
        self.reflect = np.zeros(len(self.names) + 1)

    def labels(self, t_ns: int) -> np.ndarray:
        from simconform.adapters.sweep import lidar_sweep

        got: dict[str, np.ndarray] = {}

        def cast(origins, d_world, max_range, times):
            rings, cols = d_world.shape[:2]
            o = np.broadcast_to(origins[None, :, :], (rings, cols, 3)).reshape(-1, 3)
            t = np.broadcast_to(times[None, :], (rings, cols)).reshape(-1)
            hits = self.scene.cast(o, d_world.reshape(-1, 3), 0.0, max_range, t)
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
                "hit_disagreement": json_float(mismatch / rays) if rays else None,
                "range_beyond_tolerance": json_float(beyond / both) if both else None,
                "range_diff_mean": json_float(sum_d / both) if both else None,
            }
        return rows


def gazebo_explainer(name: str, s: LidarSpec, manifests: tuple[dict, dict], notes: list):
    """An explainer (verify/compare/explain/lidar.py) when exactly one side is a gazebo run."""
    from simconform.verify.compare.explain.inputs import gazebo_side

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
    from simconform.verify.compare.explain.lidar import GazeboLidarExplainer

    try:
        return GazeboLidarExplainer(manifests[side], s, side)
    except (OSError, UserError, ValueError, KeyError, TypeError) as exc:
        notes.append(f"{name}: the Gazebo lidar model was not applied: {exc}")
        return None


def explained_metrics(rep: dict) -> dict[str, dict]:
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
