"""Verify a recorded run: read run.json and the bag, compute metrics, write DIR/report/.

Before any metric, verify/integrity.py checks what can be trusted (the files against run.json's
SHA-256, the bag's chunks against their CRCs, the span that was recorded); samples in a gap
are left out, and the report says what its verdict covers (`run.integrity.scope`).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError
from threadpoolctl import threadpool_limits

from simconform.errors import UserError, from_validation
from simconform.outdir import check_into
from simconform.spec import Spec
from simconform.verify import stats
from simconform.verify.accumulator import metric, not_applicable
from simconform.verify.diagnosis import diagnose_all
from simconform.verify.family import apply_holm
from simconform.verify.integrity import run_state
from simconform.verify.pairing import Pair
from simconform.verify.parallel import read_parallel
from simconform.verify.shortfall import annotate
from simconform.verify.summary import complete_report
from simconform.world import Origin

VERDICT_ORDER = ("fail", "inconclusive", "pass")
_NOT_JUDGED = {
    "verdict": "not_applicable",
    "reason": "the bag is damaged where no checksum can locate it: nothing in it is judged",
    "unit": "",
}


def load_manifest(run_dir: Path) -> dict:
    path = run_dir / "run.json"
    if not path.is_file():
        raise UserError(
            run_dir,
            "run.json",
            str(path),
            "expected a simconform run folder (made by `simconform run`) with run.json and bag/",
        )
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise UserError(path, f"line {exc.lineno}", exc.msg, "expected valid JSON") from None
    if not isinstance(data, dict):
        raise UserError(path, "(top level)", type(data).__name__, "expected a JSON object")
    for key in ("spec_content", "world_content", "start_ns", "end_ns", "backend", "seed"):
        if key not in data:
            raise UserError(path, key, None, "expected the key written by `simconform run`")
    try:  # the types every reader relies on: a hand-edited run.json gets one message
        _Manifest.model_validate(data)
    except ValidationError as err:
        raise from_validation(path, err) from None
    return data


class _Manifest(BaseModel):
    """The fields of run.json that verify, compare, export and localize read, with their
    types (the content of the spec and world is validated by their own models)."""

    model_config = ConfigDict(extra="allow", strict=True)

    spec_content: dict
    world_content: dict
    start_ns: int
    end_ns: int
    backend: str
    seed: int | None
    complete: bool = False
    state: str | None = None
    recorded_end_ns: int | None = None
    captures: dict[str, int] | None = None
    published: dict[str, int] | None = None
    outputs: dict[str, dict] | None = None


def verify_run(
    run_dir: Path,
    level: float = 0.95,
    write: bool = True,
    progress: bool | None = False,
    jobs: int | None = None,
) -> dict:
    """Judge a run folder and (write) its report/; `progress` as in simconform/progress.py
    (None: a bar on a terminal, lines elsewhere; False: silent). `jobs`: at most that many
    worker processes read the bag (0: none, and the figures are drawn here too; None: as many
    as help; verify/parallel.py). BLAS on one thread, as in simconform.run.run."""
    with threadpool_limits(limits=1, user_api="blas"):
        return _verify(Path(run_dir), level, write, progress, jobs)


def _verify(
    run_dir: Path, level: float, write: bool, progress: bool | None, jobs: int | None
) -> dict:
    t0 = time.monotonic()
    run_dir = Path(run_dir)
    if not 0.5 <= level < 1:
        raise UserError(None, "--confidence", level, "expected a level in [0.5, 1)")
    manifest = load_manifest(run_dir)
    if write and run_state(manifest) == "recording":
        _not_being_written(run_dir)
    if write:  # refused before the bag is read, and again under the lock (Claim.adopt)
        check_into(run_dir, "report")
    try:
        spec = Spec.model_validate(manifest["spec_content"])
        origin = Origin.model_validate(manifest["world_content"]["origin"])
    except ValidationError as err:
        raise from_validation(run_dir / "run.json", err) from None
    found, accs, summary = read_parallel(
        run_dir, manifest, spec, origin, level, progress, _import_pyplot if write else None, jobs
    )
    start = int(manifest["start_ns"])
    end = found.span_end_ns if found.span_end_ns is not None else int(manifest["end_ns"])
    duration_s = max(end - start, 0) / 1e9
    found.excluded = {k: v for k, v in summary.excluded.items() if v}
    if found.state in ("interrupted", "failed") and found.span_end_ns is None:
        last = max(
            (start if a.last_truth_ns is None else a.last_truth_ns for a in accs.values()),
            default=start,
        )
        duration_s = (last - start) / 1e9  # a run from before recorded_end_ns: its last capture
    sensors = {}
    for name, acc in accs.items():
        acc.duration_s = duration_s
        metrics = acc.metrics() if not found.nothing_judged else {"not_judged": _NOT_JUDGED}
        sensors[name] = {
            "type": spec.sensors[name].type,
            "topic": spec.data_topics(name)[0],
            "captures": acc.captures,
            "published": acc.published,
            "metrics": metrics,
        }
        if not found.nothing_judged:
            sensors[name].update(acc.details())
        if found.excluded.get(name):
            sensors[name]["excluded"] = found.excluded[name]
    _engine_noise_flips(sensors, manifest)
    _time_offset_metrics(sensors, manifest)  # in the family: a FAIL there stays a FAIL
    family = (
        apply_holm(sensors, {n: a.refits for n, a in accs.items()}, level)
        if not found.nothing_judged
        else None
    )
    _engine_noise_notes(sensors, manifest)
    if not found.nothing_judged:  # how much longer each INCONCLUSIVE would need
        annotate(sensors, spec, level, duration_s, _returns_per_sweep(accs))
    diagnose_all(sensors)
    report = {
        "run": {
            "backend": manifest["backend"],
            "seed": manifest["seed"],
            "noise": manifest.get("noise", "pipeline"),
            "complete": bool(manifest.get("complete", False))
            and summary.truncated is None
            and found.scope == "whole run",
            "stopped_by": manifest.get("stopped_by"),
            "state": found.state,
            "interrupted": found.interrupted,
            "integrity": found.as_dict(),
            "incomplete_reason": manifest.get("incomplete_reason"),
            "bag_truncated": summary.truncated,
            "spec": manifest.get("spec"),
            "world": manifest.get("world"),
            "trajectory": manifest.get("trajectory"),
            "duration_s": duration_s,
            "planned_duration_s": (manifest["end_ns"] - manifest["start_ns"]) / 1e9,
            "simconform": manifest.get("simconform"),
            "git_commit": manifest.get("git_commit"),
            "provenance": (manifest.get("replay") or {}).get("provenance"),
        },
        "confidence": level,
        "family": family,
        "sensors": sensors,
        "verdict": overall(sensors),
    }
    _localization(run_dir, report)
    complete_report(report, manifest, time.monotonic() - t0)
    if write:
        from simconform.outdir import io_error, update
        from simconform.verify.report_render import write_reports

        with update(run_dir, "run") as out:  # a run still being recorded holds the lock
            # declared file by file: a user's own files in report/ never become ours
            try:
                with out.staged(last="report.json", into="report", replace=False) as staged:
                    samples = {n: a.samples for n, a in accs.items()}
                    fork = False if jobs == 0 else None  # --jobs 0: no process beside this one
                    write_reports(staged, report, samples, fork)
            except OSError as exc:
                raise io_error(run_dir, exc, " (the report)") or exc from None
    return report


def _import_pyplot() -> None:
    from simconform.verify.plots import _plt

    _plt()


def _localization(run_dir: Path, report: dict) -> None:
    """RUN/localization/ (simconform localize): its summary joins the report, and a FAIL of
    the spec's `localization:` tolerance fails the run."""
    import json

    path = run_dir / "localization" / "localization.json"
    try:
        loc = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    keys = ("odometry", "topic", "ape_rmse_m", "rpe_trans_pct", "rpe_segment_m", "path_length_m")
    report["localization"] = {k: loc.get(k) for k in (*keys, "drift_pct", "verdict")}
    verdict = _OLD_VERDICTS.get(loc.get("verdict"), loc.get("verdict"))  # files before 12-07
    report["localization"]["verdict"] = verdict
    if verdict == "fail":
        report["verdict"] = "fail"


_OLD_VERDICTS = {"PASS": "pass", "FAIL": "fail", "NOT DECLARED": "not_applicable"}


def _returns_per_sweep(accs: dict) -> dict[str, float]:
    """Each lidar's true returns per published sweep in this run (the plan counts on it)."""
    return {
        n: a.finite_truth / a.published
        for n, a in accs.items()
        if hasattr(a, "finite_truth") and a.published
    }


def _not_being_written(run_dir: Path) -> None:
    """A run still recording holds its folder's lock: refuse at once, naming the writer, rather
    than judge a bag that is still growing (or find no complete chunk in it yet)."""
    from simconform.outdir import update

    with update(run_dir, "run"):
        pass


def _time_offset_metrics(sensors: dict, manifest: dict) -> None:
    """Replay: each sensor's offset against the pose stream (adapters/replay/align.py), judged
    against the latency tolerance (a stamp that far from the capture instant makes every
    latency wrong by as much). Truth was recomputed with the offset compensated."""
    for name, a in ((manifest.get("replay") or {}).get("alignment") or {}).items():
        if name not in sensors or a.get("offset_ms") is None:
            continue
        tol, d = a["tolerance_ms"], a["offset_ms"]
        if a["mode"] == "fixed":
            sensors[name]["metrics"]["time_offset_ms"] = not_applicable(
                f"{d:+g} ms given by --time-offset and compensated, not measured", "ms"
            )
            continue
        est = stats.Estimate(d, tuple(a["ci_ms"]), a["samples"] or 1, a["level"])
        m = metric(est, 0.0, (-tol, tol), "ms")
        m["note"] = (
            f"pose-stream time minus stamp, estimated from {a['method']}; truth recomputed "
            f"with {a['applied_ms']:+.3g} ms"
        )
        if m["verdict"] == "fail":
            early = "earlier" if d > 0 else "later"
            m["note"] += (
                f"; FAIL: the sensor's stamps are {abs(d):.3g} ms {early} than the pose "
                f"stream's time of the same instant (or the pose stream is stamped {abs(d):.3g} "
                f"ms {'late' if d > 0 else 'early'}), beyond the latency tolerance +-{tol:g} ms, "
                "so latency measured from these stamps is off by as much; the other metrics "
                "are judged with the offset compensated. Fix the stamping; if the offset is the "
                "pose stream's own and known, pass --time-offset (compensated, not judged)"
            )
        if a.get("note"):
            m["note"] += f"; {a['note']}"
        sensors[name]["metrics"]["time_offset_ms"] = m


# metrics measuring the noise itself, per sensor type (the rest: dropout, latency, rate)
NOISE_METRICS = {
    "lidar": ("range_",),
    "imu": ("accel_", "gyro_"),
    "gnss": ("position_",),
    "camera": ("intensity_",),
}
DEVIATION = "Gazebo deviates from its own declared <noise>"
_RANK = {"fail": 0, "inconclusive": 1, "pass": 2}


def _engine_noise_verdicts(sensors: dict, manifest: dict) -> None:
    """Both engine-noise steps (verify_run runs the family-wise step between them)."""
    _engine_noise_flips(sensors, manifest)
    _engine_noise_notes(sensors, manifest)


def _engine_noise_flips(sensors: dict, manifest: dict) -> None:
    """--noise engine: the noise was Gazebo's (run.json `noise_stages`, made by
    adapters/gazebo/noise.py engine_noise_plan).

    Each such sensor gets `noise_source` and its `engine_noise` plan (SDF noise written, what
    simconform applied, what SDF cannot express). gz-sensors negates each drawn bias with
    probability 0.5, so a randomly signed bias metric is judged against +bias and -bias and
    keeps the better verdict (noted). Every noise metric Gazebo fails is marked as Gazebo
    deviating from its own declared noise, with what its model predicts where that is known."""
    for name, plan in (manifest.get("noise_stages") or {}).items():
        sensor = sensors.get(name)
        if sensor is None:
            continue
        sensor["noise_source"] = "Gazebo's <noise> (--noise engine)"
        sensor["engine_noise"] = plan
        for mname in plan.get("random_sign_bias", []):
            m = sensor["metrics"].get(mname)
            if m is None or "ci" not in m or None in (*m["ci"], *m["tolerance"]):
                continue
            flipped = [-m["tolerance"][1], -m["tolerance"][0]]
            v = stats.verdict(tuple(m["ci"]), tuple(flipped))
            if _RANK[v] > _RANK[m["verdict"]]:
                m.update(configured=-m["configured"], tolerance=flipped, verdict=v)
                m["note"] = "gz-sensors drew -bias (it negates the bias with p = 0.5)"
            else:
                m["note"] = "gz-sensors negates the bias with p = 0.5: -bias also accepted"


def _engine_noise_notes(sensors: dict, manifest: dict) -> None:
    """Every noise metric Gazebo still fails (after the family-wise step) is Gazebo deviating
    from its own declared noise; notes what its SDF model gives where that is known."""
    for name, plan in (manifest.get("noise_stages") or {}).items():
        sensor = sensors.get(name)
        if sensor is None:
            continue
        prefixes = NOISE_METRICS.get(sensor["type"], ())
        for mname, m in sensor["metrics"].items():
            notes = [m.get("note")]
            if m["verdict"] == "fail" and mname.startswith(prefixes):
                m["deviation"] = DEVIATION
                notes.append(DEVIATION)
            if mname in plan.get("expected", {}):  # SDF cannot express the spec's value
                notes.append(f"its SDF model gives {plan['expected'][mname]:.4g}")
            if any(notes):
                m["note"] = "; ".join(x for x in notes if x)


def overall(sensors: dict) -> str:
    verdicts = {m["verdict"] for s in sensors.values() for m in s["metrics"].values()}
    for v in VERDICT_ORDER:
        if v in verdicts:
            return v
    return "not_applicable"


__all__ = ["Pair", "verify_run"]
