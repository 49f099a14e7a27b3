"""The accumulator every sensor's verification builds on, and the shape of a metric entry.

An accumulator takes a sensor's paired samples (verify/pairing.py) and produces its metrics;
this module holds the common part (capture stamps, sample dropout, latency, rate, and the
bias/std/rmse/normality of one error series) so that the per-sensor accumulators (metrics.py,
camera.py) depend on it and not on each other. Each metric is a dict with stable keys (see
DESIGN.md, report.json): measured, ci, configured, tolerance, verdict, n, unit, and for a
normality check its p_value.
"""

from __future__ import annotations

import itertools

import numpy as np
from scipy.stats import binom

from simconform.verify import stats
from simconform.verify import tolerances as tl
from simconform.verify.pairing import Pair, Unpaired
from simconform.verify.robust import robust_of_array


def metric(est: stats.Estimate, configured: float, band, unit: str, refit=None, **extra) -> dict:
    """A metric entry. `refit(level) -> Estimate` recomputes the interval at another level:
    the family-wise step (verify/family.py) uses it to find the level at which a FAIL holds;
    Accumulator.metrics() moves it out of the entry."""
    out = {
        "measured": _f(est.value),
        "ci": [_f(est.ci[0]), _f(est.ci[1])],
        "configured": _f(configured),
        "tolerance": [_f(band[0]), _f(band[1])],
        "verdict": stats.verdict(est.ci, band),
        "n": int(est.n),
        "unit": unit,
    }
    out.update(extra)
    if refit is not None:
        out["_refit"] = refit
    return out


def not_applicable(reason: str, unit: str = "") -> dict:
    return {"verdict": "not_applicable", "reason": reason, "unit": unit}


def _num(v):
    """JSON-ready robust entry: floats finite or None, anything else as is."""
    if isinstance(v, (float, np.floating)):
        return _f(v)
    if isinstance(v, np.integer):
        return int(v)
    return v


def _f(v) -> float | None:
    v = float(v)
    return v if np.isfinite(v) else None


def normality(x: np.ndarray, name: str) -> dict:
    """Anderson-Darling check; the verdict is set by the report with a family-wise level."""
    if len(x) < 8:
        return not_applicable("fewer than 8 error samples")
    a2, p = stats.anderson_normal(x)
    return {
        "measured": _f(a2),
        "p_value": _f(p),
        "n": int(min(len(x), 5000)),
        "unit": "A2",
        "verdict": "pending",
        "field": name,
    }


def quantile_estimate(x: np.ndarray, q: float, level: float) -> stats.Estimate:
    """Sample quantile with the distribution-free order-statistic interval."""
    n = len(x)
    if n < 2:
        return stats.Estimate(float("nan"), (float("nan"), float("nan")), n, level)
    a = (1 - level) / 2
    lo = int(max(binom.ppf(a, n, q) - 1, 0))
    hi = int(min(binom.ppf(1 - a, n, q), n - 1))
    s = np.sort(x)
    return stats.Estimate(float(np.quantile(x, q)), (float(s[lo]), float(s[hi])), n, level)


class Accumulator:
    """Common part: capture stamps, publish delays, sample dropout, latency and rate."""

    def __init__(self, name: str, spec, level: float, duration_s: float) -> None:
        self.name = name
        self.spec = spec
        self.level = level
        self.duration_s = duration_s
        self.truth_stamps: list[int] = []
        self.pub_stamps: list[int] = []
        self.log_ns: list[int] = []
        self.samples: dict[str, dict] = {}  # error arrays for plots: field -> {errors, sigma, bias}
        self.gaps: list = []  # verify.integrity.Gap: spans of the bag that are lost or damaged
        self.refits: dict = {}  # metric -> refit(level), filled by metrics()

    def crosses_gap(self, a_ns: int, b_ns: int) -> bool:
        """Whether a gap of the bag lies between two samples (log or capture times)."""
        return any(g.overlaps(a_ns, b_ns) for g in self.gaps)

    def add(self, item: Pair | Unpaired) -> None:
        self.truth_stamps.append(item.stamp_ns)
        if isinstance(item, Pair):
            self.pub_stamps.append(item.stamp_ns)
            self.log_ns.append(item.log_ns)
            self.add_pair(item)
        else:
            self.add_unpaired(item)

    def add_pair(self, pair: Pair) -> None:
        raise NotImplementedError

    def add_unpaired(self, item: Unpaired) -> None:
        """A dropped sample; its truth matters only to sensors that integrate (odometry)."""

    def metrics(self) -> dict[str, dict]:
        out = self.field_metrics()
        out.update(self.common_metrics())
        self.refits = {k: m.pop("_refit") for k, m in out.items() if "_refit" in m}
        return out

    def field_metrics(self) -> dict[str, dict]:
        raise NotImplementedError

    def details(self) -> dict:
        """Sensor-level report entries beside the metrics (e.g. the lidar's `breakdown`)."""
        return {}

    def common_metrics(self) -> dict[str, dict]:
        s, tol, lv = self.spec, self.spec.tolerances, self.level
        n_truth, n_pub = len(self.truth_stamps), len(self.pub_stamps)
        out = {
            "sample_dropout": metric(
                stats.wilson(n_truth - n_pub, n_truth, lv),
                s.dropout.sample,
                tl.dropout_band(s.dropout.sample, tol),
                "1",
                refit=lambda a: stats.wilson(n_truth - n_pub, n_truth, a),
            )
        }
        if n_pub == 0:
            for m in ("latency_ms", "rate_hz"):
                out[m] = not_applicable("nothing was published")
            return out
        lat = (np.asarray(self.log_ns) - np.asarray(self.pub_stamps)) / 1e6
        mean_ms = s.latency.fixed_ms  # symmetric truncation: the jitter has mean zero
        out["latency_ms"] = metric(
            stats.mean_ci(lat, lv),
            mean_ms,
            tl.latency_band(mean_ms, tol),
            "ms",
            refit=lambda a: stats.mean_ci(lat, a),
        )
        for q, key in ((0.5, "latency_p50_ms"), (0.95, "latency_p95_ms")):
            expect = tl.latency_quantile_ms(s.latency, q)
            out[key] = metric(
                quantile_estimate(lat, q, lv),
                expect,
                tl.latency_band(expect, tol),
                "ms",
                refit=lambda a, q=q: quantile_estimate(lat, q, a),
            )
        mx = float(lat.max())
        bound = tl.latency_max_ms(s.latency)
        out["latency_max_ms"] = metric(
            stats.Estimate(mx, (mx, mx), len(lat), lv),
            bound,
            (0.0, tl.latency_band(bound, tol)[1]),
            "ms",
        )
        out["rate_hz"] = self.rate_metric()
        return out

    def rate_metric(self) -> dict:
        """The rate from the published capture stamps' period (stats.rate_from_periods), judged
        against the spec's rate: dropped samples are sample_dropout's, not the rate's."""
        s, lv = self.spec, self.level
        st = np.unique(np.asarray(self.pub_stamps, dtype=np.int64))
        pairs = np.diff(st)
        if self.gaps:  # only the intervals between two samples on the same side of every gap
            late = round(tl.latency_max_ms(s.latency) * 1e6)  # a stamp is logged up to late after
            keep = [not self.crosses_gap(int(a), int(b) + late) for a, b in itertools.pairwise(st)]
            pairs = pairs[np.asarray(keep, dtype=bool)]
        est, jitter, dropped = stats.rate_from_periods(pairs, lv)
        return metric(
            est,
            s.rate_hz,
            tl.relative_band(s.rate_hz, s.tolerances.rate_rel),
            "Hz",
            refit=lambda a: stats.rate_from_periods(pairs, a)[0],
            period_jitter_ms=_f(jitter * 1e3),
            intervals_with_drops=dropped,
        )

    def scalar_metrics(
        self,
        quantity: str,
        axis: str,
        e: np.ndarray,
        bias: float,
        sigma: float,
        unit: str,
        walk: float = 0.0,
        dt: float = 0.0,
    ) -> dict[str, dict]:
        """bias, std, rmse (+ bias random walk) and normality of one error series."""
        tol, lv = self.spec.tolerances, self.level
        sfx = f"_{axis}" if axis else ""
        self.samples[f"{quantity}{sfx}"] = {"errors": e, "sigma": sigma, "bias": bias, "unit": unit}
        if len(e) < 3:
            return {f"{quantity}_bias{sfx}": not_applicable("fewer than 3 paired samples", unit)}
        t_span = self.duration_s
        extra = walk**2 * t_span / 3.0 if walk > 0 else 0.0
        out = {
            f"{quantity}_bias{sfx}": metric(
                stats.mean_ci(e, lv, extra_var_of_mean=extra),
                bias,
                tl.bias_band(bias, sigma, tol),
                unit,
                refit=lambda a: stats.mean_ci(e, a, extra_var_of_mean=extra),
            )
        }
        if walk > 0:

            def std_at(a: float) -> stats.Estimate:
                return stats.std_from_pair_differences(e, a, walk_var_per_step=walk**2 * dt)

            white = (np.diff(e)[::2] / np.sqrt(2.0)) if len(e) > 1 else e
        else:

            def std_at(a: float) -> stats.Estimate:
                return stats.std_ci(e, a)

            white = e
        std = std_at(lv)
        rob = robust_of_array(e, sigma, lv, centre=bias)
        out[f"{quantity}_std{sfx}"] = metric(
            std,
            sigma,
            tl.sigma_band(sigma, tol),
            unit,
            refit=std_at,
            robust={k: _num(v) for k, v in rob.items()},
        )
        rmse = tl.rmse_expected(bias, sigma, walk, t_span)
        if walk > 0:  # the histogram's overlay: white noise widened by the walk over the run
            self.samples[f"{quantity}{sfx}"].update(
                predicted_sigma=float(np.sqrt(max(rmse**2 - bias**2, 0.0))),
                predicted_from="white noise + bias random walk over the run",
            )
        out[f"{quantity}_rmse{sfx}"] = metric(
            stats.rmse_ci(e, lv),
            rmse,
            tl.relative_band(rmse, tol.sigma_rel),
            unit,
            refit=lambda a: stats.rmse_ci(e, a),
        )
        if walk > 0:
            est = stats.allan_walk(e, dt, white_sigma=float(std.value), level=lv)
            out[f"{quantity}_walk{sfx}"] = metric(
                est,
                walk,
                tl.relative_band(walk, tol.walk_rel),
                f"{unit}/sqrt(s)",
                refit=lambda a: stats.allan_walk(e, dt, white_sigma=float(std.value), level=a),
            )
        out[f"{quantity}_normality{sfx}"] = normality(white, f"{quantity}{sfx}")
        return out
