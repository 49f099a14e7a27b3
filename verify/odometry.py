"""Wheel odometry's verification: the error of each published capture-to-capture increment,
in memory that does not grow with the run.

An increment joins two consecutive captures (truth stamps) that were both published and have
no gap of the bag between them; a dropped capture breaks the chain. A dropped capture reaches
the accumulator late, though: the pairing gives it up only after the sensor's largest latency,
HOLD_SLACK_NS and up to HOLD_CHECK_NS more (verify/pairing.py), while later captures arrive
paired. So captures wait in a stamp-keyed window until no capture with an older stamp can
still come (`horizon_ns`), and are then judged in stamp order: the errors are the ones, and
in the order, that sorting every capture at the end gave, without keeping the run's poses
(20,000 of each on a 1,000 s demo run: 10 MB that grew with the run until 2026-12-07).
"""

from __future__ import annotations

import numpy as np

from simconform.angles import se2_increment, wrap_angle
from simconform.bag.messages import odom_pose
from simconform.spec import OdomSpec
from simconform.verify.accumulator import Accumulator
from simconform.verify.pairing import HOLD_CHECK_NS, HOLD_SLACK_NS, Pair, Unpaired
from simconform.verify.series import SeriesStats

PLANAR = ("x", "y", "yaw")
UNITS = ("m", "m", "rad")
RELEASE_EVERY = 256  # captures held between looks for the ones old enough to judge


class OdomAccumulator(Accumulator):
    """Error of each published capture-to-capture increment (consecutive captures only; none
    across a gap of the bag, where captures may be missing). `keep` (compare) also keeps every
    increment's error and the stamp of its second capture (`keys`)."""

    decode = staticmethod(odom_pose)

    def __init__(self, name: str, spec: OdomSpec, level: float, duration_s: float) -> None:
        super().__init__(name, spec, level, duration_s)
        n = spec.noise.increment
        self.series = [SeriesStats(n.sigma[a], n.bias[a]) for a in range(len(PLANAR))]
        self.window: dict[int, tuple[object, object | None]] = {}  # stamp -> (truth, published)
        self.newest: int | None = None
        self.last: tuple[int, object, object | None] | None = None  # the last capture judged
        # a dropped capture arrives at most its latency, the pairing's hold and one capture
        # period after the newest stamp then seen; twice that leaves a margin
        period_ns = round(1e9 / spec.rate_hz)
        self.horizon_ns = 2 * (self.late_ns + HOLD_SLACK_NS + HOLD_CHECK_NS + period_ns)
        self.keys: list[int] = []  # only with `keep`
        self.errors: list[np.ndarray] = []  # only with `keep`

    def add_pair(self, pair: Pair) -> None:
        self._hold(pair.stamp_ns, pair.truth, pair.published)

    def add_unpaired(self, item: Unpaired) -> None:
        self._hold(item.stamp_ns, item.truth, None)

    def _hold(self, stamp: int, truth, published) -> None:
        if self.last is not None and stamp <= self.last[0]:
            raise ValueError(
                f"odometry capture at {stamp / 1e9:.9g} s arrived after the captures up to "
                f"{self.last[0] / 1e9:.9g} s were judged, which happens once captures "
                f"{self.horizon_ns / 1e9:g} s newer have arrived: its truth was not logged at "
                "its capture time"
            )
        held = self.window.get(stamp)
        if published is None and held is not None:  # a repeated truth keeps its stamp's copy
            published = held[1]
        self.window[stamp] = (truth, published)
        self.newest = stamp if self.newest is None else max(self.newest, stamp)
        if len(self.window) % RELEASE_EVERY == 0:
            self._judge_before(self.newest - self.horizon_ns)

    def finish(self) -> None:
        super().finish()
        if self.newest is not None:
            self._judge_before(self.newest + 1)
        for ser in self.series:
            ser.end()

    def _judge_before(self, limit: int) -> None:
        """Judge, in stamp order, every held capture older than `limit`."""
        for stamp in sorted(s for s in self.window if s < limit):
            truth, pub = self.window.pop(stamp)
            if self.last is not None:
                a, truth_a, pub_a = self.last
                if pub_a is not None and pub is not None and not self.crosses_gap(a, stamp):
                    e = se2_increment(pub_a, pub) - se2_increment(truth_a, truth)
                    e[2] = wrap_angle(e[2])
                    for ser, v in zip(self.series, e):
                        ser.add(v)
                    if self.keep:
                        self.keys.append(stamp)
                        self.errors.append(e)
            self.last = (stamp, truth, pub)

    def field_metrics(self) -> dict[str, dict]:
        n = self.spec.noise.increment
        out: dict[str, dict] = {}
        err = np.array(self.errors).reshape(-1, len(PLANAR)) if self.keep else None
        for a, axis in enumerate(PLANAR):
            ser = self.series[a]
            out.update(self.scalar_metrics("increment", axis, ser, n.bias[a], n.sigma[a], UNITS[a]))
            if err is not None:  # compare: every error
                self.samples[f"increment_{axis}"]["errors"] = err[:, a]
        return out
