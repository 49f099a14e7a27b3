"""Campaign statistics: the cells' metrics grouped by (backend, variant, world) across seeds.

Across a group's seeds each sensor metric gets its pass rate, the seed-to-seed spread of the
measured value, and a coverage check of our own statistics: the share of seeds whose confidence
interval covers the configured value, which for a conforming backend must match the nominal
level. That check compares the count of covering seeds with the binomial law Bin(n, level),
two-sided at a family-wise level over every check of the campaign (Bonferroni, as the verifier
does for normality), so a correct campaign of many metrics is not flagged by chance; the
Clopper-Pearson interval of the share is reported as well. Coverage is a diagnostic: it does not
change the campaign verdict or junit.xml.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import numpy as np
from scipy.stats import binom, binomtest, norm

VERDICTS = ("pass", "inconclusive", "fail", "not_applicable")
NOT_RAN = ("crashed", "error", "not_run")
COVERAGE_SKIP = {
    "latency_max_ms": "the configured value is a bound on the maximum, not its mean",
    "range_lateral_rms": "the configured 0 is the ideal; rounding and deskew leave ~0.1 mm",
}


def cell_reports(out: Path, records: list[dict]) -> dict[str, dict]:
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
