"""PNG plots: error histograms with the predicted distribution overlaid (the one the verdict
judges against), a conformance chart of every metric's interval against its tolerance band,
and the one-page overview (plots_overview.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from simconform.verify.distributions import norm_pdf

MAX_HIST = 50_000


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_png(fig, path: Path, dpi: int, rect: tuple | None = None) -> None:
    """tight_layout, then savefig. tight_layout leaves a placeholder layout engine on the
    figure, and with any engine set savefig draws the whole figure once more before drawing it
    into the file; it is dropped first: the same PNG bytes (the demo report's eight figures),
    10-13 % less CPU a report (3.0 against 2.6-2.7 CPU-s, one process, 2026-12-06)."""
    fig.tight_layout(rect=rect)
    fig.set_layout_engine(None)  # None with matplotlib's default rcParams: no engine at all
    fig.savefig(path, dpi=dpi)


def axis_limits(e: np.ndarray, centre: float, sigma: float) -> tuple[float, float]:
    """0.5 to 99.5 percentile of the errors, widened to the predicted centre +- 4 sigma: a few
    outliers do not squash the histogram, and the predicted curve is always seen whole."""
    lo, hi = np.percentile(e, [0.5, 99.5])
    if sigma > 0:
        lo, hi = min(lo, centre - 4 * sigma), max(hi, centre + 4 * sigma)
    scale = max(abs(lo), abs(hi))
    if not hi - lo > 1e-9 * scale:  # constant errors (a bias without noise): round-off only
        w = 1e-3 * scale if scale > 0 else 1.0
        lo, hi = lo - w, hi + w
    pad = 0.04 * (hi - lo)
    return float(lo - pad), float(hi + pad)


def bin_edges(values: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """One bin per integer for integer data (image levels: no comb of empty bins), else
    numpy's "auto" count between 8 and 80 over [lo, hi]."""
    if len(values) and np.all(values == np.rint(values)) and hi - lo <= 200:
        return np.arange(np.floor(lo) - 0.5, np.ceil(hi) + 1.0)
    try:
        n_bins = len(np.histogram_bin_edges(values, bins="auto")) - 1 if len(values) else 8
    except ValueError:  # a spread at round-off level, too narrow to split
        n_bins = 8
    return np.linspace(lo, hi, int(np.clip(n_bins, 8, 80)) + 1)


def per_unit(unit: str) -> str:
    """The unit of a density over `unit`: 1/m, 1/(m/s^2)."""
    return f"1/({unit})" if "/" in unit or " " in unit else f"1/{unit}"


def predicted(f: dict) -> tuple[float, float, str]:
    """(centre, sigma, label) of the distribution the verdict judges this field against:
    the camera's after clamp/round/encode, a walk-widened one, else the spec's Gaussian."""
    if f.get("predicted_sigma") is not None:
        b = f.get("predicted_bias", f["bias"])
        s = f["predicted_sigma"]
        what = f.get("predicted_from", "after clamp, round and encoding")
        return b, s, f"predicted {what}: N({b:.3g}, {s:.3g}²)"
    return f["bias"], f["sigma"], f"predicted (spec): N({f['bias']:g}, {f['sigma']:g}²)"


def hist_axis(ax, name: str, f: dict, title: str, rng=None) -> None:
    """One field's error histogram (density) with the predicted distribution overlaid."""
    e = np.asarray(f["errors"])
    if e.dtype.kind == "f":
        e = e[np.isfinite(e)]
    unit = f["unit"]
    if len(e) > MAX_HIST:  # integers (a camera's 2.8 M levels) sampled before any float copy
        e = (rng or np.random.default_rng(0)).choice(e, MAX_HIST, replace=False)
    e = e.astype(float, copy=False)
    if len(e) == 0:
        ax.set_title(f"{title}: no samples")
        ax.axis("off")
        return
    b, s, label = predicted(f)
    lo, hi = axis_limits(e, b, s)
    inside = e[(e >= lo) & (e <= hi)]
    counts, edges = np.histogram(inside, bins=bin_edges(inside, lo, hi))
    density = counts / (len(e) * np.diff(edges))  # of all samples: clipped ones still count
    ax.stairs(density, edges, fill=True, color="#8fb8de", label=f"measured (n = {len(e):,})")
    if s > 0:
        x = np.linspace(lo, hi, 400)
        ax.plot(
            x,
            norm_pdf(x, b, s),
            "k-",
            lw=1.5,
            label=label,
        )
        if f.get("predicted_sigma") is not None and f["sigma"] > 0:
            c, sc = f["bias"], f["sigma"]
            ax.plot(
                x,
                norm_pdf(x, c, sc),
                "--",
                color="#888888",
                lw=1,
                label=f"configured N({c:g}, {sc:g}²), not judged",
            )
    outside = len(e) - len(inside)
    beyond = f"; {outside:,} beyond the axes" if outside else ""
    ax.set_xlim(lo, hi)
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(f"{name} error ({unit}){beyond}")
    ax.set_ylabel(f"probability density ({per_unit(unit)})")
    ax.legend(fontsize=7, loc="upper right")


def histogram(path: Path, sensor: str, fields: dict[str, dict]) -> Path:
    plt = _plt()
    fields = {k: v for k, v in fields.items() if not k.startswith("_")}
    n = len(fields)
    cols = min(3, n)
    rows = int(np.ceil(n / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(5.0 * cols, 3.6 * rows), squeeze=False)
    rng = np.random.default_rng(0)
    for ax, (name, f) in zip(axes.flat, fields.items()):
        note = f" ({f['note']})" if f.get("note") else ""
        hist_axis(ax, name, f, f"{sensor}: {name} error{note}", rng)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    save_png(fig, path, 90)
    plt.close(fig)
    return path


def conformance(path: Path, report: dict) -> Path | None:
    """Each metric's CI mapped onto its tolerance band: -1 and +1 are the band's edges."""
    items = []
    for sname, s in report["sensors"].items():
        for mname, m in s["metrics"].items():
            if "ci" not in m or m["measured"] is None or None in m["ci"]:
                continue  # a one-sided or absent interval (too few samples) has no bar
            lo, hi = m["tolerance"]
            c = m["configured"]
            if not hi > lo or c is None:
                continue
            ci_hi = np.inf if m["ci"][1] is None else m["ci"][1]  # an unbounded end (a rate)
            norm = [_to_band(v, lo, c, hi) for v in (m["measured"], m["ci"][0], ci_hi)]
            items.append((f"{sname}.{mname}", norm, m["verdict"]))
    xlabel = "(measured - configured) / tolerance half-width (CI as bar, clipped at ±3)"
    return interval_chart(path, items, xlabel, "configured vs measured")


VERDICT_COLOUR = {"pass": "#1a7f37", "fail": "#cf222e", "inconclusive": "#9a6700"}


def interval_chart(path: Path, items: list, xlabel: str, title: str) -> Path | None:
    """(label, (value, lo, hi), verdict) rows on a scale where the band is [-1, 1]."""
    if not items:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 0.22 * len(items) + 1.2))
    for i, (_label, (v, lo, hi), verdict) in enumerate(items):
        c = VERDICT_COLOUR.get(verdict, "grey")
        ax.plot([max(lo, -3), min(hi, 3)], [i, i], "-", color=c, lw=3)
        ax.plot([np.clip(v, -3, 3)], [i], "o", color=c, ms=3)
    ax.axvspan(-1, 1, color="#dafbe1", zorder=0)
    ax.axvline(0, color="k", lw=0.5)
    ax.set_yticks(range(len(items)), [x[0] for x in items], fontsize=7)
    ax.set_xlim(-3, 3)
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    save_png(fig, path, 90)
    plt.close(fig)
    return path


def _to_band(v: float, lo: float, c: float, hi: float) -> float:
    """Map v so that the configured value is 0 and the tolerance's ends are -1 and +1 (each side
    scaled by its own half-width; a one-sided band uses the other side's width)."""
    below, above = c - lo, hi - c
    if v < c:
        return (v - c) / (below if below > 0 else above)
    return (v - c) / (above if above > 0 else below)


def ray_map_figure(rate: np.ndarray, title: str):
    """A figure for a per-ray lidar rate: (fig, side axes); the left axes show `rate`
    (rings x columns) over azimuth, ring 0 at the bottom, with its colour bar."""
    plt = _plt()
    rings, cols = rate.shape
    fig, axes = plt.subplots(
        1, 2, figsize=(13, 3.8), gridspec_kw={"width_ratios": [2.2, 1]}, squeeze=False
    )
    ax = axes[0, 0]
    # 0 is white: a ray that never disagrees (or never drops) is empty paper, not a black field
    # that reads as a failed plot
    im = ax.imshow(
        rate,
        origin="lower",
        aspect="auto",
        cmap="magma_r",
        vmin=0,
        vmax=float(rate.max()) if np.any(rate) else 1.0,
        extent=(0, 360, -0.5, rings - 0.5),
        interpolation="nearest",
    )
    if not np.any(rate):
        ax.text(180, (rings - 1) / 2, "0 on every ray", ha="center", va="center", fontsize=12)
    ax.set_xlabel(f"azimuth (deg, {cols} columns, counter-clockwise from x)")
    ax.set_ylabel("ring (0 = lowest beam)")
    ax.set_title(title)
    fig.colorbar(im, ax=ax, fraction=0.035, label="share of sweeps (0-1)")
    return fig, axes[0, 0], axes[0, 1]


def triptych(path: Path, sensor: str, images: dict[str, np.ndarray]) -> Path:
    """Truth, published and their difference for one frame."""
    plt = _plt()
    truth, pub = images["truth"], images["published"]
    diff = np.abs(pub.astype(np.int16) - truth.astype(np.int16)).max(axis=2)
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    axes[0].imshow(truth)
    axes[0].set_title(f"{sensor}: truth")
    axes[1].imshow(pub)
    axes[1].set_title("published (after noise and encoding)")
    im = axes[2].imshow(diff, cmap="magma", vmin=0, vmax=max(1, int(np.percentile(diff, 99.5))))
    axes[2].set_title("|published - truth| (max over channels)")
    fig.colorbar(im, ax=axes[2], fraction=0.035, label="levels (0-255)")
    for ax in axes:
        ax.axis("off")
    save_png(fig, path, 90)
    plt.close(fig)
    return path


def figures(out: Path, report: dict, samples: dict[str, dict]) -> list:
    """The report's figures but the overview, each as (function, arguments, weight) for
    verify/figures.py; a weight is about the figure's drawing time (0.2 per histogram panel,
    measured on the demo)."""
    out_list: list = []
    for sensor, fields in samples.items():
        panels = sum(not k.startswith("_") for k in fields)
        if panels:
            out_list.append(
                (histogram, (out / f"{sensor}_errors.png", sensor, fields), 0.2 * panels)
            )
        if "_images" in fields:
            out_list.append(
                (triptych, (out / f"{sensor}_frame.png", sensor, fields["_images"]), 0.35)
            )
    out_list.append((conformance, (out / "conformance.png", report), 0.9))
    return out_list
