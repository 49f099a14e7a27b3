"""Capture schedule on the simulation clock: captures at exactly k / rate, in integer ns."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

NS = 1_000_000_000


def _period_ns(rate_hz: float) -> Fraction:
    return Fraction(NS) / Fraction(rate_hz).limit_denominator(1_000_000)


def capture_times(rate_hz: float, start_ns: int, end_ns: int) -> np.ndarray:
    """round(k * 1e9 / rate) for every integer k with start <= t < end (half-open, so a 200 s
    trajectory at 10 Hz gives exactly 2,000 captures)."""
    period = _period_ns(rate_hz)
    k0 = math.ceil(Fraction(start_ns) / period)
    k1 = math.ceil(Fraction(end_ns) / period)  # first k at or past end, excluded
    ks = range(k0, k1)
    return np.array([round(k * period) for k in ks], dtype=np.int64)


def expected_count(rate_hz: float, start_ns: int, end_ns: int) -> int:
    period = _period_ns(rate_hz)
    return max(0, math.ceil(Fraction(end_ns) / period) - math.ceil(Fraction(start_ns) / period))
