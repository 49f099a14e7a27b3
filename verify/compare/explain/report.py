"""How compare's explanation of a Gazebo lidar (verify/compare/explain/lidar.py) reads in
compare.md, and its plot `<sensor>_explained.png`."""

from __future__ import annotations

from pathlib import Path

from simconform.verify.plots import _plt, ray_map_figure, save_png
from simconform.verify.report import fmt

EXPLAIN_LABELS = {
    "model": "the engine model (texel-centre ray, global shutter) to within the tolerance",
    "tessellation": "cylinder/sphere drawn as a 32-segment mesh: longer by at most the sagitta",
    "grazing": "float32 rasterisation at grazing incidence",
    "silhouette": "a neighbouring texel shows another object, and Gazebo returned what it sees",
    "range_limit": "hit/no-hit flip within 1 cm of the range limits",
    "unexplained": "none of the above",
}


def explained_markdown(sensor: str, ex: dict) -> list[str]:
    """The Gazebo lidar explanation (verify/compare/explain/lidar.py): classes, anomalies,
    leftovers."""
    pred = ex.get("predicted", {})
    out = [
        "",
        f"## {sensor}: the difference explained by Gazebo's gpu_lidar model",
        "",
        f"Model: {ex['model']}. {ex['sweeps']} sweeps, {ex['rays']} rays; "
        f"{fmt(100 * (ex['within_tolerance_of_model'] or 0))} % agree with the model to "
        f"{fmt(1000 * ex['tolerance_m'])} mm (target {fmt(100 * ex['model_target'])} %); "
        f"median |Gazebo - model| {fmt(ex['model_abs_diff_p50'])} m, p99 "
        f"{fmt(ex['model_abs_diff_p99'])} m.",
        "",
    ]
    if pred:
        out += [
            "Predicted by the model against run A's truth, next to what was measured above: "
            + ", ".join(f"{k} {fmt(v)}" for k, v in pred.items())
            + ".",
            "",
        ]
    out += ["| class | rays | share | meaning |", "|---|---|---|---|"]
    for c, n in ex["classes"].items():
        out.append(f"| {c} | {n} | {fmt(ex['shares'][c])} | {EXPLAIN_LABELS.get(c, '')} |")
    for a in ex["anomalies"]:
        where = (
            f"column {a['column']} (azimuth {fmt(a['azimuth_deg'])} deg)"
            if "column" in a
            else f"ring {a['ring']}"
        )
        out += [
            "",
            f"**Anomaly: {where}**: {a['unexplained']} of its {a['rays']} rays unexplained "
            f"({fmt(100 * a['unexplained_share'])} %, against "
            f"{fmt(100 * a['unexplained_share_all_rays'])} % over all rays).",
        ]
        if "hypothesis" in a:
            out.append(
                f"Hypothesis: {a['hypothesis']}. Casting that wrapped texel reproduces "
                f"{fmt(100 * a['hypothesis_reproduced'])} % of the unexplained rays to 1 mm."
            )
    out += [
        "",
        f"Unexplained outside anomalies: {ex['unexplained_outside_anomalies']} rays. All "
        "unexplained rays (anomalies included) by object: "
        + (", ".join(f"{k} {v}" for k, v in ex["unexplained_by_object"].items()) or "none")
        + f". They are counted by ring and column, and listed one by one (the first "
        f"{len(ex['unexplained_rays'])}: time, ring, column, object, both ranges) in "
        f"compare.json under explained.{sensor}.",
    ]
    return out


def explained_plot(path: Path, sensor: str, ex, report: dict) -> Path | None:
    """What the engine model leaves (verify/compare/explain/lidar.py): unexplained share per ray,
    anomalies marked, and the share of rays in each class."""
    if not ex.sweeps:
        return None
    plt = _plt()
    rate = ex.unexplained_map / ex.sweeps
    rings, cols = rate.shape
    fig, ax, side = ray_map_figure(
        rate, f"{sensor}: share of sweeps a ray is unexplained by the engine model"
    )
    for a in report["anomalies"]:
        if "column" in a:
            ax.annotate(
                f"anomaly: column {a['column']}",
                xy=(a["azimuth_deg"] + 180 / cols, 0.8 * rings),
                xytext=(a["azimuth_deg"] + 15, 0.8 * rings),
                color="#ff7f6e",
                va="center",
                arrowprops={"arrowstyle": "->", "color": "#ff7f6e"},
            )
    ax = side
    names = list(report["shares"])
    shares = [max(report["shares"][n] or 0.0, 1e-7) for n in names]
    ax.barh(names, shares, color="#8fb8de")
    ax.set_xscale("log")
    ax.set_xlim(1e-6, 1.5)
    ax.invert_yaxis()
    ax.set_xlabel("share of all rays (log)")
    ax.set_title(f"classes ({report['rays']} rays)")
    save_png(fig, path, 90)
    plt.close(fig)
    return path
