"""Part 2 of a comparison, the pipeline on each engine: each run's published-minus-own-truth
errors through the verifier's accumulators, as Series per field, and their equivalence (TOST on
the paired bootstrap interval of B - A) against the spec's tolerances."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from simconform.errors import UserError
from simconform.spec import CameraSpec, LidarSpec, Spec
from simconform.verify.compare.stats import Series, paired_bootstrap, two_sample
from simconform.verify.compare.verdicts import json_float, skipped, tost_level, tost_verdict
from simconform.world import Origin

# scipy.stats and the verifier are imported where they are used, so that registering the
# compare command does not slow down every `simconform` start by about a second.
if TYPE_CHECKING:
    from simconform.verify.accumulator import Accumulator

MIN_CAPTURES = 5  # fewer captures with data than this: the bootstrap cannot say anything
BOOTSTRAP_SEED = 0x5C0_C0A1
PIXELS_PER_FRAME = 4096  # camera errors kept per frame for the two-sample tests


@functools.cache
def _error_accumulators() -> tuple[type, type]:
    """(lidar, camera) accumulators built on the verifier's; defined on first use so that the
    verifier (and scipy.stats) is imported only when a comparison runs."""
    from simconform.bag.messages import image_array
    from simconform.verify.accumulator import Accumulator
    from simconform.verify.metrics import LidarAccumulator

    class LidarErrors(LidarAccumulator):
        """The verifier's lidar accumulator, remembering which capture each error came from."""

        KEEP_ERRORS = True  # the bootstrap resamples whole captures

        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            self.per: list[tuple[int, int, int]] = []  # stamp, lost, finite truth

        def add_pair(self, pair) -> None:
            lost, finite = self.lost, self.finite_truth
            super().add_pair(pair)
            self.per.append((pair.stamp_ns, self.lost - lost, self.finite_truth - finite))

    class CameraErrors(Accumulator):
        """Camera intensity error published - truth per pixel and channel, decoded like the
        verifier's camera accumulator; a fixed subset of pixels per frame for the two-sample
        tests (the same pixels in both runs, drawn from the capture stamp)."""

        decode = staticmethod(image_array)

        def __init__(self, name: str, spec: CameraSpec, level: float, duration_s: float) -> None:
            super().__init__(name, spec, level, duration_s)
            self.stamps: list[int] = []
            self.sums: list[tuple[float, float, float]] = []
            self.values: list[np.ndarray] = []

        def add_pair(self, pair) -> None:
            s: CameraSpec = self.spec
            truth, pub = pair.truth, pair.published
            if truth.shape != pub.shape or truth.shape[:2] != (s.height, s.width):
                raise ValueError(
                    f"image {pub.shape} / truth {truth.shape} does not match the spec's "
                    f"{s.height} x {s.width} x 3"
                )
            e = (pub.astype(np.int16) - truth.astype(np.int16)).ravel().astype(np.float64)
            c = e - s.noise.intensity.bias
            self.stamps.append(pair.stamp_ns)
            self.sums.append((float(e.size), float(c.sum()), float(c @ c)))
            rng = np.random.default_rng([BOOTSTRAP_SEED, pair.stamp_ns])
            k = min(PIXELS_PER_FRAME, e.size)
            self.values.append(e[rng.choice(e.size, k, replace=False)])

        def field_metrics(self) -> dict[str, dict]:
            return {}

    return LidarErrors, CameraErrors


def _published_accumulator(name: str, s, level: float, duration_s: float, origin: Origin):
    from simconform.verify.metrics import make_accumulator

    lidar, camera = _error_accumulators()
    if isinstance(s, LidarSpec):
        return lidar(name, s, level, duration_s)
    if isinstance(s, CameraSpec):
        return camera(name, s, level, duration_s)
    return make_accumulator(name, s, level, duration_s, origin)


def published_series(
    run_dir: Path, spec: Spec, origin: Origin, duration_s: float, level: float
) -> dict[str, dict[str, tuple[Series, dict]]]:
    """Per sensor, per error field: (Series, {sigma, bias, unit}) of one run's published errors."""
    from simconform.bag.reader import SourceBag
    from simconform.verify.pairing import BagSummary, stream_pairs

    accs = {
        n: _published_accumulator(n, s, level, duration_s, origin) for n, s in spec.sensors.items()
    }
    for acc in accs.values():
        acc.keep = True  # every stamp and error: the bootstrap resamples them
    topics = {n: spec.data_topics(n) for n in spec.sensors}
    decode = {n: type(a).decode for n, a in accs.items()}
    src = SourceBag(run_dir / "bag")  # an MCAP bag's damaged chunks are skipped
    spans = [(d.start_ns, d.end_ns) for d in src.damaged]

    def in_gap(lo: int, hi: int) -> bool:
        return any((a is None or a <= hi) and (b is None or lo <= b) for a, b in spans)

    try:
        for sensor, item in stream_pairs(src, topics, decode, BagSummary(), in_gap):
            try:
                accs[sensor].add(item)
            except ValueError as exc:
                raise UserError(
                    run_dir / "bag", topics[sensor][0], getattr(item, "stamp_ns", None), str(exc)
                ) from None
    finally:
        src.close()
    return {n: _series_of(acc) for n, acc in accs.items()}


def _series_of(acc: Accumulator) -> dict[str, tuple[Series, dict]]:
    from simconform.verify.odometry import OdomAccumulator

    lidar_cls, camera_cls = _error_accumulators()
    s = acc.spec
    out: dict[str, tuple[Series, dict]] = {}
    if isinstance(acc, camera_cls):
        n = s.noise.intensity
        if acc.stamps:
            sums = np.array(acc.sums)
            order = np.argsort(np.array(acc.stamps, dtype=np.int64), kind="stable")
            keys = np.array(acc.stamps, dtype=np.int64)[order]
            n_, s1, s2 = sums[order].T
            ser = Series("moments", keys, n_, s1, s2, np.concatenate(acc.values), n.bias)
            # no overlay in compare's plot: clamp, round and JPEG change the distribution and
            # only the run report predicts it
            info = {"sigma": n.sigma, "bias": n.bias, "unit": "levels", "no_overlay": True}
            out["intensity"] = (ser, info)
    else:
        acc.finish()
        acc.field_metrics()  # fills acc.samples with the verifier's error arrays
        fields = {k: v for k, v in acc.samples.items() if not k.startswith("_")}
        if isinstance(acc, lidar_cls):
            keys = [p[0] for p in acc.per]
            for name, f in fields.items():
                out[name] = (Series.of_groups(keys, acc.errors, f["bias"]), f)
            out["point_dropout"] = (
                Series.proportion(keys, [p[1] for p in acc.per], [p[2] for p in acc.per]),
                {"unit": "1"},
            )
        else:
            keys = acc.keys if isinstance(acc, OdomAccumulator) else sorted(r[0] for r in acc.rows)
            for name, f in fields.items():
                e = np.asarray(f["errors"], dtype=float)
                if len(e) != len(keys):
                    raise RuntimeError(f"{acc.name}.{name}: {len(e)} errors for {len(keys)} keys")
                out[name] = (Series.of_groups(keys, [x[None] for x in e], f["bias"], e), f)
    truth = np.asarray(acc.truth_stamps, dtype=np.int64)
    pub = set(acc.pub_stamps)
    out["sample_dropout"] = (
        Series.proportion(truth, [st not in pub for st in acc.truth_stamps], np.ones(truth.size)),
        {"unit": "1"},
    )
    if acc.pub_stamps:
        lat = (np.asarray(acc.log_ns) - np.asarray(acc.pub_stamps)) / 1e6
        ser = Series.of_groups(acc.pub_stamps, [x[None] for x in lat], s.latency.fixed_ms, lat)
        out["latency_ms"] = (ser, {"unit": "ms"})
    return out


def metric_names(field_name: str) -> tuple[str, str]:
    """verify's names: range -> range_bias, range_std; accel_x -> accel_bias_x, accel_std_x."""
    q, _, axis = field_name.partition("_")
    sfx = f"_{axis}" if axis else ""
    return f"{q}_bias{sfx}", f"{q}_std{sfx}"


def compare_published(
    spec: Spec,
    sa: dict[str, dict[str, tuple[Series, dict]]],
    sb: dict[str, dict[str, tuple[Series, dict]]],
    confidence: float,
    n_boot: int,
) -> dict[str, dict[str, dict]]:
    from simconform.verify import tolerances as tl

    level = tost_level(confidence)
    out: dict[str, dict[str, dict]] = {}
    for sensor, s in spec.sensors.items():
        tol = s.tolerances
        metrics: dict[str, dict] = {}
        fa, fb = sa[sensor], sb[sensor]
        names = list(fa) + [k for k in fb if k not in fa]
        for i, fname in enumerate(names):
            seed = BOOTSTRAP_SEED + 7919 * i
            if fname not in fa or fname not in fb:
                which = "A" if fname not in fa else "B"
                metrics[fname] = skipped(f"run {which} has no samples for {fname}")
                continue
            (ser_a, info), (ser_b, _) = fa[fname], fb[fname]
            unit = info["unit"]
            if fname in ("sample_dropout", "point_dropout"):
                plan = [(fname, "proportion", tol.dropout_abs)]
            elif fname == "latency_ms":
                half = tl.latency_band(s.latency.fixed_ms, tol)[1] - s.latency.fixed_ms
                plan = [(fname, "mean", half)]
            else:
                sigma, bias = info["sigma"], info["bias"]
                bias_half = tl.bias_band(bias, sigma, tol)[1] - bias
                std_half = max(sigma * tol.sigma_rel, 1e-12 * max(1.0, sigma))
                mb, ms = metric_names(fname)
                plan = [(mb, "mean", bias_half), (ms, "std", std_half)]
            common = np.intersect1d(ser_a.keys, ser_b.keys).size
            union = np.union1d(ser_a.keys, ser_b.keys).size
            if union < MIN_CAPTURES:
                for mname, _, _ in plan:
                    m = skipped(f"fewer than {MIN_CAPTURES} captures with samples", unit)
                    m["verdict"] = "inconclusive"
                    metrics[mname] = m
                continue
            res = paired_bootstrap(ser_a, ser_b, [k for _, k, _ in plan], level, n_boot, seed)
            tests = (
                two_sample(ser_a.values, ser_b.values, seed)
                if ser_a.kind == "moments"
                else dict.fromkeys(("ks_statistic", "ks_p", "ad_statistic", "ad_p"))
            )
            for mname, kind, bound in plan:
                va, vb, diff, ci = res[kind]
                metrics[mname] = {
                    "measured_a": json_float(va),
                    "measured_b": json_float(vb),
                    "difference": json_float(diff),
                    "ci": [json_float(ci[0]), json_float(ci[1])],
                    "tolerance": [json_float(-bound), json_float(bound)],
                    "verdict": tost_verdict(ci, bound),
                    **tests,
                    "n_a": int(ser_a.n.sum()),
                    "n_b": int(ser_b.n.sum()),
                    "captures": int(union),
                    "captures_in_both": int(common),
                    "level": level,
                    "unit": unit,
                }
        out[sensor] = metrics
    return out
