"""compare's PNG plots: where lidar truth disagrees, the worst camera frame, the published error
distributions of A and B, and the equivalence chart, in the style of verify/plots.py."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from simconform.verify.compare.camera import CameraTruthDiff
from simconform.verify.compare.explain.report import explained_plot
from simconform.verify.compare.lidar import LidarTruthDiff
from simconform.verify.compare.published import metric_names
from simconform.verify.distributions import norm_pdf
from simconform.verify.plots import (
    MAX_HIST,
    _plt,
    axis_limits,
    bin_edges,
    interval_chart,
    per_unit,
    predicted,
    ray_map_figure,
    save_png,
)
from simconform.verify.report import fmt

if TYPE_CHECKING:
    from simconform.verify.compare.runner import Comparison


def lidar_plot(path: Path, sensor: str, diff) -> Path | None:
    """Where the engines disagree: rate per ring and azimuth column, and the range histogram."""
    if diff.captures == 0:
        return None
    plt = _plt()
    fig, _map, ax = ray_map_figure(
        diff.disagree / diff.captures,
        f"{sensor}: share of sweeps where A and B disagree "
        f"(hit/no-hit, or |Δr| > {fmt(diff.tol)} m)",
    )
    d = np.concatenate(diff.diffs) if diff.diffs else np.zeros(0)
    if d.size:
        if d.size > MAX_HIST:
            d = np.random.default_rng(0).choice(d, MAX_HIST, replace=False)
        ax.hist(d * 1e3, bins=80, color="#8fb8de")
        ax.set_yscale("log")
    else:
        ax.text(0.5, 0.5, "no ray hit in both runs", ha="center", transform=ax.transAxes)
    ax.set_xlabel("range B - A (mm), rays where both hit")
    ax.set_title("range difference")
    save_png(fig, path, 90)
    plt.close(fig)
    return path


def camera_plot(path: Path, sensor: str, diff) -> Path | None:
    """The frame with the lowest PSNR: A, B and |B - A|."""
    if diff.worst is None:
        return None
    plt = _plt()
    p, t_ns, a, b = diff.worst
    d = np.abs(b.astype(np.int16) - a.astype(np.int16)).max(axis=2)
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    axes[0].imshow(a)
    axes[0].set_title(f"{sensor}: truth A at {t_ns / 1e9:.3f} s")
    axes[1].imshow(b)
    axes[1].set_title("truth B")
    im = axes[2].imshow(d, cmap="magma", vmin=0, vmax=max(1, int(d.max())))
    ptxt = "inf" if math.isinf(p) else f"{p:.1f}"
    axes[2].set_title(f"|B - A| (max over channels), PSNR {ptxt} dB")
    fig.colorbar(im, ax=axes[2], fraction=0.035, label="levels (0-255)")
    for ax in axes:
        ax.axis("off")
    save_png(fig, path, 90)
    plt.close(fig)
    return path


def published_plot(path: Path, sensor: str, fields: dict, metrics: dict) -> Path | None:
    """Published error distributions of A and B overlaid, per field."""

    def spread(x: np.ndarray) -> bool:
        return len(x) > 0 and float(x.max()) > float(x.min())

    # a constant field (a fixed latency) has nothing to overlay
    fields = {
        k: v
        for k, v in fields.items()
        if len(v[0]) and len(v[1]) and (spread(v[0]) or spread(v[1]))
    }
    if not fields:
        return None
    plt = _plt()
    n = len(fields)
    cols = min(3, n)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.0 * cols, 3.6 * rows), squeeze=False)
    rng = np.random.default_rng(0)
    for ax, (name, (a, b, unit, info)) in zip(axes.flat, fields.items()):
        a = a if a.size <= MAX_HIST else rng.choice(a, MAX_HIST, replace=False)
        b = b if b.size <= MAX_HIST else rng.choice(b, MAX_HIST, replace=False)
        both = np.concatenate([a, b])
        overlay = info.get("sigma", 0) > 0 and not info.get("no_overlay")
        centre, sigma, label = predicted(info) if overlay else (0.0, 0.0, "")
        lo, hi = axis_limits(both, centre, sigma)
        bins = bin_edges(both[(both >= lo) & (both <= hi)], lo, hi)
        ax.hist(a, bins=bins, density=True, histtype="step", lw=1.5, label="A", color="#0969da")
        ax.hist(b, bins=bins, density=True, histtype="step", lw=1.2, label="B", color="#cf222e")
        if overlay:
            x = np.linspace(lo, hi, 400)
            pdf = norm_pdf(x, centre, sigma)
            ax.plot(x, pdf, "k--", lw=1, label=label)
        m = metrics.get(name) or metrics.get(metric_names(name)[0], {})
        ks = m.get("ks_p")
        ax.set_title(f"{sensor}: {name}" + (f" (KS p {fmt(ks)})" if ks is not None else ""))
        beyond = int(np.sum((both < lo) | (both > hi)))
        ax.set_xlabel(
            f"{name} error ({unit})" + (f"; {beyond:,} beyond the axes" if beyond else "")
        )
        ax.set_ylabel(f"probability density ({per_unit(unit)})")
        ax.set_xlim(lo, hi)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    save_png(fig, path, 90)
    plt.close(fig)
    return path


def equivalence_plot(path: Path, report: dict) -> Path | None:
    """Each published metric's interval of B - A in units of its equivalence bound."""
    items = []
    for sensor, metrics in report["published"].items():
        for name, m in metrics.items():
            if "difference" not in m or None in m["ci"] or not m["tolerance"][1]:
                continue
            bound = m["tolerance"][1]
            norm = (m["difference"] / bound, *(c / bound for c in m["ci"]))
            items.append((f"{sensor}.{name}", norm, m["verdict"]))
    return interval_chart(
        path,
        items,
        "(B - A) / equivalence bound (interval as bar, clipped at ±3)",
        "published errors: B equivalent to A?",
    )


def write_plots(out: Path, res: Comparison) -> list[Path]:
    paths: list[Path | None] = []
    for sensor, diff in res.truth_diffs.items():
        if isinstance(diff, LidarTruthDiff):
            paths.append(lidar_plot(out / f"{sensor}_disagreement.png", sensor, diff))
            ex = getattr(diff, "explainer", None)
            if ex is not None:
                rep = res.report["explained"][sensor]
                paths.append(explained_plot(out / f"{sensor}_explained.png", sensor, ex, rep))
        elif isinstance(diff, CameraTruthDiff):
            paths.append(camera_plot(out / f"{sensor}_worst_frame.png", sensor, diff))
    for sensor, fields in res.samples.items():
        metrics = res.report["published"].get(sensor, {})
        paths.append(published_plot(out / f"{sensor}_published.png", sensor, fields, metrics))
    paths.append(equivalence_plot(out / "equivalence.png", res.report))
    return [p for p in paths if p is not None]
