"""Sample-size planning: how long a run must be for each metric to PASS with a stated power
if the sensor conforms exactly to its spec (`simconform plan`, `run --dry-run`,
`run --duration auto`, and the "how much longer" of every INCONCLUSIVE in a report).

A PASS needs the metric's whole interval inside its band (verify/stats.py verdict; Holm
changes FAILs only). For each metric this module knows the interval the verifier computes
(verify/power.py gives its PASS probability per sample count) and how that count grows with
the run: captures at rate_hz, published samples after sample dropout, odometry increments
between two published captures, lidar points (returns per sweep, found by casting a few
sweeps of the run's world, after point dropout), the camera's compared frames (JPEG: every
`every`-th frame, about 40 in a long run). A sensor's length is that of its slowest metric;
the run's (verify/runlength.py) is the shortest at which the product of every metric's PASS
probability reaches the power (exact for independent metrics, on the safe side for those of
one series, which are positively associated).

Not planned: normality checks (a test of fit, not an interval: a conforming sensor passes
them but for the family-wise alpha) and deterministic bounds (latency_max_ms, the rate from
exact capture stamps, a noise-free series), which need only a few samples.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from simconform.spec import CameraSpec, GnssSpec, ImuSpec, LidarSpec, OdomSpec, Spec
from simconform.verify import distributions as dist
from simconform.verify import power as pw
from simconform.verify import stats as vstats
from simconform.verify import tolerances as tl
from simconform.verify.camera import prediction_every

DEFAULT_POWER = 0.8
STEP_S = 0.1  # run lengths are planned in steps of this


@dataclass
class MetricPlan:
    """One metric's plan: the count it needs (`n`, of `counts`) and the run length that gives
    it, or None (`why`) when no length reaches the power; `power_at(T)` is P(PASS) at T s."""

    sensor: str
    metric: str
    counts: str
    n: int | None
    duration_s: float | None
    power: float  # P(PASS) at n (or the best any length reaches)
    power_at: Callable[[float], float] = field(repr=False)
    why: str = ""  # why no length reaches the power
    note: str = ""  # how the plan treats a metric that needs only a few samples


@dataclass
class Plan:
    metrics: list[MetricPlan]
    power: float
    level: float
    run_s: float | None  # every metric at once (verify/runlength.py); None: none found
    notes: list[str] = field(default_factory=list)

    def sensor_length(self, sensor: str) -> tuple[float | None, str]:
        """(length, dominating metric) of one sensor; None when a metric cannot pass."""
        mine = [m for m in self.metrics if m.sensor == sensor]
        stuck = [m for m in mine if m.duration_s is None]
        if stuck:
            return None, stuck[0].metric
        top = max(mine, key=lambda m: m.duration_s or 0.0)
        return top.duration_s, top.metric

    def find(self, sensor: str, metric: str) -> MetricPlan | None:
        return next((m for m in self.metrics if m.sensor == sensor and m.metric == metric), None)


class _Counts:
    """How a sensor's sample counts grow with the number of captures c (expected values)."""

    def __init__(self, s, returns_per_sweep: float | None = None) -> None:
        self.s = s
        self.keep = 1.0 - s.dropout.sample
        self.returns = returns_per_sweep

    def published(self, c: int) -> int:
        return int(c * self.keep)

    def increments(self, c: int) -> int:  # odometry: two consecutive captures both published
        return int(max(c - 1, 0) * self.keep**2)

    def frames(self, c: int) -> int:  # camera: frames compared with the prediction
        paired = self.published(c)
        if self.s.encoding == "raw":
            return paired
        every = prediction_every(c)
        return math.ceil(paired / every)

    def finite(self, c: int) -> int:  # lidar: true returns in published sweeps
        return int(self.published(c) * (self.returns or 0.0))

    def points(self, c: int) -> int:
        return int(self.finite(c) * (1.0 - self.s.dropout.point))


@dataclass
class _Model:
    """A metric: what its n counts, n as a function of captures c, P(PASS) of (n, c)."""

    name: str
    counts: str
    count: Callable[[int], int]
    power_of: Callable[[int, int], float]
    why: str = ""  # why no length may reach the power
    note: str = ""  # how the plan treats it


def _at_least(k: int) -> Callable[[int, int], float]:
    return lambda n, c: 1.0 if n >= k else 0.0


def _series(
    q, ax, bias, sigma, walk, s, count, counts: str, lv: float, target: float = DEFAULT_POWER
):
    """bias, std, rmse (+ walk) and normality of one series (accumulator.scalar_metrics)."""
    tol, rate = s.tolerances, s.rate_hz
    sfx = f"_{ax}" if ax else ""
    h = (lambda b: (b[1] - b[0]) / 2)(tl.bias_band(bias, sigma, tol))
    slo, shi = tl.sigma_band(sigma, tol)
    r, dt = tol.sigma_rel, 1.0 / rate
    normal = _Model(f"{q}_normality{sfx}", counts, count, _at_least(8), note=NORMALITY)
    if sigma == 0 and walk == 0:
        exact = "no noise configured: exact values, 3 samples"
        return [
            _Model(f"{q}_{m}{sfx}", counts, count, _at_least(3), note=exact)
            for m in ("bias", "std", "rmse")
        ]

    def bias_p(n: int, c: int) -> float:
        if n < 2:
            return 0.0
        if walk == 0:
            return pw.mean_t(n, sigma, h, lv)
        wv = walk**2 * c / rate  # the walk's variance at the run's end; var(mean) = wv / 3
        return pw.mean_t(n, sigma, h, lv, extra=wv / 3 + wv / (6 * n), extra_true=wv / 3)

    def std_p(n: int, c: int) -> float:
        if n < 2:
            return 0.0
        if walk == 0:
            return pw.chi2_scale(n - 1, sigma**2, slo**2, shi**2, lv)
        st = walk**2 * dt  # pair differences (stats.std_from_pair_differences)
        return pw.chi2_scale(n // 2, 2 * sigma**2 + st, 2 * slo**2 + st, 2 * shi**2 + st, lv)

    def rmse_p(n: int, c: int) -> float:
        if n < 2:
            return 0.0
        t = c / rate
        theta = tl.rmse_expected(bias, sigma, walk, t) ** 2
        var_sq = 2 * sigma**4 + 4 * bias**2 * sigma**2
        nu = min(2 * n * theta**2 / var_sq, 1e12) if var_sq > 0 else 1e12  # Satterthwaite
        a, b = theta * (1 - r) ** 2, theta * (1 + r) ** 2
        if walk == 0:
            return pw.chi2_scale(nu, theta, a, b, lv)
        # the walk realised in one run moves mean(x^2) by sd ~ w^2 T / sqrt(3) (a Brownian
        # path's mean square), which no count averages away: mean(x^2) taken as normal
        sd = math.sqrt(var_sq / n + walk**4 * t * t / 3 + 4 * bias**2 * walk**2 * t / 3)
        al = 1 - lv
        lo_m = a * float(dist.chi2_ppf(1 - al / 2, nu)) / nu
        hi_m = b * float(dist.chi2_ppf(al / 2, nu)) / nu
        if hi_m <= lo_m:
            return 0.0
        return float(dist.norm_cdf((hi_m - theta) / sd) - dist.norm_cdf((lo_m - theta) / sd))

    walk_why = "the walk realised in one run moves it by more than the band allows" if walk else ""
    out = [
        _Model(f"{q}_bias{sfx}", counts, count, bias_p, walk_why),
        _Model(f"{q}_std{sfx}", counts, count, std_p),
        _Model(f"{q}_rmse{sfx}", counts, count, rmse_p, walk_why),
    ]
    if walk > 0:
        wlo, whi = tl.relative_band(walk, tol.walk_rel)

        def walk_p(n: int, c: int) -> float:
            return allan_power(n, sigma, walk, dt, wlo, whi, lv)

        need = _walk_rel_needed(sigma, walk, dt, lv, target)
        why = (
            "stats.allan_walk keeps about 20 block pairs whatever the run's length, so its "
            f"interval never narrows: PASS needs tolerances.walk_rel >= {need:.2g} "
            f"(configured {tol.walk_rel:g})"
        )
        out.append(_Model(f"{q}_walk{sfx}", counts, count, walk_p, why))
    return [*out, normal]


NORMALITY = "a test of fit, not an interval: 8 samples; PASS unless rejected family-wise"


def allan_power(n: int, sigma: float, walk: float, dt: float, lo: float, hi: float, level):
    """P(PASS) of stats.allan_walk on n samples: its block size and pair count, exactly."""
    blocks_pairs = vstats.allan_blocks(n)
    if blocks_pairs is None:
        return 0.0
    m, pairs = blocks_pairs
    white, gain = vstats.allan_terms(m, dt, sigma)
    v, a, b = white + gain * walk**2, white + gain * lo**2, white + gain * hi**2
    return pw.chi2_scale(pairs, v, a, b, level)


def _walk_rel_needed(sigma: float, walk: float, dt: float, lv: float, target: float) -> float:
    """The smallest walk_rel at which a long run's Allan interval passes with `target`."""
    n = 40 * max(2, round(100.0 / dt))  # 20 pairs of 100 s blocks: the walk dominates

    def ok(rel: float) -> bool:
        return allan_power(n, sigma, walk, dt, walk * max(1 - rel, 0), walk * (1 + rel), lv) >= (
            target
        )

    lo, hi = 0.0, 64.0
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi


def _common(s, counts: _Counts, lv: float) -> list[_Model]:
    """sample_dropout, latency (mean, p50, p95, max) and rate (accumulator.common_metrics)."""
    tol, lat, pub = s.tolerances, s.latency, counts.published
    p = s.dropout.sample
    lo, hi = tl.dropout_band(p, tol)
    k, j = lat.jitter_truncation, lat.jitter_ms
    sd = vstats.truncnorm_mean_std(j, k)[1]
    half = (lambda b: (b[1] - b[0]) / 2)(tl.latency_band(lat.fixed_ms, tol))
    out = [
        _Model("sample_dropout", "captures", lambda c: c, lambda n, c: pw.wilson(n, p, lo, hi, lv)),
        _Model("latency_ms", "published", pub, lambda n, c: pw.mean_t(n, sd, half, lv)),
    ]
    for q, key in ((0.5, "latency_p50_ms"), (0.95, "latency_p95_ms")):
        qlo, qhi = tl.latency_band(tl.latency_quantile_ms(lat, q), tol)
        f_lo = _truncnorm_cdf(qlo - lat.fixed_ms, j, k)
        f_hi = 1 - _truncnorm_cdf(qhi - lat.fixed_ms, j, k)
        out.append(
            _Model(
                key,
                "published",
                pub,
                lambda n, c, q=q, a=f_lo, b=f_hi: pw.order_stat(n, q, a, b, lv),
            )
        )
    out += [
        _Model("latency_max_ms", "published", pub, _at_least(1), note=BOUND),
        _Model("rate_hz", "published", pub, _at_least(3), note=RATE),
    ]
    return out


BOUND = "a hard bound: the truncated jitter never exceeds it, 1 sample"
RATE = "capture stamps are exact (k / rate): the period's interval is +-1 ns, 3 samples"


def _truncnorm_cdf(x: float, j: float, k: float) -> float:
    if j == 0:
        return float(x >= 0)
    return dist.truncnorm_cdf(x / j, k)


def _lidar(s: LidarSpec, counts: _Counts, lv: float) -> list[_Model]:
    tol, n = s.tolerances, s.noise.range
    out = _series("range", "", n.bias, n.sigma, 0.0, s, counts.points, "points", lv)
    lateral = "~0 for a conforming sensor (points stay on their rays): 2 points"
    out.insert(3, _Model("range_lateral_rms", "points", counts.points, _at_least(2), note=lateral))
    p = s.dropout.point
    lo, hi = tl.dropout_band(p, tol)
    wil = lambda k, c: pw.wilson(k, p, lo, hi, lv)  # noqa: E731
    out.append(_Model("point_dropout", "true returns", counts.finite, wil))
    if not counts.returns:  # no ray hits: nothing to judge the range on, at any length
        for m in out:
            m.why = (
                "no true return in the sweeps counted (`plan`: a few cast along the "
                "trajectory; a report: the run's own): no ray hit the world there"
            )
    return out


def _camera(s: CameraSpec, counts: _Counts, lv: float) -> list[_Model]:
    """Frame by frame against the prediction (verify/camera.py): a paired t interval over the
    compared frames. Modelled per-frame spread: pixels independent, the prediction exact
    (raw) or one more independent draw (JPEG), the predicted std taken as the configured; a
    model, far from the bands (the verifier's own minimum, 3 frames, decides)."""
    n, tol = s.noise.intensity, s.tolerances
    pix = s.width * s.height * 3
    k = 1 if s.encoding == "raw" else 2
    sig, b, r = n.sigma, n.bias, tol.sigma_rel
    frames = "frames compared"
    if sig == 0:  # no noise: the prediction (clamp, round, encoding) is the image, exactly
        exact = "no noise configured: the prediction is exact, 3 frames"
        names = ("intensity_bias", "intensity_std", "intensity_rmse")
        return [_Model(m, frames, counts.frames, _at_least(3), note=exact) for m in names]
    theta = b * b + sig * sig
    rows = (
        ("intensity_bias", math.sqrt(k * sig**2 / pix), tl.bias_band(0, sig, tol)[1]),
        ("intensity_std", math.sqrt(k * 2 * sig**4 / pix), sig**2 * (2 * r - r * r)),
        (
            "intensity_rmse",
            math.sqrt(k * (2 * sig**4 + 4 * b * b * sig**2) / pix),
            theta * (2 * r - r * r),
        ),
    )
    return [
        _Model(
            name,
            frames,
            counts.frames,
            lambda m, c, sd=sd, hh=hh: pw.mean_t(m, sd, hh, lv) if m >= 3 else 0.0,
        )
        for name, sd, hh in rows
    ]


def _models(s, counts: _Counts, lv: float, target: float) -> list[_Model]:
    if isinstance(s, LidarSpec):
        return _lidar(s, counts, lv) + _common(s, counts, lv)
    if isinstance(s, CameraSpec):
        return _camera(s, counts, lv) + _common(s, counts, lv)
    series = {
        ImuSpec: lambda: [
            (q, s.noise.accel if q == "accel" else s.noise.gyro) for q in ("accel", "gyro")
        ],
        GnssSpec: lambda: [("position", s.noise.position)],
        OdomSpec: lambda: [("increment", s.noise.increment)],
    }[type(s)]()
    axes = {"position": "enu", "increment": ("x", "y", "yaw")}
    count = counts.increments if isinstance(s, OdomSpec) else counts.published
    what = "increments" if isinstance(s, OdomSpec) else "published"
    out = []
    for q, nz in series:
        walks = nz.bias_walk if isinstance(s, ImuSpec) else (0.0, 0.0, 0.0)  # as the verifier
        for a, ax in enumerate(axes.get(q, "xyz")):
            n3 = (nz.bias[a], nz.sigma[a], walks[a])
            out += _series(q, ax, *n3, s, count, what, lv, target)
    return out + _common(s, counts, lv)


def _plan_metric(sensor: str, s, model: _Model, target: float) -> MetricPlan:
    rate = s.rate_hz

    def p_c(c: int) -> float:
        return model.power_of(model.count(c), c)

    def at(t: float) -> float:
        return p_c(max(math.ceil(t * rate - 1e-9), 0))

    need = pw.needed(p_c, target, n_min=1)
    if need.n is None:
        why = model.why or "no run length reaches the power"
        return MetricPlan(sensor, model.name, model.counts, None, None, need.power, at, why)
    t = math.ceil(need.n / rate / STEP_S - 1e-9) * STEP_S
    n = model.count(need.n)
    return MetricPlan(
        sensor, model.name, model.counts, n, round(t, 6), need.power, at, "", model.note
    )


def plan_spec(
    spec: Spec,
    level: float = 0.95,
    power: float = DEFAULT_POWER,
    returns_per_sweep: dict[str, float] | None = None,
    only: set[str] | None = None,
) -> Plan:
    """Every metric's plan for `spec` (`only` those sensors); `returns_per_sweep`: lidar name
    -> true returns per sweep (verify/runlength.py lidar_returns, or a run's own count)."""
    if not 0 < power < 1:
        raise ValueError(f"power must be in (0, 1), got {power!r}")
    metrics = []
    for name, s in spec.sensors.items():
        if only is not None and name not in only:
            continue
        counts = _Counts(s, (returns_per_sweep or {}).get(name))
        models = _models(s, counts, level, power)
        metrics += [_plan_metric(name, s, m, power) for m in models]
    return Plan(metrics, power, level, None)
