"""The light sensors' messages as the run's process writes them, against their peers in one
process: each message packed by bag/packed.py against rosbags building and serializing it
(bag/messages.py's builders, rosbags' serialize_cdr), and a GNSS fix's latitude, longitude and
altitude by bag/geodetic.py against pymap3d.enu2geodetic on the same point. The demo writes
40,000 Imu, 8,000 Odometry, 4,000 NavSatFix and 14,000 TFMessage; each pair gives the same
bytes (checked here too).

    python bench/messages.py [--repeats 7]
"""

from __future__ import annotations

import argparse
import timeit

import numpy as np
import pymap3d

from simconform.adapters.base import ImuTruth, OdomTruth
from simconform.bag import messages as m
from simconform.bag.geodetic import EnuToGeodetic
from simconform.bag.packed import ImuPacker, NavSatPacker, OdometryPacker, TfPacker

STAMP = 1_765_000_000_123_456_789


def best_us(fn, repeats: int, number: int = 2000) -> float:
    return min(timeit.repeat(fn, number=number, repeat=repeats)) / number * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    acov, gcov = (m.diagonal_covariance(rng.random(3) * 1e-4) for _ in range(2))
    a, g, q = rng.normal(size=3), rng.normal(size=3), rng.normal(size=4)
    imu = ImuTruth(accel=a, gyro=g, orientation=q)
    odom, twist, var = OdomTruth(12.5, -3.25, 0.7), rng.normal(size=3), rng.random(3) * 1e-4
    tf = [(STAMP, "map", "truth/base_link", rng.normal(size=3), rng.normal(size=4))]
    lla0, enu = (37.4275, -122.1697, 30.0), (112.5, -48.25, 1.5)
    to_lla = EnuToGeodetic(*lla0)
    lla = to_lla(*enu)
    ip, npk, tp = ImuPacker("imu", acov, gcov), NavSatPacker("gnss", gcov), TfPacker()
    op = OdometryPacker("odom", "base_link", var)
    cases = [
        (
            "Imu",
            lambda: ip.pack(imu, STAMP, True),
            lambda: bytes(m.serialize(m.imu(imu, STAMP, "imu", acov, gcov, True), m.IMU)),
        ),
        (
            "NavSatFix",
            lambda: npk.pack(lla, STAMP),
            lambda: bytes(m.serialize(m.navsat(lla, STAMP, "gnss", gcov), m.NAVSATFIX)),
        ),
        (
            "Odometry",
            lambda: op.pack(odom, twist, STAMP),
            lambda: bytes(
                m.serialize(m.odometry(odom, twist, STAMP, "odom", "base_link", var), m.ODOMETRY)
            ),
        ),
        (
            "TFMessage",
            lambda: tp.pack(tf),
            lambda: bytes(m.serialize(m.transforms(tf), m.TFMESSAGE)),
        ),
        (
            "ENU -> geodetic",
            lambda: to_lla(*enu),
            lambda: tuple(float(v) for v in pymap3d.enu2geodetic(*enu, *lla0)),
        ),
    ]
    print(f"{'us a message':16s} {'simconform':>11s} {'peer':>9s}  ratio  (peer: rosbags, pymap3d)")
    for name, ours, peer in cases:
        if ours() != peer():
            raise SystemExit(f"{name}: the two differ")
        a, b = best_us(ours, args.repeats), best_us(peer, args.repeats)
        print(f"{name:16s} {a:9.2f} us {b:6.2f} us  {a / b:.3f}")


if __name__ == "__main__":
    main()
