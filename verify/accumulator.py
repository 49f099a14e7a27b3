"""The accumulator every sensor's verification builds on, and the shape of a metric entry.

An accumulator takes a sensor's paired samples (verify/pairing.py) and produces its metrics;
this module holds the common part (capture stamps, sample dropout, latency, rate, and the
bias/std/rmse/normality of one error series) so that the per-sensor accumulators (metrics.py,
camera.py) depend on it and not on each other. Each metric is a dict with stable keys (see
DESIGN.md, report.json): measured, ci, configured, tolerance, verdict, n, unit, and for a
normality check its p_value.
"""

from __future__ import annotations

import numpy as np

from simconform.verify import stats, streaming
from simconform.verify import tolerances as tl
from simconform.verify.distributions import binom_ppf
from simconform.verify.pairing import Pair, Unpaired
from simconform.verify.series import SeriesStats

REORDER_SLACK_NS = 1_000_000_000  # Reorder's horizon beyond the spec's largest latency


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


NO_NOISE = "no noise configured: the errors are the published values' round-off"


def normality(x: np.ndarray, name: str) -> dict:
    """Anderson-Darling check of `x` (a series, or a uniform sample of one), at most 5000
    tested (stats.anderson_normal); the verdict is set by the report with a family-wise level."""
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
    lo = int(max(binom_ppf(a, n, q) - 1, 0))
    hi = int(min(binom_ppf(1 - a, n, q), n - 1))
    s = np.sort(x)
    return stats.Estimate(float(np.quantile(x, q)), (float(s[lo]), float(s[hi])), n, level)


class Accumulator:
    """Common part: capture stamps, publish delays, sample dropout, latency and rate, in memory
    that does not grow with the run (verify/streaming.py): counts, the latencies' and the stamp
    intervals' value counts, and a stamp-ordered window one latency long. `keep` (compare sets
    it) also keeps every stamp, for the comparison's bootstrap."""

    keep = False
    ORDERED = False  # whether add_ordered is used (the window then holds whole samples)
    # the published values' resolution, the narrowest band (tolerances.py): float64 messages
    # (IMU, odometry) round by ~1e-15 of their values; a sensor may say otherwise
    RESOLUTION = 1e-9

    def __init__(self, name: str, spec, level: float, duration_s: float) -> None:
        self.name = name
        self.spec = spec
        self.level = level
        self.duration_s = duration_s
        self.captures = 0  # truth samples
        self.published = 0
        self.last_truth_ns: int | None = None
        self.truth_stamps: list[int] = []  # these three only with `keep`
        self.pub_stamps: list[int] = []
        self.log_ns: list[int] = []
        self.late_ns = round(tl.latency_max_ms(spec.latency) * 1e6)
        self.latency = streaming.Counts()  # log - stamp, ns
        self.latency_moments = streaming.Welford()  # ... in ms
        self.lat_buf: list[int] = []  # latencies and intervals not yet counted
        self.int_buf: list[int] = []
        self.intervals = streaming.Counts()  # between consecutive distinct published stamps
        self.order = streaming.Reorder(self.late_ns + REORDER_SLACK_NS)
        self.prev_stamp: int | None = None
        self.samples: dict[str, dict] = {}  # error arrays for plots: field -> {errors, sigma, bias}
        self.gaps: list = []  # verify.integrity.Gap: spans of the bag that are lost or damaged
        self.refits: dict = {}  # metric -> refit(level), filled by metrics()

    def crosses_gap(self, a_ns: int, b_ns: int) -> bool:
        """Whether a gap of the bag lies between two samples (log or capture times)."""
        return any(g.overlaps(a_ns, b_ns) for g in self.gaps)

    def add(self, item: Pair | Unpaired) -> None:
        self.captures += 1
        st = item.stamp_ns
        self.last_truth_ns = st if self.last_truth_ns is None else max(self.last_truth_ns, st)
        if self.keep:
            self.truth_stamps.append(st)
        if isinstance(item, Pair):
            self.published += 1
            if self.keep:
                self.pub_stamps.append(st)
                self.log_ns.append(item.log_ns)
            self.lat_buf.append(item.log_ns - st)
            if len(self.lat_buf) >= 4096:
                self._flush_counts()
            held = item if self.ORDERED else None  # a stamp alone where add_ordered is unused
            for stamp, pair in self.order.push(st, item.log_ns, held):
                self._released(stamp, pair)
            self.add_pair(item)
        else:
            self.add_unpaired(item)

    def _released(self, stamp: int, pair: Pair | None) -> None:
        """A published sample, in stamp order: its interval to the one before (rate_metric:
        not across a gap, whose samples are left out) and the ordered part of add_pair. One
        released out of order (logged later than the reorder window; Reorder.late) is left out
        of both: its interval would be negative and its neighbours' too long."""
        if self.prev_stamp is not None and stamp < self.prev_stamp:
            return
        prev, self.prev_stamp = self.prev_stamp, stamp
        crosses = (
            bool(self.gaps) and prev is not None and self.crosses_gap(prev, stamp + self.late_ns)
        )
        if prev is not None and stamp != prev and not crosses:
            self.int_buf.append(stamp - prev)
            if len(self.int_buf) >= 4096:
                self._flush_counts()
        self.add_ordered(stamp, pair)

    def add_ordered(self, stamp: int, pair: Pair | None) -> None:
        """A published sample in stamp order (for order-dependent statistics; ORDERED)."""

    def finish(self) -> None:
        """The end of the stream: release what the ordering window still holds (again: nothing)."""
        for stamp, pair in self.order.flush():
            self._released(stamp, pair)
        self._flush_counts()

    def _flush_counts(self) -> None:
        if self.lat_buf:
            ns = np.asarray(self.lat_buf, dtype=np.int64)
            self.lat_buf = []
            self.latency.add(ns)
            self.latency_moments.add(ns / 1e6)
        self.intervals.add(np.asarray(self.int_buf, dtype=np.int64))
        self.int_buf = []

    def add_pair(self, pair: Pair) -> None:
        raise NotImplementedError

    def add_unpaired(self, item: Unpaired) -> None:
        """A dropped sample; its truth matters only to sensors that integrate (odometry)."""

    def metrics(self) -> dict[str, dict]:
        self.finish()
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
        n_truth, n_pub = self.captures, self.published
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
        lat = self.latency_moments
        mean_ms = s.latency.fixed_ms  # symmetric truncation: the jitter has mean zero
        out["latency_ms"] = metric(
            lat.mean_ci(lv),
            mean_ms,
            tl.latency_band(mean_ms, tol),
            "ms",
            refit=lat.mean_ci,
        )
        values, counts = self.latency.table()
        values = values / 1e6
        res = (self.latency.width - 1) / 2e6  # the grid's half-width, ms (0: exact)
        for q, key in ((0.5, "latency_p50_ms"), (0.95, "latency_p95_ms")):
            expect = tl.latency_quantile_ms(s.latency, q)
            out[key] = metric(
                streaming.quantile_ci(values, counts, q, lv, res),
                expect,
                tl.latency_band(expect, tol),
                "ms",
                refit=lambda a, q=q: streaming.quantile_ci(values, counts, q, a, res),
            )
        mx = self.latency.max / 1e6
        bound = tl.latency_max_ms(s.latency)
        out["latency_max_ms"] = metric(
            stats.Estimate(mx, (mx, mx), n_pub, lv),
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
        est, jitter, dropped = streaming.rate_from_counts(self.intervals, lv)
        return metric(
            est,
            s.rate_hz,
            tl.relative_band(s.rate_hz, s.tolerances.rate_rel),
            "Hz",
            refit=lambda a: streaming.rate_from_counts(self.intervals, a)[0],
            period_jitter_ms=_f(jitter * 1e3),
            intervals_with_drops=dropped,
            **({"out_of_order_left_out": self.order.late} if self.order.late else {}),
        )

    def scalar_metrics(
        self,
        quantity: str,
        axis: str,
        e: SeriesStats,
        bias: float,
        sigma: float,
        unit: str,
        walk: float = 0.0,
        dt: float = 0.0,
    ) -> dict[str, dict]:
        """bias, std, rmse (+ bias random walk) and normality of one error series."""
        tol, lv = self.spec.tolerances, self.level
        sfx = f"_{axis}" if axis else ""
        self.samples[f"{quantity}{sfx}"] = {
            "errors": e.sample.values(),
            "sigma": sigma,
            "bias": bias,
            "unit": unit,
        }
        if e.n < 3:
            return {f"{quantity}_bias{sfx}": not_applicable("fewer than 3 paired samples", unit)}
        t_span = self.duration_s
        extra = walk**2 * t_span / 3.0 if walk > 0 else 0.0
        mom = e.moments
        out = {
            f"{quantity}_bias{sfx}": metric(
                mom.mean_ci(lv, extra_var_of_mean=extra),
                bias,
                tl.bias_band(bias, sigma, tol, self.RESOLUTION),
                unit,
                refit=lambda a: mom.mean_ci(a, extra_var_of_mean=extra),
            )
        }
        if walk > 0:

            def std_at(a: float) -> stats.Estimate:
                return e.pairs.std(a, walk_var_per_step=walk**2 * dt)

        else:
            std_at = mom.std_ci
        std = std_at(lv)
        rob = e.robust(lv)
        out[f"{quantity}_std{sfx}"] = metric(
            std,
            sigma,
            tl.sigma_band(sigma, tol, self.RESOLUTION),
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
            mom.rmse_ci(lv),
            rmse,
            tl.relative_band(rmse, tol.sigma_rel, self.RESOLUTION),
            unit,
            refit=mom.rmse_ci,
        )
        if walk > 0:
            white_sigma = float(std.value)
            out[f"{quantity}_walk{sfx}"] = metric(
                e.allan_walk(dt, white_sigma, lv),
                walk,
                tl.relative_band(walk, tol.walk_rel),
                f"{unit}/sqrt(s)",
                refit=lambda a: e.allan_walk(dt, white_sigma, a),
            )
        out[f"{quantity}_normality{sfx}"] = (
            normality(e.white(), f"{quantity}{sfx}")
            if sigma > 0 or walk > 0
            else not_applicable(NO_NOISE)
        )
        return out
