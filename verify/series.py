"""One scalar error series (an IMU, GNSS or odometry axis) in memory that does not grow with
the run: everything Accumulator.scalar_metrics reads, built from verify/streaming.py.

Values must come in stamp order (the accumulators release them through streaming.Reorder):
the pair differences and the Allan blocks depend on it.
"""

from __future__ import annotations

import math

import numpy as np

from simconform.verify import robust, stats
from simconform.verify.streaming import BlockSums, PairDiffs, Reservoir, Welford

CHUNK = 4096  # values added to the estimators at a time
SCALE_PROBE = 4096  # with no configured sigma: values whose std sets the robust histogram's grid


class SeriesStats:
    """Moments, robust histogram, pair differences, Allan blocks and a uniform sample."""

    def __init__(self, sigma: float, centre: float, walk: bool = False) -> None:
        self.centre = float(centre)
        self.moments = Welford()
        self.sample = Reservoir()
        self.pairs = PairDiffs(Reservoir() if walk else None)
        self.blocks = BlockSums() if walk else None
        # robust_of_array's grid: the configured sigma, else the data's std (of the first
        # SCALE_PROBE values once there are more; the entry states its resolution)
        self.hist = robust.Histogram(centre, sigma) if sigma > 0 else None
        self.probe: list[float] = []
        self.buf: list[float] = []  # values not yet added (added CHUNK at a time)

    @property
    def n(self) -> int:
        self.flush()
        return self.moments.n

    def add(self, v: float) -> None:
        self.buf.append(float(v))
        if len(self.buf) >= CHUNK:
            self.flush()

    def extend(self, x: np.ndarray) -> None:
        self.flush()
        x = np.asarray(x, dtype=np.float64).ravel()
        for i in range(0, x.size, CHUNK):
            self._add(x[i : i + CHUNK])

    def flush(self) -> None:
        """Add the values `add` has buffered (their chunk is not full yet)."""
        if self.buf:
            x, self.buf = np.asarray(self.buf), []
            self._add(x)

    def _add(self, x: np.ndarray) -> None:
        self.moments.add(x)
        self.sample.add(x)
        self.pairs.add(x)
        if self.blocks is not None:
            self.blocks.add(x)
        if self.hist is not None:
            self.hist.add(x)
        else:
            self.probe.extend(x.tolist())
            if len(self.probe) >= SCALE_PROBE:
                self._grid()

    def _grid(self) -> None:
        x = np.asarray(self.probe)
        sd = float(np.std(x)) if x.size > 1 else 0.0
        self.hist = robust.Histogram(self.centre, sd if sd > 0 else 1e-9)
        self.hist.add(x)
        self.probe = []

    def end(self) -> None:
        """The end of the stream: add what is buffered and fix the robust grid as `robust`
        would, so that judging the series adds nothing (a reader ends it where the compiled
        kernels are loaded: verify/sums.py)."""
        self.flush()
        if self.hist is None:
            self._grid()

    def robust(self, level: float) -> dict:
        """robust.robust_of_array of the series."""
        self.end()
        skew, kurt = self.moments.shape()
        return robust.robust_summary(self.hist, level) | {
            "skewness": skew,
            "excess_kurtosis": kurt,
        }

    def white(self) -> np.ndarray:
        """The normality check's series: the values, or (walk) pair differences / sqrt 2."""
        self.flush()
        return self.pairs.white.values() if self.pairs.white is not None else self.sample.values()

    def allan_walk(self, dt: float, white_sigma: float, level: float) -> stats.Estimate:
        self.flush()
        if self.blocks is None:
            return stats.Estimate(math.nan, (math.nan, math.nan), self.n, level)
        return self.blocks.allan_walk(dt, white_sigma, level)
