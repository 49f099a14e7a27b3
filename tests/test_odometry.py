"""Odometry's streaming verification (verify/odometry.py) gives the increments that sorting
every capture at the end gave: the same errors, in the same order, for any arrival order the
pairing can produce (hypothesis), and on a real recorded run whose odometry drops captures."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import write_yaml
from simconform.adapters.base import OdomTruth
from simconform.angles import se2_increment
from simconform.spec import OdomSpec, load_spec
from simconform.verify import tolerances as tl
from simconform.verify.integrity import Gap
from simconform.verify.odometry import OdomAccumulator
from simconform.verify.pairing import HOLD_CHECK_NS, HOLD_SLACK_NS, Pair, Unpaired

CORE = load_spec("sensors_spec/rover_core.yaml")


def odom_spec(**latency) -> OdomSpec:
    raw = CORE.sensors["odom"].model_dump()
    raw["latency"].update(latency)
    return OdomSpec.model_validate(raw)


def batch_errors(items: list, gaps: list) -> tuple[list[int], np.ndarray]:
    """The definition: every capture sorted by stamp, each consecutive published pair not
    across a gap (what verify/metrics.py computed at the end until 2026-12-07)."""
    truth, pub = {}, {}
    for it in items:
        truth[it.stamp_ns] = it.truth
        if isinstance(it, Pair):
            pub[it.stamp_ns] = it.published
    keys, errs = [], []
    for a, b in itertools.pairwise(sorted(truth)):
        if a in pub and b in pub and not any(g.overlaps(a, b) for g in gaps):
            e = se2_increment(pub[a], pub[b]) - se2_increment(truth[a], truth[b])
            e[2] = (e[2] + np.pi) % (2 * np.pi) - np.pi
            keys.append(b)
            errs.append(e)
    return keys, np.array(errs).reshape(-1, 3)


def streamed(spec: OdomSpec, items: list, gaps: list) -> OdomAccumulator:
    acc = OdomAccumulator("odom", spec, 0.95, 1.0)
    acc.keep = True
    acc.gaps = gaps
    for it in items:
        acc.add(it)
    acc.metrics()
    return acc


@st.composite
def arrivals(draw):
    """Captures at the spec's rate, some dropped, in an order the pairing can give: a copy
    arrives within its latency, a dropped capture within latency + hold + one check."""
    spec = odom_spec(jitter_ms=draw(st.sampled_from([0.0, 3.0])))
    period = round(1e9 / spec.rate_hz)
    late = tl.latency_max_ms(spec.latency) * 1e6
    n = draw(st.integers(0, 1500))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    drop = rng.random(n) < draw(st.sampled_from([0.0, 0.05, 0.5]))
    pose = rng.normal(size=(n, 3)) * [5.0, 5.0, 3.0]
    noise = rng.normal(size=(n, 3)) * 0.01
    bound = late + HOLD_SLACK_NS + HOLD_CHECK_NS + period
    items, keys = [], []
    for k in range(n):
        stamp = k * period
        truth = OdomTruth(*pose[k])
        if drop[k]:
            items.append(Unpaired(stamp, truth))
            keys.append(stamp + rng.uniform(0, bound))
        else:
            log = stamp + int(rng.uniform(0, late))
            items.append(Pair(stamp, log, truth, OdomTruth(*(pose[k] + noise[k]))))
            keys.append(log)
    order = np.argsort(keys, kind="stable")
    starts = rng.integers(0, n * period + 1, draw(st.integers(0, 3)))
    gaps = [Gap(int(a), int(a + rng.integers(0, 5 * period)), "test") for a in starts]
    return spec, [items[i] for i in order], gaps


@settings(max_examples=40, deadline=None)
@given(arrivals())
def test_streamed_increments_equal_the_sorted_definition(case):
    spec, items, gaps = case
    acc = streamed(spec, items, gaps)
    keys, errs = batch_errors(items, gaps)
    assert acc.keys == keys
    got = np.array(acc.errors).reshape(-1, 3)
    assert np.array_equal(got, errs)  # the same bits, in the same order
    assert len(acc.window) == 0
    for a, axis in enumerate(("x", "y", "yaw")):
        assert acc.series[a].n == len(keys)
        if len(keys) >= 3:
            m = acc.metrics()[f"increment_bias_{axis}"]
            assert m["n"] == len(keys)


def test_held_captures_stay_within_the_horizon():
    """10,000 captures at 20 Hz: the window holds about one horizon of them, not the run."""
    spec = odom_spec()
    acc = OdomAccumulator("odom", spec, 0.95, 1.0)
    period = round(1e9 / spec.rate_hz)
    most = 0
    for k in range(10_000):
        t = OdomTruth(float(k), 0.0, 0.0)
        acc.add(Pair(k * period, k * period + 10_000_000, t, t))
        most = max(most, len(acc.window))
    assert most <= acc.horizon_ns / period + 256 + 1
    acc.metrics()
    assert acc.series[0].n == 9_999 and not acc.window


def test_a_capture_older_than_the_judged_ones_is_refused():
    spec = odom_spec()
    acc = OdomAccumulator("odom", spec, 0.95, 1.0)
    period = round(1e9 / spec.rate_hz)
    t = OdomTruth(0.0, 0.0, 0.0)
    for k in range(2_000):
        acc.add(Pair(k * period, k * period, t, t))
    with pytest.raises(ValueError, match="was not logged at its capture time"):
        acc.add(Unpaired(period // 2, t))


def test_a_recorded_run_with_dropped_odometry(tmp_path):
    """A real run (40 s, odometry dropping a fifth of its captures with jittered latency),
    read through the real pairing: the streamed errors are the sorted definition's."""
    from simconform.bag.reader import SourceBag
    from simconform.run import RunConfig, run
    from simconform.verify.pairing import BagSummary, stream_pairs

    odom = CORE.sensors["odom"].model_dump(mode="json")
    raw = {"name": "odo", "base_frame": "base_link", "sensors": {"odom": odom}}
    raw["sensors"]["odom"]["dropout"] = {"sample": 0.2}
    raw["sensors"]["odom"]["latency"] = {"fixed_ms": 20.0, "jitter_ms": 5.0}
    spec_path = write_yaml(tmp_path / "odo.yaml", raw)
    out = tmp_path / "run"
    run(RunConfig(out=out, spec=spec_path, duration=40.0), progress=False)
    spec = load_spec(spec_path).sensors["odom"]
    src = SourceBag(out / "bag")
    try:
        items = [
            item
            for _s, item in stream_pairs(
                src,
                {"odom": load_spec(spec_path).data_topics("odom")},
                {"odom": OdomAccumulator.decode},
                BagSummary(),
                max_latency_ns={"odom": round(tl.latency_max_ms(spec.latency) * 1e6)},
            )
        ]
    finally:
        src.close()
    dropped = sum(isinstance(it, Unpaired) for it in items)
    assert 0.1 * len(items) < dropped < 0.3 * len(items)
    acc = streamed(spec, items, [])
    keys, errs = batch_errors(items, [])
    assert acc.keys == keys and len(keys) > 300
    assert np.array_equal(np.array(acc.errors), errs)
