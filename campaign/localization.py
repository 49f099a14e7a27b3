"""Localization across a campaign's seeds: the "how much noise can localization take" curve.

With `localize: true` every cell also holds RUN/localization/localization.json (simconform
localize). Per (backend, variant, world) the cells' APE RMSE gives a mean with a Student-t
interval across seeds at the campaign's confidence, the RPE and drift their means, and the
spec's `localization:` tolerance a pass count. The plot draws APE against the noise scale on a
log axis where every variant is one (`noise_scale`, or none: 1), else against the variants in
the file's order.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from scipy.stats import t as student_t

from simconform.verify.plots import _plt, save_png

FILE = Path("localization") / "localization.json"


def _mean_ci(values: list[float], level: float) -> tuple[float, list[float] | None]:
    v = np.asarray(values, dtype=float)
    m = float(v.mean())
    if len(v) < 2:
        return m, None
    half = float(student_t.ppf((1 + level) / 2, len(v) - 1) * v.std(ddof=1) / np.sqrt(len(v)))
    return m, [m - half, m + half]


def noise_scales(variants) -> dict[str, float] | None:
    """Each variant's noise scale where the variants differ only in it, else None."""
    if not isinstance(variants, dict) or any(set(o) - {"noise_scale"} for o in variants.values()):
        return None
    scales = {v: float(o.get("noise_scale", 1.0)) for v, o in variants.items()}
    return scales if len(set(scales.values())) == len(scales) else None


def localization_rows(out: Path, meta: dict, records: list[dict]) -> list[dict]:
    """One row per (backend, variant, world) whose cells localized."""
    if not meta.get("localize"):
        return []
    order = {v: i for i, v in enumerate(meta["variants"])}
    scales = noise_scales(meta["variants"])
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        try:
            loc = json.loads((out / r["path"] / FILE).read_text())
        except (OSError, ValueError, KeyError):
            continue  # a cell that did not run (its status says why)
        groups.setdefault((r["backend"], r["variant"], r["scene"]), []).append(
            {"seed": r["seed"], **loc}
        )
    rows = []
    for (backend, variant, scene), cells in groups.items():
        cells.sort(key=lambda c: c["seed"])
        ape_mean, ape_ci = _mean_ci([c["ape_rmse_m"] for c in cells], meta["confidence"])
        rpe = [c["rpe_trans_pct"] for c in cells if c.get("rpe_trans_pct") is not None]
        judged = [c for c in cells if str(c["verdict"]).lower() in ("pass", "fail")]
        rows.append(
            {
                "backend": backend,
                "variant": variant,
                "scene": scene,
                "cells": len(cells),
                **({"noise_scale": scales[variant]} if scales else {}),
                "ape_rmse_m": {"mean": ape_mean, "ci": ape_ci},
                "rpe_trans_pct_mean": float(np.mean(rpe)) if rpe else None,
                "drift_pct_mean": float(np.mean([c["drift_pct"] for c in cells])),
                "passed": sum(str(c["verdict"]).lower() == "pass" for c in judged)
                if judged
                else None,
                "judged": len(judged),
                "per_seed": [
                    {k: c.get(k) for k in ("seed", "ape_rmse_m", "rpe_trans_pct", "verdict")}
                    for c in cells
                ],
            }
        )
    rows.sort(key=lambda r: (r["backend"], r["scene"], order.get(r["variant"], 0)))
    return rows


def markdown(rows: list[dict], level: float) -> list[str]:
    if not rows:
        return []
    out = [
        "",
        "## Localization over seeds",
        "",
        f"KISS-ICP on each cell's published lidar (`simconform localize`); APE RMSE mean with "
        f"its {100 * level:g} % Student-t interval across seeds.",
        "",
        "| backend | variant | world | cells | APE RMSE (m) | CI | RPE (%) | drift (%) | "
        "tolerance passed |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ci = r["ape_rmse_m"]["ci"]
        rpe = r["rpe_trans_pct_mean"]
        out.append(
            f"| {r['backend']} | {r['variant']} | {r['scene']} | {r['cells']} | "
            f"{r['ape_rmse_m']['mean']:.3g} | "
            + ("-" if ci is None else f"[{ci[0]:.3g}, {ci[1]:.3g}]")
            + f" | {'-' if rpe is None else f'{rpe:.3g}'} | {r['drift_pct_mean']:.3g} | "
            + ("not declared" if r["passed"] is None else f"{r['passed']}/{r['judged']}")
            + " |"
        )
    return out


def plot(path: Path, rows: list[dict]) -> Path | None:
    if not rows:
        return None
    plt = _plt()

    fig, ax = plt.subplots(figsize=(6.5, 4))
    series: dict[tuple, list[dict]] = {}
    for r in rows:
        series.setdefault((r["backend"], r["scene"]), []).append(r)
    for (backend, scene), rs in series.items():
        numeric = all("noise_scale" in r for r in rs)
        x = np.array([r["noise_scale"] for r in rs]) if numeric else np.arange(len(rs))
        y = np.array([r["ape_rmse_m"]["mean"] for r in rs])
        lo = np.array([y[i] - (r["ape_rmse_m"]["ci"] or [y[i]])[0] for i, r in enumerate(rs)])
        hi = np.array([(r["ape_rmse_m"]["ci"] or [0, y[i]])[1] - y[i] for i, r in enumerate(rs)])
        ax.errorbar(x, y, yerr=[lo, hi], marker="o", capsize=4, label=f"{backend}, {scene}")
        if numeric:
            ax.set_xscale("log", base=2)
            ax.set_xticks(x, [f"{v:g}" for v in x])
        else:
            ax.set_xticks(x, [r["variant"] for r in rs])
    numeric = all("noise_scale" in r for r in rows)
    ax.set(
        xlabel="noise scale (times the spec's noise sigmas)" if numeric else "variant",
        ylabel="APE RMSE (m)",
        title="Localization against the " + ("noise scale" if numeric else "variants"),
    )
    ax.grid(alpha=0.3)
    ax.legend()
    save_png(fig, path, 90)
    plt.close(fig)
    return path
