"""overview.png: a run on one page, for a slide or a review: the verdict and where it came from,
counts per sensor, and each sensor's main error histogram against its predicted distribution."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from simconform.verify.plots import VERDICT_COLOUR, _plt, hist_axis, save_png
from simconform.verify.report import SYMBOL
from simconform.verify.summary import sensor_verdict

ORDER = ("pass", "inconclusive", "fail", "not_applicable")
COLOUR = {**VERDICT_COLOUR, "not_applicable": "#afb8c1"}


def _counts(ax, report: dict) -> None:
    per = report["summary"]["counts"]["per_sensor"]
    names = list(per)
    left = np.zeros(len(names))
    for v in ORDER:
        vals = np.array([per[n][v] for n in names], dtype=float)
        ax.barh(names, vals, left=left, color=COLOUR[v], label=SYMBOL[v])
        for i, (x, w) in enumerate(zip(left, vals)):
            if w:
                ax.text(
                    x + w / 2,
                    i,
                    f"{int(w)}",
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="white" if v != "not_applicable" else "black",
                )
        left += vals
    ax.invert_yaxis()
    ax.set_xlabel("metrics (count)")
    ax.set_title("verdicts per sensor", fontsize=10)
    ax.legend(fontsize=7, loc="lower right", ncols=2)


def _facts(ax, report: dict) -> None:
    r, p = report["run"], report.get("provenance") or {}
    verified = p.get("verified") or {}
    gaps = report["summary"]["not_checked"]
    lines = [
        f"backend {r['backend']}"
        + (f" ({p['engine_version']})" if p.get("engine_version") else ""),
        f"seed {r['seed']}, {r['duration_s']:g} s simulated, confidence {report['confidence']:g}",
        f"spec {Path(str(r['spec'])).name}, world {Path(str(r['world'])).name}",
        f"simconform {verified.get('simconform')}"
        + (f", git {str(verified['git_commit'])[:12]}" if verified.get("git_commit") else ""),
        f"not checked: {len(gaps)} item(s)" + (" (see the report)" if gaps else ""),
    ]
    lines += [f"  {g['sensor']}: {g['what']}"[:70] for g in gaps[:4]]
    ax.axis("off")
    ax.text(
        0,
        1,
        "\n".join(lines),
        va="top",
        ha="left",
        fontsize=9,
        family="monospace",
        transform=ax.transAxes,
    )


def _primary(fields: dict) -> tuple[str, dict] | None:
    """The field the sensor is mostly about: its first error series."""
    for name, f in fields.items():
        if not name.startswith("_") and len(f.get("errors", ())):
            return name, f
    return None


def overview(path: Path, report: dict, samples: dict[str, dict]) -> Path:
    plt = _plt()
    shown = [(s, _primary(f)) for s, f in samples.items()]
    shown = [(s, p) for s, p in shown if p is not None]
    rows = 1 + int(np.ceil(len(shown) / 3))
    fig = plt.figure(figsize=(15, 3.4 * rows + 0.6))
    grid = fig.add_gridspec(rows, 3)
    v = report["verdict"]
    fig.suptitle(
        f"simconform: {SYMBOL.get(v, v)}",
        fontsize=16,
        fontweight="bold",
        color=COLOUR.get(v, "black"),
    )
    _counts(fig.add_subplot(grid[0, 0]), report)
    _facts(fig.add_subplot(grid[0, 1:]), report)
    rng = np.random.default_rng(0)
    for i, (sensor, (name, f)) in enumerate(shown):
        ax = fig.add_subplot(grid[1 + i // 3, i % 3])
        sv = sensor_verdict(report["summary"]["counts"]["per_sensor"].get(sensor, {}))
        hist_axis(ax, name, f, f"{sensor}: {name} error ({SYMBOL[sv]})", rng)
        ax.title.set_color(COLOUR[sv])
    save_png(fig, path, 80, rect=(0, 0, 1, 0.96))
    plt.close(fig)
    return path
