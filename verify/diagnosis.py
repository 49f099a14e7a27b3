"""The likely cause of a FAIL, each hypothesis tested against the data (report `diagnosis`).

Any part of the verifier may add an entry with `add_diagnosis` (time-offset and frame
estimates from the alignment step are expected to); `diagnose_all` adds the ones testable
from the metrics themselves, for every sensor with a FAIL:

- outliers: the share beyond K robust sigmas (verify/robust.py) is far above a normal's
  (one-sided binomial test, p < 1e-3), those few carry most (>= 50 %) of the squared error,
  and the robust sigma is inside the sigma band: the bulk conforms, a few rays (edges,
  silhouettes, grazing rays, timing) do not. The rings and sectors where they concentrate
  are named.
- noise_shape: no outlier explanation, and the excess kurtosis is beyond both 0.5 and 4 of
  its standard errors sqrt(24 / n): heavy (Laplace: +3) or light (uniform: -1.2) tails.
- scale: the std FAILs and the robust sigma is outside the band on the same side: the whole
  distribution is wider or narrower, not a few points.
- bias: the bias FAILs and the median's interval is outside the bias band as well.
- lateral: points lie off their true rays (timing or frame, not range noise).
- gross: the median itself lies beyond +-64 sigma: a wrong frame, unit or pairing.
- rate, dropout, latency: the stamps' period, the count, the delays, as measured.
- time_offset: replay's estimated offset between the pose stream and the sensor
  (adapters/replay/align.py) lies beyond the latency tolerance; the other metrics were judged
  with it compensated.

Edge outliers (errors at silhouettes, verify/lidar_edges.py) are left out of the range metrics
before any of this, so a FAIL here is not caused by them.
"""

from __future__ import annotations

import math

from simconform.verify.distributions import binom_sf

MIN_SHARE_OF_SQ = 0.5
P_OUTLIERS = 1e-3
KURTOSIS_MIN = 0.5


def add_diagnosis(
    sensor: dict,
    cause: str,
    evidence: str,
    test: str,
    metrics: list[str],
    source: str = "verify",
) -> None:
    """Append one diagnosis entry to a sensor of the report (the hook for other parts)."""
    sensor.setdefault("diagnosis", []).append(
        {"cause": cause, "evidence": evidence, "test": test, "metrics": metrics, "source": source}
    )


def _inside(v: float | None, band: list) -> bool | None:
    if v is None or None in band:
        return None
    return band[0] <= v <= band[1]


def _series(metrics: dict) -> dict[str, dict[str, str]]:
    """{series: {'bias': name, 'std': name, ...}} for quantity[_axis] error series."""
    out: dict[str, dict[str, str]] = {}
    for name in metrics:
        for kind in ("bias", "std", "rmse", "normality", "lateral_rms"):
            tag = f"_{kind}"
            if tag in name:
                q, _, axis = name.partition(tag)
                key = q + axis
                out.setdefault(key, {})[kind] = name
    return out


def _worst_groups(sensor: dict, key: str, label: str) -> str:
    rows = (sensor.get("breakdown") or {}).get(key) or []
    rows = [r for r in rows if r.get("outlier_fraction") is not None and r.get("n", 0) > 0]
    if not rows:
        return ""
    rows.sort(key=lambda r: -r["outlier_fraction"])
    top = ", ".join(f"{label} {r['index']} ({100 * r['outlier_fraction']:.2g} %)" for r in rows[:3])
    return f"; most outliers in {top}"


def _diagnose_series(sensor: dict, series: str, names: dict[str, str]) -> None:
    ms = sensor["metrics"]
    std = ms.get(names.get("std", ""), {})
    bias = ms.get(names.get("bias", ""), {})
    rob = std.get("robust") or {}
    failed = [n for n in names.values() if ms[n].get("verdict") == "fail"]
    if not failed:
        return
    explained = False
    if rob.get("outside_grid") and rob.get("median") is None:
        add_diagnosis(
            sensor,
            "gross",
            f"{series}: {rob['outside_grid']} of {rob['n']} errors lie beyond the histogram "
            "(+-64 sigma of the configured bias), the median among them: the samples are "
            "grossly misplaced (a wrong frame, unit or pairing), not noisy",
            "median of the fixed-memory histogram outside its grid",
            failed,
        )
        return
    n, k = rob.get("n") or 0, rob.get("outliers")
    frac0, share = rob.get("normal_outlier_fraction"), rob.get("outlier_share_of_sq")
    rs = rob.get("robust_sigma")
    if n and k is not None and frac0 is not None and share is not None:
        p = float(binom_sf(k - 1, n, frac0)) if k > 0 else 1.0
        robust_ok = _inside(rs, std.get("tolerance", [None, None]))
        if p < P_OUTLIERS and share >= MIN_SHARE_OF_SQ and robust_ok:
            where = _worst_groups(sensor, "per_ring", "ring") + _worst_groups(
                sensor, "per_sector", "sector"
            )
            add_diagnosis(
                sensor,
                "outliers",
                f"{100 * k / n:.3g} % of the {series} errors lie beyond "
                f"{rob['k_outlier']:g} robust sigmas (a normal has {100 * frac0:.2g} %) and "
                f"carry {100 * share:.0f} % of the squared error; the robust sigma "
                f"{rs:.4g} is within tolerance{where}",
                "binomial test of the outlier count against a normal's "
                f"(p = {p:.2g} < {P_OUTLIERS:g}), share of squared error >= "
                f"{100 * MIN_SHARE_OF_SQ:.0f} %, robust sigma inside the sigma band",
                failed,
            )
            explained = True
    kurt = rob.get("excess_kurtosis")
    if not explained and kurt is not None and n > 3:
        se = math.sqrt(24.0 / n)
        if abs(kurt) > max(KURTOSIS_MIN, 4 * se):
            tails = "heavy (Laplace-like)" if kurt > 0 else "light (uniform-like)"
            add_diagnosis(
                sensor,
                "noise_shape",
                f"{series}: excess kurtosis {kurt:.3g} (0 for the spec's normal noise; "
                f"Laplace +3, uniform -1.2): {tails} tails",
                f"|excess kurtosis| > max({KURTOSIS_MIN:g}, 4 x its s.e. {se:.2g}), "
                "no outlier explanation",
                failed,
            )
            explained = True
    if names.get("std") in failed and rs is not None:
        band = std["tolerance"]
        side = (rs > band[1] and std["measured"] > band[1]) or (
            rs < band[0] and std["measured"] < band[0]
        )
        if side and not explained:
            add_diagnosis(
                sensor,
                "scale",
                f"{series}: std {std['measured']:.4g} and robust sigma {rs:.4g} both outside "
                f"[{band[0]:.4g}, {band[1]:.4g}]: the whole distribution is "
                f"{'wider' if rs > band[1] else 'narrower'} than the spec's sigma",
                "robust sigma (1.4826 MAD) outside the sigma band on the same side as the std",
                [names["std"]],
            )
    if names.get("bias") in failed:
        mci = rob.get("median_ci") or [None, None]
        band = bias["tolerance"]
        whole = None not in mci and (mci[0] > band[1] or mci[1] < band[0])
        add_diagnosis(
            sensor,
            "bias",
            f"{series}: mean {bias['measured']:.4g} outside [{band[0]:.4g}, {band[1]:.4g}]"
            + (
                f"; the median's interval [{mci[0]:.4g}, {mci[1]:.4g}] is too: the whole "
                "distribution is shifted"
                if whole
                else "; the median is not clearly shifted: the mean is pulled by a few errors"
            ),
            "mean interval and median order-statistic interval against the bias band",
            [names["bias"]],
        )
    lat = names.get("lateral_rms")
    if lat in failed:
        m = ms[lat]
        add_diagnosis(
            sensor,
            "lateral",
            f"points lie {m['measured']:.3g} m (RMS) off their true rays; range noise moves "
            "them along the ray only: a time offset between pose and sensor, per-point time "
            "ignored, or a wrong frame",
            "RMS of the displacement across the true ray against the lateral band",
            [lat],
        )


def diagnose_all(sensors: dict) -> None:
    """Add the testable diagnoses to every sensor with a FAIL (module doc)."""
    for sensor in sensors.values():
        ms = sensor["metrics"]
        if not any(m.get("verdict") == "fail" for m in ms.values()):
            continue
        for series, names in _series(ms).items():
            _diagnose_series(sensor, series, names)
        rate = ms.get("rate_hz", {})
        if rate.get("verdict") == "fail":
            add_diagnosis(
                sensor,
                "rate",
                f"the stamps' median period gives {rate['measured']:.5g} Hz, the spec "
                f"{rate['configured']:.5g} Hz (stamp jitter {rate.get('period_jitter_ms')} ms)",
                "median period of consecutive stamps (drops left out) against the rate band",
                ["rate_hz"],
            )
        for name in ("sample_dropout", "point_dropout"):
            m = ms.get(name, {})
            if m.get("verdict") == "fail":
                add_diagnosis(
                    sensor,
                    "dropout",
                    f"{name} {m['measured']:.4g}, the spec {m['configured']:.4g}",
                    "Wilson interval of the lost share against the dropout band",
                    [name],
                )
        off = ms.get("time_offset_ms", {})
        if off.get("verdict") == "fail":
            lo, hi = off["ci"]
            add_diagnosis(
                sensor,
                "time_offset",
                f"the pose stream and the sensor's stamps are {off['measured']:.3g} ms apart "
                f"(CI [{lo:.3g}, {hi:.3g}] ms), beyond the latency tolerance "
                f"[{off['tolerance'][0]:.3g}, {off['tolerance'][1]:.3g}] ms; the other "
                "metrics were judged with the offset compensated",
                "CI of the estimated offset (replay alignment) against the latency tolerance",
                ["time_offset_ms"],
                source="replay alignment",
            )
        late = [n for n, m in ms.items() if n.startswith("latency") and m["verdict"] == "fail"]
        if late:
            m = ms[late[0]]
            add_diagnosis(
                sensor,
                "latency",
                f"{late[0]} {m['measured']:.4g} ms, the spec {m['configured']:.4g} ms",
                "publish delay (log time - stamp) intervals against the latency bands",
                late,
            )
