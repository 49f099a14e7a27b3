"""`simconform localize`: lidar odometry on a run's published clouds, judged against its truth.

It answers a sign-off question per-sensor statistics cannot: does this sensor model, with its
declared noise, keep localization within what the spec may declare (`localization:
ape_rmse_m`, optionally `rpe_trans_pct`)? One run gives one number, so its verdict is a plain
comparison (pass | fail, not_applicable where the spec declares no tolerance: the verdicts of
verify's report); a campaign over seeds gives the spread (docs/localization.md). The run is
refused while it records and checked as verify checks it (downstream/runcheck.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from simconform.bag.reader import SourceBag
from simconform.downstream.odometry import LidarOdometry
from simconform.downstream.runcheck import check_integrity, load_run, read_error, record
from simconform.downstream.sweeps import TruePoses, sweeps
from simconform.errors import UserError
from simconform.frames import Pose
from simconform.spec import LidarSpec, Spec


@dataclass
class LocalizeConfig:
    run_dir: Path
    out: Path | None = None
    sensor: str | None = None
    odometry: str = "kiss-icp"
    deskew: bool = True
    segment_m: float = 100.0
    force: bool = False
    write: bool = True  # into `out`, or RUN/localization/ when out is None
    reverify: bool = True  # after writing into RUN/localization/, rewrite RUN/report/


def pick_lidar(spec: Spec, name: str | None, run_dir: Path) -> str:
    """The run's lidar: `name`, or its only one; a UserError naming --sensor otherwise."""
    lidars = [n for n, s in spec.sensors.items() if isinstance(s, LidarSpec)]
    if name is None:
        if not lidars:  # the run's sensors, not an option, are what is missing
            have = ", ".join(spec.sensors)
            raise UserError(run_dir, "sensors", have, "expected a run with a lidar")
        if len(lidars) > 1:
            raise UserError(run_dir, "--sensor", None, "pass one of " + ", ".join(lidars))
        return lidars[0]
    if name not in lidars:
        raise UserError(run_dir, "--sensor", name, f"expected a lidar: {', '.join(lidars)}")
    return name


def _odometry(cfg: LocalizeConfig, s: LidarSpec) -> LidarOdometry:
    from simconform.registry import ODOMETRY

    ODOMETRY.check(cfg.odometry)
    try:
        import evo  # noqa: F401  (evaluate() needs it; say so before the odometry runs)

        return ODOMETRY.load(cfg.odometry)(s.range.min, s.range.max, cfg.deskew)
    except ImportError as exc:
        why = f"it needs {exc.name}: pip install 'simconform[localize]'"
        raise UserError(None, "--odometry", cfg.odometry, why) from None


def localize(cfg: LocalizeConfig) -> dict:
    """Run the odometry on the run's lidar, evaluate it, and write the result (cfg.write)."""
    run_dir = Path(cfg.run_dir)
    manifest = load_run(run_dir)
    spec = Spec.model_validate(manifest["spec_content"])
    name = pick_lidar(spec, cfg.sensor, run_dir)
    s = spec.sensors[name]
    assert isinstance(s, LidarSpec)
    found = check_integrity(run_dir, manifest)
    if cfg.write:  # refused before the odometry runs (minutes), and again under the lock
        from simconform.downstream.write import IN_RUN
        from simconform.outdir import check_into, check_target

        if cfg.out is None:
            check_into(run_dir, IN_RUN)
        else:
            check_target(Path(cfg.out), "localize", cfg.force)
    try:
        truth = TruePoses(run_dir / "gt" / f"{spec.base_frame}.tum", Pose.from_xyz_rpy(*_mount(s)))
        odo = _odometry(cfg, s)
        poses, instants, timed, stopped = _track(odo, truth, run_dir, spec.topic(name))
    except OSError as exc:  # a run file the user cannot read: before anything is written
        raise read_error(exc) or exc from None
    if len(poses) < 2:
        raise UserError(run_dir, name, f"{len(poses)} sweeps", "expected a run of 2 or more")
    t = np.array(instants, dtype=np.int64)
    arr = np.array(poses)
    from scipy.spatial.transform import Rotation

    est = Pose(arr[:, :3, 3], Rotation.from_matrix(arr[:, :3, :3]))
    from simconform.downstream.evaluate import evaluate

    ev = evaluate(est, truth.at(t), t, cfg.segment_m)
    report = _report(cfg, spec, name, ev, len(poses), timed, manifest)
    report["integrity"] = record(found, stopped)
    if cfg.write:
        from simconform.downstream.write import write_localization

        out = None if cfg.out is None else Path(cfg.out)
        where = write_localization(out, run_dir, cfg.force, report, ev, est, truth.at(t), t)
        report["written_to"] = str(where)
        if out is None and cfg.reverify:  # the run's report shows it (campaign cells verify next)
            from simconform.verify.verifier import verify_run

            verify_run(run_dir, _confidence(run_dir))
    return report


def _track(odo: LidarOdometry, truth: TruePoses, run_dir: Path, topic: str):
    """(poses, instants, sweeps with per-point time, why the bag's reading stopped early) of
    every sweep the truth covers."""
    poses, instants, timed = [], [], 0
    bag = SourceBag(run_dir / "bag")
    try:
        for sweep in sweeps(bag, topic):
            if len(sweep.points) == 0:
                continue
            pose, at = odo.register(sweep)
            if not truth.covers(at):
                continue  # a sweep finishing after the recorded truth cannot be judged
            poses.append(pose)
            instants.append(at)
            timed += sweep.times_ns is not None
        return poses, instants, timed, bag.stop_reason
    finally:
        bag.close()


def _confidence(run_dir: Path) -> float:
    """The level the run's report was made at (0.95 when it has none)."""
    import json

    try:
        return float(json.loads((run_dir / "report" / "report.json").read_text())["confidence"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0.95


def _mount(s: LidarSpec) -> tuple:
    return s.mount.xyz, s.mount.rpy


def _report(cfg, spec: Spec, name: str, ev, n: int, timed: int, manifest) -> dict:
    tol = spec.localization
    checks = {}
    if tol is not None:
        checks["ape_rmse_m"] = {"value": ev.ape_rmse_m, "max": tol.ape_rmse_m}
        if tol.rpe_trans_pct is not None:
            checks["rpe_trans_pct"] = {"value": ev.rpe_trans_pct, "max": tol.rpe_trans_pct}
    for c in checks.values():
        c["verdict"] = "pass" if c["value"] is not None and c["value"] <= c["max"] else "fail"
    verdict = (
        "not_applicable"  # the spec declares no `localization:` tolerance
        if not checks
        else ("fail" if any(c["verdict"] == "fail" for c in checks.values()) else "pass")
    )
    return {
        "run": str(cfg.run_dir),
        "backend": manifest.get("backend"),
        "seed": manifest.get("seed"),
        "sensor": name,
        "topic": spec.topic(name),
        "odometry": cfg.odometry,
        "deskew": bool(cfg.deskew and timed),
        "pose_instant": "each sweep's last point" if cfg.deskew and timed else "the cloud stamp",
        "sweeps": n,
        "sweeps_with_point_time": timed,
        "ape_rmse_m": ev.ape_rmse_m,
        "ape_max_m": ev.ape_max_m,
        "rpe_trans_pct": ev.rpe_trans_pct,
        "rpe_rot_deg_per_100m": ev.rpe_rot_deg_per_100m,
        "rpe_segment_m": ev.segment_m,
        "path_length_m": ev.path_length_m,
        "drift_pct": 100 * ev.ape_rmse_m / ev.path_length_m if ev.path_length_m else None,
        "tolerances": checks,
        "verdict": verdict,
    }
