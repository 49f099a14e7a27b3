"""Campaign plots (plots/): verdict shares, per-seed sweeps, seed-to-seed spread, coverage.

matplotlib is imported on first use, with the Agg backend, so a headless worker never needs a
display and importing this module stays cheap.
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import numpy as np
from scipy.stats import norm

from simconform.campaign.summary import covers, standardized_miss
from simconform.verify.plots import _plt, save_png

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf")


def _grid(n: int, cols: int = 3, w: float = 4.0, h: float = 3.0):
    plt = _plt()
    cols = max(1, min(cols, n))
    nrows = math.ceil(n / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(w * cols, h * nrows), squeeze=False)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    return plt, fig, list(axes.flat)


def _save(plt, fig, path: Path) -> Path:
    save_png(fig, path, 90)
    plt.close(fig)
    return path


def plot_pass_rate(path: Path, report: dict) -> Path | None:
    """Share of pass / inconclusive / fail per sensor metric over all cells, per backend."""
    backends = report["campaign"]["backends"]
    labels = sorted(
        {f"{r['sensor']}.{r['metric']}" for r in report["metrics"] if r["pass_rate"] is not None}
    )
    if not labels:
        return None
    plt, fig, axes = _grid(len(backends), cols=len(backends), w=5.0, h=0.28 * len(labels) + 1.6)
    y = np.arange(len(labels))
    for ax, b in zip(axes, backends):
        tally = {lab: Counter() for lab in labels}
        for r in report["metrics"]:
            lab = f"{r['sensor']}.{r['metric']}"
            if r["backend"] == b and lab in tally:
                tally[lab].update(r["verdicts"])
        left = np.zeros(len(labels))
        for v, colour in (("pass", "#2da44e"), ("inconclusive", "#d4a72c"), ("fail", "#cf222e")):
            judged = np.array(
                [sum(tally[lab][k] for k in ("pass", "inconclusive", "fail")) for lab in labels]
            )
            share = np.array([tally[lab][v] for lab in labels]) / np.maximum(judged, 1)
            ax.barh(y, share, left=left, color=colour, label=v)
            left += share
        ax.set_yticks(y, labels, fontsize=7)
        ax.set_ylim(len(labels) - 0.5, -0.5)
        ax.set_xlim(0, 1)
        ax.set_xlabel("share of cells")
        ax.set_title(f"{b}: verdicts per sensor metric")
    axes[0].legend(fontsize=7, loc="lower right")
    return _save(plt, fig, path)


def _with_ci(report: dict, sensor: str) -> list[str]:
    seen: dict[str, None] = {}
    for r in report["metrics"]:
        if r["sensor"] == sensor and any(covers(m) is not None for m in r["per_seed"]):
            seen[r["metric"]] = None
    return list(seen)


def _categories(report: dict) -> list[tuple[str, str]]:
    c = report["campaign"]
    return [(v, s) for v in c["variants"] for s in c["worlds"]]


def plot_sweep(path: Path, report: dict, sensor: str) -> Path | None:
    """Measured value with its CI per seed, against the configured value and tolerance band,
    across the swept variants and worlds; backends side by side within each category."""
    metrics = _with_ci(report, sensor)
    if not metrics:
        return None
    cats = _categories(report)
    backends = report["campaign"]["backends"]
    many_worlds = len(report["campaign"]["worlds"]) > 1
    plt, fig, axes = _grid(len(metrics), cols=3, w=max(4.0, 1.2 * len(cats) + 2), h=3.0)
    slot = 0.8 / len(backends)
    for ax, mname in zip(axes, metrics):
        for ci_, (variant, scene) in enumerate(cats):
            for bi, b in enumerate(backends):
                row = next(
                    (
                        r
                        for r in report["metrics"]
                        if (r["backend"], r["variant"], r["scene"], r["sensor"], r["metric"])
                        == (b, variant, scene, sensor, mname)
                    ),
                    None,
                )
                if row is None:
                    continue
                seeds = [m for m in row["per_seed"] if m.get("measured") is not None]
                x0 = ci_ - 0.4 + bi * slot
                xs = x0 + slot * (np.arange(len(seeds)) + 0.5) / max(1, len(seeds))
                for x, m in zip(xs, seeds):
                    lo, hi = m["ci"] if m.get("ci") and None not in m["ci"] else (None, None)
                    err = None if lo is None else [[m["measured"] - lo], [hi - m["measured"]]]
                    ax.errorbar(
                        x,
                        m["measured"],
                        yerr=err,
                        fmt="o",
                        ms=2.5,
                        lw=0.8,
                        color=COLOURS[bi % len(COLOURS)],
                        label=b if (ci_ == 0 and m is seeds[0]) else None,
                    )
                tol = next((m["tolerance"] for m in seeds if m.get("tolerance")), None)
                if tol and None not in tol:
                    ax.fill_between([x0, x0 + slot], tol[0], tol[1], color="0.85", zorder=0)
                for conf in {m["configured"] for m in seeds if m.get("configured") is not None}:
                    ax.hlines(conf, x0, x0 + slot, colors="k", lw=1.2)
        ax.set_xticks(
            range(len(cats)), [f"{v}\n{s}" if many_worlds else v for v, s in cats], fontsize=7
        )
        unit = next(
            (
                r["unit"]
                for r in report["metrics"]
                if r["sensor"] == sensor and r["metric"] == mname
            ),
            "",
        )
        ax.set_title(
            f"{sensor}.{mname}" + (f" [{unit}]" if unit and unit != "1" else ""), fontsize=9
        )
    axes[0].legend(fontsize=7)
    fig.suptitle("measured (CI per seed) vs configured (black) and tolerance (grey)", fontsize=9)
    return _save(plt, fig, path)


def plot_spread(path: Path, report: dict, sensor: str) -> Path | None:
    """Each seed's miss of the configured value in CI half-widths times z: inside the dashed
    lines its CI covers the configured value, so the share inside should be the level."""
    metrics = _with_ci(report, sensor)
    if not metrics:
        return None
    level = report["campaign"]["confidence"]
    z = float(norm.ppf(0.5 + level / 2))
    rows = [r for r in report["metrics"] if r["sensor"] == sensor]
    groups = list(dict.fromkeys((r["backend"], r["variant"], r["scene"]) for r in rows))
    backends = report["campaign"]["backends"]
    plt, fig, axes = _grid(len(metrics), cols=3, w=max(4.0, 0.9 * len(groups) + 2), h=3.0)
    rng = np.random.default_rng(0)
    for ax, mname in zip(axes, metrics):
        for gi, g in enumerate(groups):
            row = next(
                (
                    r
                    for r in rows
                    if (r["backend"], r["variant"], r["scene"]) == g and r["metric"] == mname
                ),
                None,
            )
            if row is None:
                continue
            s = [standardized_miss(m, level) for m in row["per_seed"]]
            s = np.array([v for v in s if v is not None])
            colour = COLOURS[backends.index(g[0]) % len(COLOURS)]
            ax.scatter(gi + rng.uniform(-0.25, 0.25, len(s)), s, s=6, color=colour)
            cov = row["coverage"]
            if cov["n"]:
                ax.text(
                    gi,
                    4.3 * z,
                    f"{cov['covered']}/{cov['n']}",
                    ha="center",
                    fontsize=6,
                    color="red" if cov["status"] in ("low", "high") else "k",
                )
        ax.axhline(z, ls="--", color="k", lw=0.8)
        ax.axhline(-z, ls="--", color="k", lw=0.8)
        ax.set_ylim(-4.6 * z, 4.8 * z)
        ax.set_xticks(range(len(groups)), ["\n".join(g) for g in groups], fontsize=6)
        ax.set_title(f"{sensor}.{mname}", fontsize=9)
    fig.suptitle(
        f"seed-to-seed spread: (configured - measured) / CI half-width x z; |.| <= {z:.2f} covers",
        fontsize=9,
    )
    return _save(plt, fig, path)


def plot_coverage(path: Path, report: dict) -> Path | None:
    """Coverage share with its Clopper-Pearson interval per sensor metric and group, against
    the nominal level and the range the binomial law allows (grey)."""
    rows = [r for r in report["metrics"] if r["coverage"]["n"]]
    if not rows:
        return None
    labels = list(dict.fromkeys(f"{r['sensor']}.{r['metric']}" for r in rows))
    groups = list(dict.fromkeys((r["backend"], r["variant"], r["scene"]) for r in rows))
    backends = report["campaign"]["backends"]
    level = report["campaign"]["confidence"]
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.5, 0.35 * len(labels) * max(1, len(groups)) ** 0.5 + 1.8))
    step = 0.8 / len(groups)
    markers = "osD^v<>p*h"
    for gi, g in enumerate(groups):
        for r in rows:
            if (r["backend"], r["variant"], r["scene"]) != g:
                continue
            cov = r["coverage"]
            y = labels.index(f"{r['sensor']}.{r['metric']}") - 0.4 + (gi + 0.5) * step
            n = cov["n"]
            ax.plot(
                [cov["expected"][0] / n, cov["expected"][1] / n],
                [y, y],
                color="0.8",
                lw=4,
                solid_capstyle="butt",
                zorder=0,
            )
            colour = COLOURS[backends.index(g[0]) % len(COLOURS)]
            ax.errorbar(
                cov["rate"],
                y,
                xerr=[[cov["rate"] - cov["ci"][0]], [cov["ci"][1] - cov["rate"]]],
                fmt=markers[gi % len(markers)],
                ms=4,
                color=colour,
                mfc="none" if cov["status"] == "exact" else colour,
                label="/".join(g)
                if r is next(x for x in rows if (x["backend"], x["variant"], x["scene"]) == g)
                else None,
            )
    ax.axvline(level, ls="--", color="k", lw=0.8)
    ax.set_yticks(range(len(labels)), labels, fontsize=7)
    ax.set_ylim(len(labels) - 0.5, -0.5)
    lowest = min(min(r["coverage"]["ci"][0] for r in rows), level - 0.2)
    ax.set_xlim(max(0.0, lowest - 0.05), 1.01)
    ax.set_xlabel(f"share of seeds whose CI covers the configured value (nominal {level:g})")
    ax.set_title("coverage of our confidence intervals (grey: what Bin(n, level) allows)")
    ax.legend(fontsize=6, loc="lower left")
    return _save(plt, fig, path)


def write_plots(out: Path, report: dict) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    sensors = list(dict.fromkeys(r["sensor"] for r in report["metrics"]))
    made = [plot_pass_rate(out / "pass_rate.png", report)]
    made.append(plot_coverage(out / "coverage.png", report))
    for s in sensors:
        made.append(plot_sweep(out / f"sweep_{s}.png", report, s))
        made.append(plot_spread(out / f"spread_{s}.png", report, s))
    return [p for p in made if p is not None]
