"""Family-wise control of false FAILs across a report's metrics (Holm).

Each metric's FAIL rejects the hypothesis "the sensor conforms on this metric" (its true value
lies in the tolerance band). With dozens of metrics, each judged at its own 95 % level, a
conforming sensor would FAIL somewhere by chance in a sizeable share of runs. The family is
every judged metric of the report (all sensors, normality checks included); its level is
alpha = 1 - confidence. The rule:

- p of a metric: the smallest a such that its interval at level 1 - a lies wholly outside
  the band (the interval inverted as a test; intervals are nested, so this is a threshold).
  A normality check brings its own p-value. A metric whose interval cannot be recomputed (a
  deterministic bound such as latency_max_ms, or the camera's) that FAILs gets p = 0: it is
  kept as a FAIL, as before.
- Holm's step-down: sort the p-values, p(1) <= ... <= p(m); FAIL the metrics with
  p(i) <= alpha / (m - i + 1) up to the first that is not. Equivalently a metric FAILs only
  when its interval at its Holm-adjusted level excludes the band. P(any false FAIL) <= alpha
  whatever the dependence between metrics.
- A metric FAILing at its raw level but not after Holm becomes INCONCLUSIVE, with a note.
  PASS is unchanged (the whole raw-level interval inside the band): Holm controls false
  FAILs, not false PASSes.

Every judged metric gets `family` = {raw_level, adjusted_level, family_size, p}: the adjusted
level is the one Holm compared its p with (for metrics that are no candidate FAIL, the level
the next test would have faced).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from simconform.verify import stats

P_FLOOR = 1e-15  # p-values are resolved down to this (a FAIL beyond it is certain anyway)
STEPS = 48  # bisection steps on log10(p): resolution ~1e-15 * 10^(15/2^48): far below needs


def _excludes(refit: Callable, a: float, band: tuple[float, float]) -> bool:
    return stats.verdict(refit(1.0 - a).ci, band) == "fail"


def p_value(refit: Callable, band: tuple[float, float], alpha: float) -> float:
    """Smallest a in [P_FLOOR, alpha] with the level-(1 - a) interval outside `band`
    (bisection on log a); alpha itself if even that one does not exclude it (no FAIL)."""
    if not _excludes(refit, alpha, band):
        return 1.0
    if _excludes(refit, P_FLOOR, band):
        return P_FLOOR
    lo, hi = math.log10(P_FLOOR), math.log10(alpha)  # excludes at 10^hi, not at 10^lo
    for _ in range(STEPS):
        mid = (lo + hi) / 2
        if _excludes(refit, 10.0**mid, band):
            hi = mid
        else:
            lo = mid
    return 10.0**hi


def apply_holm(sensors: dict, refits: dict[str, dict[str, Callable]], level: float) -> dict:
    """Set every judged metric's final verdict by Holm at alpha = 1 - level (module doc);
    returns the family's summary for the report."""
    alpha = round(1.0 - level, 12)  # 0.05, not 0.050000000000000044
    family = []  # (p, sensor, metric name, entry)
    for sname, sensor in sensors.items():
        for mname, m in sensor["metrics"].items():
            v = m.get("verdict")
            if v not in ("pass", "fail", "inconclusive", "pending"):
                continue
            if "p_value" in m:  # a normality check
                p = m["p_value"] if m["p_value"] is not None else 1.0
            elif v == "fail":
                refit = refits.get(sname, {}).get(mname)
                band = tuple(m["tolerance"])
                p = p_value(refit, band, alpha) if refit is not None else 0.0
            else:
                p = 1.0  # a PASS or INCONCLUSIVE interval at 1 - alpha overlaps the band
            family.append((p, sname, mname, m))
    size = len(family)
    family.sort(key=lambda r: r[0])
    rejected = 0
    stopped = False
    for i, (p, sname, mname, m) in enumerate(family):
        adj = alpha / (size - i)
        reject = not stopped and p <= adj
        stopped = stopped or not reject
        if reject:
            rejected += 1
        if not reject and stopped:
            adj = alpha / (size - rejected)
        m["family"] = {
            "raw_level": alpha,
            "adjusted_level": adj,
            "family_size": size,
            "p": p if p < 1.0 else None,
        }
        if "p_value" in m:
            m["verdict"] = "fail" if reject else "pass"
            m["alpha"] = adj
            m.pop("field", None)
        elif m["verdict"] == "fail" and not reject:
            m["verdict"] = "inconclusive"
            note = (
                f"fails at the raw level {alpha:g} (p = {p:.3g}) but not at its Holm level "
                f"{adj:.3g} over {size} metrics: not a family-wise FAIL"
            )
            m["note"] = f"{m['note']}; {note}" if m.get("note") else note
        elif reject and p > 0:
            refit = refits[sname][mname]
            ci = refit(1.0 - adj).ci
            m["family"]["ci_at_adjusted_level"] = [float(ci[0]), float(ci[1])]
    return {
        "method": "holm",
        "alpha": alpha,
        "size": size,
        "fails": rejected,
        "rule": "FAIL only where the interval at the Holm-adjusted level excludes the band",
    }
