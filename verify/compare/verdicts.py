"""The entries of compare.json's metric tables: informational (a value with no threshold), gated
(an exact value against its threshold), skipped, the TOST rule of the published errors, and the
overall verdict of the comparison."""

from __future__ import annotations

import math
from typing import Any

INFORMATIONAL = "informational"


def json_float(v: Any) -> float | None:
    """JSON-safe float: NaN and inf become null (the report says why where it matters)."""
    if v is None:
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def informational(value: Any, unit: str, n: int, **extra: Any) -> dict:
    out = {"measured": json_float(value), "unit": unit, "n": int(n), "verdict": "not_applicable"}
    out["reason"] = INFORMATIONAL
    out.update(extra)
    return out


def gated(value: float, band: tuple[float, float], unit: str, n: int, **extra: Any) -> dict:
    """A truth metric with a threshold: the value is exact (every ray/pixel), so no interval."""
    from simconform.verify.stats import verdict as decide

    v = float(value)
    verdict = "inconclusive" if math.isnan(v) else decide((v, v), band)
    out = {
        "measured": json_float(v),
        "tolerance": [json_float(band[0]), json_float(band[1])],
        "unit": unit,
    }
    out.update(n=int(n), verdict=verdict, **extra)
    return out


def skipped(reason: str, unit: str = "") -> dict:
    return {"verdict": "not_applicable", "reason": reason, "unit": unit}


def tost_level(confidence: float) -> float:
    """Two one-sided tests at alpha = 1 - confidence are one (1 - 2 alpha) two-sided interval."""
    return 2.0 * confidence - 1.0


def tost_verdict(ci: tuple[float, float], bound: float) -> str:
    """pass: the interval of the difference lies inside +-bound (equivalent); fail: wholly
    outside (shown different); inconclusive: it straddles a bound, or is NaN."""
    from simconform.verify.stats import verdict

    return verdict(ci, (-bound, bound))


def overall(sections: list[dict]) -> str:
    from simconform.verify.verifier import VERDICT_ORDER

    verdicts = {
        m["verdict"] for sec in sections for sensor in sec.values() for m in sensor.values()
    }
    for v in VERDICT_ORDER:
        if v in verdicts:
            return v
    return "not_applicable"
