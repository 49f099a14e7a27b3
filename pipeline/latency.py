"""Latency stage: publish at exactly capture + fixed + truncated Gaussian jitter, in integer ns."""

from __future__ import annotations

import numpy as np
from scipy.special import ndtr, ndtri

from simconform.spec import Latency


class LatencyStage:
    """One uniform draw per capture mapped through the truncated normal's inverse CDF, so the
    draw count per capture is fixed (no rejection sampling)."""

    def __init__(self, latency: Latency, rng: np.random.Generator) -> None:
        self.fixed_ns = latency.fixed_ms * 1e6
        self.sigma_ns = latency.jitter_ms * 1e6
        self.lo = float(ndtr(-latency.jitter_truncation))
        self.hi = float(ndtr(latency.jitter_truncation))
        self.rng = rng

    def draw_ns(self) -> int:
        u = self.rng.random()
        jitter = self.sigma_ns * float(ndtri(self.lo + u * (self.hi - self.lo)))
        return max(0, round(self.fixed_ns + jitter))
