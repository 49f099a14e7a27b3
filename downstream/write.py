"""localization.json, localization.md and the two plots, in a claimed output folder."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from simconform.downstream.evaluate import Evaluation
from simconform.downstream.runcheck import partial
from simconform.frames import Pose
from simconform.outdir import claim, io_error, update
from simconform.verify.plots import _plt, save_png
from simconform.verify.report import SYMBOL


def dumps(report: dict) -> str:
    return json.dumps(report, indent=2) + "\n"


def _fmt(v, unit: str = "") -> str:
    return "n/a" if v is None else f"{v:.4g}{unit}"


def markdown(r: dict) -> str:
    lines = [
        f"# Localization: {r['odometry']} on {r['topic']}",
        "",
        f"**Verdict: {SYMBOL.get(r['verdict'], r['verdict'])}**"
        + ("" if r["tolerances"] else " (the spec declares no `localization:` tolerance)"),
        "",
        *_integrity(r.get("integrity") or {}),
        "| metric | value | tolerance | verdict |",
        "|---|---|---|---|",
    ]
    rows = [
        ("APE RMSE (origin-aligned)", r["ape_rmse_m"], " m", "ape_rmse_m"),
        ("APE max", r["ape_max_m"], " m", None),
        (f"RPE translation (per {_fmt(r['rpe_segment_m'], ' m')})", r["rpe_trans_pct"], " %",
         "rpe_trans_pct"),
        ("RPE rotation", r["rpe_rot_deg_per_100m"], " deg/100 m", None),
        ("path length", r["path_length_m"], " m", None),
        ("APE RMSE / path length", r["drift_pct"], " %", None),
    ]  # fmt: skip
    for label, value, unit, key in rows:
        tol = r["tolerances"].get(key) if key else None
        lines.append(
            f"| {label} | {_fmt(value, unit)} | "
            + (f"<= {tol['max']:g}{unit} | {tol['verdict']} |" if tol else "| |")
        )
    lines += [
        "",
        f"{r['sweeps']} sweeps ({r['sweeps_with_point_time']} with per-point time); deskewing "
        f"{'on' if r['deskew'] else 'off'}; each estimate judged at {r['pose_instant']}, "
        "against the run's gt/ interpolated there. Backend "
        f"{r['backend']}, seed {r['seed']}, run {r['run']}.",
        "",
        "![trajectory](trajectory.png)",
        "",
        "![APE over time](ape_over_time.png)",
        "",
    ]
    return "\n".join(lines)


def _integrity(integ: dict) -> list[str]:
    """What verify's checks found, where the result covers only part of the run."""
    if not partial(integ):
        return []
    scope = integ["scope"].replace(" only", "")
    return [
        f"**Of the {scope} only** (run state {integ.get('state')}): sweeps in damaged or "
        "unrecorded spans are missing from the estimate.",
        "",
        *(f"- {line}" for line in integ.get("findings", [])),
        "",
    ]


def plots(out: Path, ev: Evaluation, est: Pose, truth: Pose, t_ns: np.ndarray) -> None:
    plt = _plt()

    # est is in the odometry's own frame: place it at the first true pose, as evaluate() does
    placed = truth[0].compose(est[0].inverse()).compose(est)
    fig, ax = plt.subplots(figsize=(6.5, 6))
    ax.plot(truth.t[:, 0], truth.t[:, 1], "k-", label="truth")
    ax.plot(placed.t[:, 0], placed.t[:, 1], "C1--", label="odometry")
    ax.set(xlabel="x (m, map)", ylabel="y (m, map)", title="Trajectory", aspect="equal")
    ax.legend()
    save_png(fig, out / "trajectory.png", 110)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.plot((t_ns - t_ns[0]) / 1e9, ev.ape_m, "C0-")
    ax.set(xlabel="time since first sweep (s)", ylabel="APE (m)", title="Position error")
    ax.grid(alpha=0.3)
    save_png(fig, out / "ape_over_time.png", 110)
    plt.close(fig)


IN_RUN = "localization"  # RUN/localization/ when no --out is given


def write_localization(
    out: Path | None, run_dir: Path, force: bool, report: dict, ev: Evaluation, est, truth, t_ns
) -> Path:
    """Into `out` (a folder of its own, claimed), or with None into RUN/localization/, declared
    among the run's outputs (so `run --force` and campaigns replace it like the report).

    Drawn in DIR/.simconform/ and renamed into place, localization.json last, as verify's
    report is: an interrupted localize leaves the earlier result whole, and a symbolic link
    where a file goes is refused rather than written through."""
    if out is None:
        with update(run_dir, "run") as owned:
            return _write(owned, run_dir, IN_RUN, report, ev, est, truth, t_ns)
    with claim(out, "localize", force, clear=False) as owned:  # the old result stays till then
        return _write(owned, out, "", report, ev, est, truth, t_ns)


def _write(owned, folder: Path, into: str, report: dict, ev, est: Pose, truth: Pose, t_ns):
    # `into` is checked by localize() first, and by adopt under the lock; with --out, --force
    # replaces what an earlier localize wrote there
    try:
        with owned.staged(last="localization.json", into=into, replace=not into) as tmp:
            (tmp / "localization.json").write_text(dumps(report))
            (tmp / "localization.md").write_text(markdown(report))
            plots(tmp, ev, est, truth, t_ns)
    except OSError as exc:
        raise io_error(folder, exc, option=owned.option) or exc from None
    return folder / into if into else folder
