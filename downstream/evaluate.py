"""Odometry against truth with evo: APE (origin-aligned) and KITTI-style RPE per distance.

The estimate is placed in the map frame by the true pose of its first sweep (evo's
`align_origin`), never fitted to the truth: a least-squares alignment (Umeyama) would hide part
of the drift a sign-off has to see. RPE is evo's over every pair of poses `segment_m` of path
apart (all_pairs), reported as translation % and rotation deg per 100 m, as KITTI does (KITTI
averages segments of 100-800 m; a run shorter than two segments uses half its path length,
and says so). The pairs are chosen by the *reference's* path length (pairs_from_reference),
as KITTI's ground-truth distances are and as `segment_m` is: by the estimate's, an odometry
that under-tracks would be judged over longer true segments than the divisor, or not at all.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from evo.core import filters, metrics
from evo.core.trajectory import PoseTrajectory3D

from simconform.frames import Pose


def _trajectory(poses: Pose, t_ns: np.ndarray) -> PoseTrajectory3D:
    xyzw = poses.rot.as_quat()
    return PoseTrajectory3D(
        positions_xyz=np.asarray(poses.t, dtype=np.float64),
        orientations_quat_wxyz=np.roll(xyzw, 1, axis=1),
        timestamps=t_ns.astype(np.float64) / 1e9,
    )


@dataclass
class Evaluation:
    ape_rmse_m: float
    ape_max_m: float
    ape_m: np.ndarray  # per pose
    rpe_trans_pct: float | None
    rpe_rot_deg_per_100m: float | None
    path_length_m: float
    segment_m: float | None


def evaluate(est: Pose, truth: Pose, t_ns: np.ndarray, segment_m: float = 100.0) -> Evaluation:
    """`est` (odometry poses in its own first-pose frame) against `truth` at the same instants."""
    ref = _trajectory(truth, t_ns)
    est_traj = _trajectory(est, t_ns)
    est_traj.align_origin(ref)
    ape = metrics.APE(metrics.PoseRelation.translation_part)
    ape.process_data((ref, est_traj))
    path = float(ref.path_length)
    seg = segment_m if path >= 2 * segment_m else path / 2
    rpe_t = rpe_r = None
    if seg > 0 and len(t_ns) >= 3:
        try:
            rpe_t = _rpe(ref, est_traj, metrics.PoseRelation.translation_part, seg) / seg * 100
            rpe_r = _rpe(ref, est_traj, metrics.PoseRelation.rotation_angle_deg, seg) / seg * 100
        except (metrics.MetricsException, filters.FilterException):  # no pair that far apart
            rpe_t = rpe_r = None
    return Evaluation(
        ape_rmse_m=float(ape.get_statistic(metrics.StatisticsType.rmse)),
        ape_max_m=float(ape.get_statistic(metrics.StatisticsType.max)),
        ape_m=np.asarray(ape.error, dtype=np.float64),
        rpe_trans_pct=rpe_t,
        rpe_rot_deg_per_100m=rpe_r,
        path_length_m=path,
        segment_m=seg if rpe_t is not None else None,
    )


def _rpe(ref, est, relation, seg: float) -> float:
    rpe = metrics.RPE(
        relation,
        delta=seg,
        delta_unit=metrics.Unit.meters,
        all_pairs=True,
        pairs_from_reference=True,
    )
    rpe.process_data((ref, est))
    return float(rpe.get_statistic(metrics.StatisticsType.mean))
