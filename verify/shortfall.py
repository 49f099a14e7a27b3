"""How much longer a run would have to be: every INCONCLUSIVE metric of a report gets
`planned` = {power, duration_s, more_s} and a sentence in its note (which every report shows).

Two views, both stated: the plan (verify/planning.py: the length at which a *conforming*
sensor PASSes with DEFAULT_POWER, from the spec and this run's own lidar returns per sweep),
and this run's own interval: a measured value outside the band will not PASS with more data
(if that is the true value, more data makes it FAIL); one inside it would need about
(half-width / room)^2 times this run's length for its interval to fit (it narrows as
1 / sqrt(n)).
"""

from __future__ import annotations

import math

from simconform.spec import Spec
from simconform.verify.planning import DEFAULT_POWER, MetricPlan, plan_spec


def annotate(
    sensors: dict, spec: Spec, level: float, duration_s: float, returns: dict[str, float]
) -> None:
    """Add `planned` and the note to every INCONCLUSIVE metric of `sensors` (report entries)."""
    todo = {
        name
        for name, s in sensors.items()
        if name in spec.sensors
        and any(m["verdict"] == "inconclusive" for m in s["metrics"].values())
    }
    if not todo:
        return
    plan = plan_spec(spec, level, DEFAULT_POWER, returns, only=todo)
    for name in todo:
        for mname, m in sensors[name]["metrics"].items():
            if m["verdict"] != "inconclusive":
                continue
            mp = plan.find(name, mname)
            text = [t for t in (_planned(m, mp, duration_s), _own(m, duration_s)) if t]
            if text:
                m["note"] = "; ".join([*([m["note"]] if m.get("note") else []), *text])


def _planned(m: dict, mp: MetricPlan | None, duration_s: float) -> str:
    if mp is None:
        return ""
    pct = f"{DEFAULT_POWER:.0%}"
    if mp.duration_s is None:
        m["planned"] = {"power": DEFAULT_POWER, "duration_s": None, "more_s": None}
        return f"INCONCLUSIVE at any run length for a conforming sensor: {mp.why}"
    more = max(mp.duration_s - duration_s, 0.0)
    m["planned"] = {"power": DEFAULT_POWER, "duration_s": mp.duration_s, "more_s": round(more, 3)}
    if more > 0:
        return (
            f"INCONCLUSIVE: a run of about {mp.duration_s:g} s ({more:.3g} s longer than this "
            f"one) PASSes with {pct} power if the sensor conforms (simconform plan)"
        )
    return (
        f"INCONCLUSIVE although {duration_s:g} s is at least the {mp.duration_s:g} s at which a "
        f"conforming sensor PASSes with {pct} power: chance, or the sensor is off its spec"
    )


def _own(m: dict, duration_s: float) -> str:
    """This run's own interval: where its value lies and how long it would take to fit."""
    ci, band, x = m.get("ci"), m.get("tolerance"), m.get("measured")
    if not ci or not band or None in (*ci, *band, x) or duration_s <= 0:
        return ""
    lo, hi = band
    if not lo <= x <= hi:
        return (
            "the measured value lies outside the tolerance (if that is the true value, a "
            "longer run FAILs)"
        )
    half = (ci[1] - ci[0]) / 2
    room = min(x - lo, hi - x)
    if room <= 0 or not math.isfinite(half) or half <= 0:
        return ""
    need = duration_s * (half / room) ** 2
    return f"with this run's own value and spread, about {need:.3g} s in all"
