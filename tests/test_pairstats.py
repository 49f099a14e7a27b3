"""PairStats.summary: mean and RMS of the angular residuals are over the residuals summed (the
paired points), not over paired + duplicate points."""

from __future__ import annotations

import numpy as np
import pytest

from simconform.adapters.replay.pairing import PairStats, RayGrid, pair_by_direction
from simconform.spec import Spec

SPEC = {
    "name": "pairstats",
    "sensors": {
        "lidar": {
            "type": "lidar",
            "rate_hz": 10,
            "rings": {"count": 4, "fov_deg": [-15, 15]},
            "columns": 36,
        }
    },
}


def test_summary_divides_by_the_residuals_it_summed() -> None:
    s = Spec.model_validate(SPEC).sensors["lidar"]
    dirs = s.directions()
    grid = RayGrid(dirs, s.rings.elevations())
    d = dirs[1, :10]

    def turned(deg: float) -> np.ndarray:  # the points rotated by deg in azimuth
        t = np.deg2rad(deg)
        rot = np.array([[np.cos(t), -np.sin(t), 0], [np.sin(t), np.cos(t), 0], [0, 0, 1]])
        return 10.0 * d @ rot.T

    # per ray: a point 0.2 deg off (kept, the closer) and a duplicate 0.4 deg off (left out)
    pts = np.concatenate([turned(0.2), turned(0.4)])
    st = PairStats("direction")
    pair_by_direction(pts, np.zeros(len(pts)), grid, st)
    assert (st.paired, st.duplicates) == (10, 10)
    res = st.summary(10.0, 10.0)["residual_deg"]
    off = 0.2 * np.cos(s.rings.elevations()[1])  # the angle 0.2 deg of azimuth makes at ring 1
    assert res["mean"] == pytest.approx(off, rel=1e-6)  # was half: over paired + duplicates
    assert res["rms"] == pytest.approx(off, rel=1e-6)
    assert res["max"] == pytest.approx(off, rel=1e-6)
