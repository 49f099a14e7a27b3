"""ENU about the world's origin to WGS-84 latitude, longitude and altitude, one point at a time.

The recorder converts every GNSS fix (truth and published) as it is recorded. pymap3d, the
library for this, does it in numpy on 0-d arrays: 220 us a point, 0.9 CPU-s of a demo run's
own process (4,000 fixes). This is pymap3d's computation for one point (`enu2uvw`, then
You (2000) as its `ecef2geodetic` writes it, term for term) in Python floats, with the origin's
ECEF position and trigonometry done once: about 7 us a point, and pymap3d's bits
(tests/test_geodetic.py), so the bags are the ones pymap3d gave. Where numpy's tan, arctan,
hypot and arctan2 differ from the C library's in the last bit, numpy's are called.
"""

from __future__ import annotations

import math

import numpy as np
import pymap3d
from pymap3d.ellipsoid import Ellipsoid

_WGS84 = Ellipsoid.from_name("wgs84")
_A = _WGS84.semimajor_axis
_B = _WGS84.semiminor_axis
_E = math.sqrt(_A**2 - _B**2)
# numpy's tan, arctan, hypot and arctan2 differ from the C library's in the last bit on a few
# inputs (tens of thousands of random points); called on Python floats they give pymap3d's bits
_tan, _atan, _hypot, _atan2 = np.tan, np.arctan, np.hypot, np.arctan2
_LIM = math.pi / 2 - 2.220446049250313e-16  # pymap3d's float-precision patch at the poles


class EnuToGeodetic:
    """`(lat_deg, lon_deg, alt_m)` of an ENU point about one origin."""

    def __init__(self, lat0: float, lon0: float, alt0: float) -> None:
        self.x0, self.y0, self.z0 = (float(v) for v in pymap3d.geodetic2ecef(lat0, lon0, alt0))
        lat, lon = math.radians(lat0), math.radians(lon0)
        self.clat, self.slat = math.cos(lat), math.sin(lat)
        self.clon, self.slon = math.cos(lon), math.sin(lon)

    def __call__(self, east: float, north: float, up: float) -> tuple[float, float, float]:
        t = self.clat * up - self.slat * north
        w = self.slat * up + self.clat * north
        u = self.clon * t - self.slon * east
        v = self.slon * t + self.clon * east
        return ecef_to_geodetic(self.x0 + u, self.y0 + v, self.z0 + w)


def ecef_to_geodetic(x: float, y: float, z: float) -> tuple[float, float, float]:
    """pymap3d.ecef2geodetic (WGS-84, degrees) for one point, in the same operations."""
    # pymap3d squares x, y, z as 0-d arrays (numpy multiplies) but r as a numpy scalar (the
    # C library's pow, as Python's ** is): they differ in the last bit now and then
    r = math.sqrt(x * x + y * y + z * z)
    u = math.sqrt(0.5 * (r**2 - _E**2) + 0.5 * _hypot(r**2 - _E**2, 2 * _E * z))
    hxy = _hypot(x, y)
    hue = _hypot(u, _E)
    if abs(u) <= 1e-8 or abs(hxy) <= 1e-8:  # pymap3d's numpy.isclose(., 0): on the axis
        beta = 0.0 if abs(z) <= 1e-8 else math.copysign(math.pi / 2, z)
    else:
        beta = _atan(hue / u * z / hxy)
        beta += ((_B * u - _A * hue + _E**2) * math.sin(beta)) / (
            _A * hue * 1 / math.cos(beta) - _E**2 * math.cos(beta)
        )
    lat = _atan(_A / _B * _tan(beta))
    cos_beta = math.cos(beta)
    if beta >= _LIM:
        lat, cos_beta = math.pi / 2, 0.0
    elif beta <= -_LIM:
        lat, cos_beta = -math.pi / 2, 0.0
    lon = _atan2(y, x)
    alt = _hypot(z - _B * math.sin(beta), hxy - _A * cos_beta)
    if x * x / _A**2 + y * y / _A**2 + z * z / _B**2 < 1:  # inside the ellipsoid
        alt = -alt
    return math.degrees(lat), math.degrees(lon), alt
