"""The recorder's ENU -> WGS-84 conversion (bag/geodetic.py) gives pymap3d's bits."""

from __future__ import annotations

import math

import numpy as np
import pymap3d
from hypothesis import given, settings
from hypothesis import strategies as st

from simconform.bag.geodetic import EnuToGeodetic, ecef_to_geodetic


def pymap3d_lla(enu, lat0: float, lon0: float, alt0: float) -> tuple[float, ...]:
    return tuple(float(v) for v in pymap3d.enu2geodetic(*enu, lat0, lon0, alt0))


def same_bits(a, b) -> bool:
    return all(x == y or (math.isnan(x) and math.isnan(y)) for x, y in zip(a, b))


offset = st.floats(-1e7, 1e7, allow_nan=False)
small = st.floats(-1e3, 1e3, allow_nan=False)


@settings(max_examples=2000, deadline=None)
@given(
    lat0=st.floats(-90, 90),
    lon0=st.floats(-180, 180),
    alt0=st.floats(-500, 9000),
    enu=st.one_of(st.tuples(small, small, small), st.tuples(offset, offset, offset)),
)
def test_enu_to_geodetic_is_pymap3d_bit_for_bit(lat0, lon0, alt0, enu) -> None:
    ours = EnuToGeodetic(lat0, lon0, alt0)(*enu)
    assert same_bits(ours, pymap3d_lla(enu, lat0, lon0, alt0)), (ours, enu)


def test_the_special_points_too() -> None:
    """The polar axis, the equator's plane, the centre of the Earth, inside the ellipsoid, NaN:
    pymap3d's branches for them."""
    b = 6356752.31424518
    cases = [(0.0, 0.0, 5.0), (0.0, 0.0, -5.0), (0.0, 0.0, 0.0), (0.0, 0.0, b), (0.0, 0.0, -b)]
    cases += [(6378137.0, 0.0, 0.0), (1e3, 2e3, 0.0), (1e6, -2e6, 3e6), (math.nan, 1.0, 2.0)]
    for xyz in cases:
        want = tuple(float(v) for v in pymap3d.ecef2geodetic(*xyz))
        assert same_bits(ecef_to_geodetic(*xyz), want), xyz
    # where r**2 (pow) and r * r differ in the last bit: found by hypothesis
    enu, origin = (
        (72.6016542190082, 72.6016542190082, -331.48502813674963),
        (50.1327015685, 0, 5620.5),
    )
    assert same_bits(EnuToGeodetic(*origin)(*enu), pymap3d_lla(enu, *origin))
    # a rover at the pole, and one driving a kilometre down into the Earth
    for lat0, enu in [(90.0, (0.0, 0.0, 1.0)), (-90.0, (3.0, -4.0, 0.0)), (45.0, (0, 0, -1e3))]:
        assert same_bits(EnuToGeodetic(lat0, 10.0, 0.0)(*enu), pymap3d_lla(enu, lat0, 10.0, 0.0))


def test_demo_scale_points_agree_in_bulk() -> None:
    """3,000 points of a rover's scale (metres to kilometres from the origin), each converted
    by pymap3d alone, as the recorder did (pymap3d on arrays squares r differently: its bits
    differ from its own one-point results now and then)."""
    rng = np.random.default_rng(7)
    for lat0, lon0, alt0 in rng.uniform([-89, -180, -100], [89, 180, 3000], (10, 3)):
        f = EnuToGeodetic(lat0, lon0, alt0)
        for enu in rng.normal(size=(300, 3)) * [500.0, 500.0, 20.0]:
            assert same_bits(f(*enu), pymap3d_lla(enu, lat0, lon0, alt0)), (enu, lat0, lon0)
