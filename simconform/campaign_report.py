"""Campaign report: campaign.json, campaign.md, junit.xml and plots/ from the cells' reports.

Cells are grouped by (backend, variant, world); across a group's seeds each sensor metric gets
its pass rate, the seed-to-seed spread of the measured value, and a coverage check of our own
statistics: the share of seeds whose confidence interval covers the configured value, which
for a conforming backend must match the nominal level. That check compares the count of
covering seeds with the binomial law Bin(n, level), two-sided at a family-wise level over every
check of the campaign (Bonferroni, as the verifier does for normality), so a correct campaign of
many metrics is not flagged by chance; the Clopper-Pearson interval of the share is reported as
well. Coverage is a diagnostic: it does not change the campaign verdict or junit.xml, which has
one testsuite per cell and one testcase per sensor metric (the same cases as the cell's own
junit.xml), plus one errored "run" case for a cell that crashed, raised or was not run.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path
from xml.etree import ElementTree as ET

import numpy as np
from scipy.stats import binom, binomtest, norm

VERDICTS = ("pass", "inconclusive", "fail", "not_applicable")
NOT_RAN = ("crashed", "error", "not_run")
COVERAGE_SKIP = {"latency_max_ms": "the configured value is a bound on the maximum, not its mean"}
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf")


def _cell_reports(out: Path, records: list[dict]) -> dict[str, dict]:
    reports = {}
    for r in records:
        if r["status"] in VERDICTS:
            path = out / r["path"] / "report" / "report.json"
            try:
                reports[r["id"]] = json.loads(path.read_text())
            except (OSError, ValueError):
                r.update(status="error", error=f"unreadable {path.name}")
    return reports


def _eps(v: float) -> float:
    return 1e-9 * max(1.0, abs(v))


def target(m: dict) -> float | None:
    """The value the CI should cover: the configured one, or for metrics that the verifier
    predicts (camera noise after clamp, round and JPEG) the prediction."""
    return m.get("predicted", m.get("configured"))


def covers(m: dict) -> bool | None:
    """Does the metric's CI contain its target value? None when it has no CI."""
    ci, c = m.get("ci"), target(m)
    if not ci or ci[0] is None or ci[1] is None or c is None:
        return None
    return ci[0] - _eps(c) <= c <= ci[1] + _eps(c)


def standardized_miss(m: dict, level: float) -> float | None:
    """(configured - measured) in units of the CI's half-width on that side, times z: the
    CI covers the configured value exactly when |result| <= z (plotted per seed)."""
    ci, c, x = m.get("ci"), target(m), m.get("measured")
    if covers(m) is None or x is None:
        return None
    z = float(norm.ppf(0.5 + level / 2))
    half = (ci[1] - x) if c >= x else (x - ci[0])
    if half <= _eps(c):
        return 0.0 if abs(c - x) <= _eps(c) else math.copysign(4 * z, c - x)
    return float(np.clip((c - x) / half * z, -4 * z, 4 * z))


def _has_spread(per_seed: list[dict]) -> bool:
    """Whether any CI has a width: if none has, nothing was random and coverage is exact."""
    judged = [m for m in per_seed if covers(m) is not None]
    return any(m["ci"][1] - m["ci"][0] > _eps(m["configured"]) for m in judged)


def coverage(per_seed: list[dict], level: float, alpha: float) -> dict:
    """Share of seeds whose CI covers the configured value against Bin(n, level)."""
    judged = [m for m in per_seed if covers(m) is not None]
    n, k = len(judged), sum(bool(covers(m)) for m in judged)
    if n == 0:
        return {"status": "n/a", "reason": "no confidence interval", "n": 0}
    exact = not _has_spread(judged)
    lo_k, hi_k = int(binom.ppf(alpha / 2, n, level)), int(binom.isf(alpha / 2, n, level))
    ci = binomtest(k, n).proportion_ci(confidence_level=level, method="exact")
    if exact:
        status = "exact" if k == n else "low"
    else:
        status = "ok" if lo_k <= k <= hi_k else ("low" if k < lo_k else "high")
    return {
        "covered": k,
        "n": n,
        "rate": k / n,
        "nominal": level,
        "ci": [float(ci.low), float(ci.high)],
        "expected": [lo_k, hi_k],
        "alpha": alpha,
        "status": status,
    }


def summarize(meta: dict, records: list[dict], reports: dict[str, dict]) -> dict:
    level = meta["confidence"]
    order = {v: i for i, v in enumerate(meta["variants"])}
    keyed: dict[tuple, list[dict]] = {}
    for r in records:
        rep = reports.get(r["id"])
        if rep is None:
            continue
        for sname, sensor in rep["sensors"].items():
            for mname, m in sensor["metrics"].items():
                key = (r["backend"], r["variant"], r["scene"], sname, mname)
                keyed.setdefault(key, []).append({"seed": r["seed"], **m})
    rows = []
    n_checks = 0
    for key, per_seed in keyed.items():
        per_seed.sort(key=lambda m: m["seed"])
        n_checks += key[4] not in COVERAGE_SKIP and _has_spread(per_seed)
    alpha = (1 - level) / max(1, n_checks)
    for (backend, variant, scene, sname, mname), per_seed in keyed.items():
        verdicts = Counter(m["verdict"] for m in per_seed)
        judged = sum(verdicts[v] for v in ("pass", "inconclusive", "fail"))
        measured = [m["measured"] for m in per_seed if m.get("measured") is not None]
        configured = sorted({m.get("configured") for m in per_seed} - {None})
        cov = (
            {"status": "n/a", "reason": COVERAGE_SKIP[mname], "n": 0}
            if mname in COVERAGE_SKIP
            else coverage(per_seed, level, alpha)
        )
        rows.append(
            {
                "backend": backend,
                "variant": variant,
                "scene": scene,
                "sensor": sname,
                "metric": mname,
                "unit": next((m.get("unit") for m in per_seed if m.get("unit")), ""),
                "cells": len(per_seed),
                "verdicts": dict(verdicts),
                "pass_rate": verdicts["pass"] / judged if judged else None,
                "configured": configured[0] if len(configured) == 1 else configured or None,
                "measured": {
                    "mean": float(np.mean(measured)) if measured else None,
                    "std": float(np.std(measured, ddof=1)) if len(measured) > 1 else None,
                    "min": min(measured) if measured else None,
                    "max": max(measured) if measured else None,
                },
                "coverage": cov,
                "per_seed": [
                    {
                        k: m.get(k)
                        for k in ("seed", "measured", "ci", "configured", "tolerance", "verdict")
                    }
                    for m in per_seed
                ],
            }
        )
    rows.sort(key=lambda r: (r["backend"], order.get(r["variant"], 0), r["scene"]))
    groups: dict[tuple, dict] = {}
    for r in records:
        g = groups.setdefault(
            (r["backend"], r["variant"], r["scene"]),
            {
                "backend": r["backend"],
                "variant": r["variant"],
                "scene": r["scene"],
                "cells": 0,
                "counts": Counter(),
                "coverage_flags": 0,
            },
        )
        g["cells"] += 1
        g["counts"][r["status"]] += 1
    for row in rows:
        if row["coverage"]["status"] in ("low", "high"):
            groups[(row["backend"], row["variant"], row["scene"])]["coverage_flags"] += 1
    totals = Counter(r["status"] for r in records)
    statuses = set(totals)
    if statuses & {"fail", *NOT_RAN}:
        verdict = "fail"
    elif "inconclusive" in statuses:
        verdict = "inconclusive"
    else:
        verdict = "pass"
    return {
        "campaign": meta,
        "totals": {
            "cells": len(records),
            "resumed": sum(bool(r.get("resumed")) for r in records),
            **{s: totals.get(s, 0) for s in (*VERDICTS, *NOT_RAN)},
            "coverage_checks": n_checks,
            "coverage_flags": sum(g["coverage_flags"] for g in groups.values()),
        },
        "groups": [{**g, "counts": dict(g["counts"])} for g in groups.values()],
        "metrics": rows,
        "cells": records,
        "verdict": verdict,
    }


# --------------------------------------------------------------------------- text reports


def _fmt(v) -> str:
    from simconform.verify.report import fmt

    if isinstance(v, list):
        return "varies"
    return fmt(v)


def markdown(report: dict, plots: list[str]) -> str:
    c, t = report["campaign"], report["totals"]
    seeds = c["seeds"]
    seed_txt = f"{len(seeds)} seeds ({seeds[0]}..{seeds[-1]})" if len(seeds) > 3 else str(seeds)
    dur = f"{c['duration_s']:g} s" if c["duration_s"] else "whole trajectory"
    out = [
        f"# simconform campaign `{c['name']}`: {report['verdict'].upper()}",
        "",
        f"- {t['cells']} cells ({t['resumed']} resumed from an earlier run), executor "
        f"`{c['executor']}` with {c['jobs'] or 'cluster-wide'} jobs, {c['wall_s']:.1f} s wall",
        f"- spec `{c['spec']}`; backends {', '.join(c['backends'])}; {seed_txt}; "
        f"duration {dur}; confidence {c['confidence']:g}",
        "- variants: "
        + "; ".join(
            f"`{n}` {json.dumps(o) if o else '(base spec)'}" for n, o in c["variants"].items()
        ),
        "- worlds: "
        + "; ".join(f"`{n}` {w['world']} + {w['trajectory']}" for n, w in c["worlds"].items()),
        f"- cells: {', '.join(f'{s} {t[s]}' for s in (*VERDICTS, *NOT_RAN) if t[s])}",
    ]
    if c.get("interrupted"):
        out.append("- **Interrupted**: cells marked not_run were not run; rerun to resume.")
    out += ["", "## Groups", "", "| backend | variant | world | cells | status | coverage flags |"]
    out.append("|---|---|---|---|---|---|")
    for g in report["groups"]:
        st = ", ".join(f"{k} {v}" for k, v in sorted(g["counts"].items()))
        out.append(
            f"| {g['backend']} | {g['variant']} | {g['scene']} | {g['cells']} | {st} | "
            f"{g['coverage_flags']} |"
        )
    out += [
        "",
        "## Sensor metrics over seeds",
        "",
        "Pass rate over the cells where the metric applies; measured mean ± seed-to-seed "
        "standard deviation. Coverage: seeds whose CI covers the configured value, k/n, with the "
        "Clopper-Pearson interval of the share, against the range Bin(n, level) allows at the "
        f"family-wise level {1 - c['confidence']:g} over {t['coverage_checks']} checks "
        "(exact: every CI has zero width and equals the configured value).",
        "",
        "| backend | variant | world | sensor | metric | pass rate | configured | measured "
        "| coverage | share CI | expected k | status |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["metrics"]:
        pr = "-" if r["pass_rate"] is None else f"{100 * r['pass_rate']:.0f}%"
        m = r["measured"]
        meas = "-" if m["mean"] is None else _fmt(m["mean"])
        if m["std"] is not None:
            meas += f" ± {_fmt(m['std'])}"
        cov = r["coverage"]
        if cov["n"]:
            k = f"{cov['covered']}/{cov['n']}"
            share = f"[{cov['ci'][0]:.3f}, {cov['ci'][1]:.3f}]"
            expect = f"[{cov['expected'][0]}, {cov['expected'][1]}]"
        else:
            k = share = expect = "-"
        unit = f" [{r['unit']}]" if r["unit"] and r["unit"] != "1" else ""
        out.append(
            f"| {r['backend']} | {r['variant']} | {r['scene']} | {r['sensor']} | "
            f"{r['metric']}{unit} | {pr} | {_fmt(r['configured'])} | {meas} | {k} | {share} | "
            f"{expect} | {cov['status']} |"
        )
    out += ["", "## Cells", "", "| cell | status | attempts | resumed | wall | note |"]
    out.append("|---|---|---|---|---|---|")
    for r in report["cells"]:
        wall = f"{r['wall_s']:.1f} s" if r.get("wall_s") else "-"
        link = f"[{r['id']}]({r['path']}/report/report.md)" if r["status"] in VERDICTS else r["id"]
        out.append(
            f"| {link} | {r['status']} | {r['attempts']} | {'yes' if r.get('resumed') else ''} | "
            f"{wall} | {r.get('error') or ''} |"
        )
    out.append("")
    out += [f"![{p}]({p})" for p in plots]
    return "\n".join(out) + "\n"


def junit(report: dict) -> str:
    suites = ET.Element("testsuites", name=f"simconform.campaign.{report['campaign']['name']}")
    for cell in report["cells"]:
        cid = cell["id"]
        suite = ET.SubElement(suites, "testsuite", name=f"simconform.campaign.{cid}")
        counts = Counter()
        if cell["status"] in NOT_RAN:
            case = ET.SubElement(suite, "testcase", classname=f"campaign.{cid}", name="run")
            ET.SubElement(case, "error", type=cell["status"], message=cell.get("error") or "")
            counts["errors"] += 1
            counts["tests"] += 1
        for r in report["metrics"]:
            if (r["backend"], r["variant"], r["scene"]) != (
                cell["backend"],
                cell["variant"],
                cell["scene"],
            ):
                continue
            m = next((m for m in r["per_seed"] if m["seed"] == cell["seed"]), None)
            if m is None:
                continue
            counts["tests"] += 1
            case = ET.SubElement(
                suite, "testcase", classname=f"campaign.{cid}.{r['sensor']}", name=r["metric"]
            )
            if m["verdict"] == "not_applicable":
                ET.SubElement(case, "skipped", message="not applicable")
                counts["skipped"] += 1
            elif m["verdict"] in ("fail", "inconclusive"):
                msg = f"{m['verdict']}: measured {_fmt(m.get('measured'))}"
                if m.get("ci"):
                    msg += f", ci {m['ci']}, tolerance {m['tolerance']}"
                ET.SubElement(case, "failure", type=m["verdict"], message=msg)
                counts["failures"] += 1
        for k in ("tests", "failures", "errors", "skipped"):
            suite.set(k, str(counts[k]))
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


# --------------------------------------------------------------------------- plots


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _grid(n: int, cols: int = 3, w: float = 4.0, h: float = 3.0):
    plt = _plt()
    cols = max(1, min(cols, n))
    nrows = math.ceil(n / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(w * cols, h * nrows), squeeze=False)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    return plt, fig, list(axes.flat)


def _save(plt, fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=90)
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


def write_campaign_report(out: Path, meta: dict, records: list[dict]) -> dict:
    """Summarize the cells, write campaign.json, campaign.md, junit.xml and plots/; return it."""
    reports = _cell_reports(out, records)
    report = summarize(meta, records, reports)
    plots = [p.relative_to(out).as_posix() for p in write_plots(out / "plots", report)]
    report["plots"] = plots
    (out / "campaign.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "campaign.md").write_text(markdown(report, plots))
    (out / "junit.xml").write_text(junit(report))
    return report
