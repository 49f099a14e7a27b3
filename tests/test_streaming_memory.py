"""The verifier's accumulators hold memory that does not grow with the run (issue 17): fed a
synthetic stream chunk by chunk, 10 times longer, their peak traced memory (tracemalloc, not
time) stays within 1.2 times the shorter stream's."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable, Iterator

import numpy as np
import pytest

from simconform.adapters.base import OdomTruth
from simconform.spec import GnssSpec, ImuSpec, LidarSpec, load_spec
from simconform.verify.metrics import GnssAccumulator, ImuAccumulator, LidarAccumulator
from simconform.verify.odometry import OdomAccumulator
from simconform.verify.pairing import Pair, Unpaired
from simconform.world import Origin

SPEC = load_spec("sensors_spec/rover_core.yaml")
ORIGIN = Origin(lat=48.0, lon=11.0, alt=500.0)
GROWTH = 1.2


def peak(make: Callable[[], object], items: Iterator) -> int:
    """Peak traced bytes while an accumulator is made, fed `items` and asked for its metrics."""
    tracemalloc.start()
    try:
        acc = make()
        for item in items:
            acc.add(item)
        acc.metrics()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def imu_stream(n: int, spec: ImuSpec) -> Iterator:
    rng = np.random.default_rng(1)
    period = round(1e9 / spec.rate_hz)
    for start in range(0, n, 1000):  # noise drawn a chunk at a time
        noise = rng.normal(0.0, 0.02, size=(1000, 6))
        for k in range(min(1000, n - start)):
            st = (start + k) * period
            if (start + k) % 97 == 0:
                yield Unpaired(st, np.zeros(6))
                continue
            truth = np.array([0.0, 0.0, 9.81, 0.0, 0.0, 0.1])
            yield Pair(st, st + 2_000_000, truth, truth + noise[k])


def test_imu_accumulator_memory_does_not_grow_with_the_run():
    raw = SPEC.sensors["imu"].model_dump()
    raw["noise"]["accel"]["bias_walk"] = [1e-4] * 3  # the Allan blocks and pair differences too
    spec = ImuSpec.model_validate(raw)

    def make():
        return ImuAccumulator("imu", spec, 0.95, 1000.0)

    short = peak(make, imu_stream(20_000, spec))
    long = peak(make, imu_stream(200_000, spec))
    assert long < GROWTH * short, (short, long)


def gnss_stream(n: int, spec: GnssSpec) -> Iterator:
    """Jittered latency: every latency a distinct value (the counts' grid coarsens)."""
    rng = np.random.default_rng(2)
    period = round(1e9 / spec.rate_hz)
    truth = np.array([48.0, 11.0, 500.0])
    for start in range(0, n, 1000):
        jitter = rng.integers(-10_000_000, 10_000_000, size=1000)
        noise = rng.normal(0.0, 1e-6, size=(1000, 3))
        for k in range(min(1000, n - start)):
            st = (start + k) * period
            yield Pair(st, st + 100_000_000 + int(jitter[k]), truth, truth + noise[k])


def test_gnss_accumulator_memory_does_not_grow_with_the_run():
    spec = SPEC.sensors["gnss"]

    def make():
        return GnssAccumulator("gnss", spec, 0.95, 1000.0, ORIGIN)

    short = peak(make, gnss_stream(20_000, spec))
    long = peak(make, gnss_stream(200_000, spec))
    assert long < GROWTH * short, (short, long)


def odom_stream(n: int, spec) -> Iterator:
    """Every 50th capture dropped, given up by the pairing 11 s after its stamp."""
    rng = np.random.default_rng(4)
    period = round(1e9 / spec.rate_hz)
    late: list = []
    for start in range(0, n, 1000):
        noise = rng.normal(0.0, 0.002, size=(1000, 3))
        for k in range(min(1000, n - start)):
            st = (start + k) * period
            while late and late[0].stamp_ns < st - 11_000_000_000:
                yield late.pop(0)
            truth = OdomTruth(0.1 * (start + k), 0.0, 0.0)
            if (start + k) % 50 == 0:
                late.append(Unpaired(st, truth))
                continue
            pub = OdomTruth(truth.x + noise[k, 0], noise[k, 1], noise[k, 2])
            yield Pair(st, st + 10_000_000, truth, pub)
    yield from late


def test_odom_accumulator_memory_does_not_grow_with_the_run():
    spec = SPEC.sensors["odom"]

    def make():
        return OdomAccumulator("odom", spec, 0.95, 1000.0)

    short = peak(make, odom_stream(20_000, spec))
    long = peak(make, odom_stream(200_000, spec))
    assert long < GROWTH * short, (short, long)


def lidar_stream(n: int, spec: LidarSpec) -> Iterator:
    rng = np.random.default_rng(3)
    d = spec.directions()
    truth = (d * 10.0).astype(np.float32)
    period = round(1e9 / spec.rate_hz)
    for i in range(n):
        e = rng.normal(0.0, spec.noise.range.sigma, size=d.shape[:2])
        pub = (d * (10.0 + e)[..., None]).astype(np.float32)
        pub[rng.random(d.shape[:2]) < spec.dropout.point] = np.nan
        yield Pair(i * period, i * period + 200_000_000, truth, pub)


@pytest.mark.parametrize("sweeps", [60])
def test_lidar_accumulator_memory_does_not_grow_with_the_run(sweeps):
    spec = SPEC.sensors["lidar"]

    def make():
        return LidarAccumulator("lidar", spec, 0.95, 1000.0)

    short = peak(make, lidar_stream(sweeps, spec))
    long = peak(make, lidar_stream(10 * sweeps, spec))
    assert long < GROWTH * short, (short, long)
