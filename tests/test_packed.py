"""The packed light-sensor messages (bag/packed.py) are rosbags' serialization byte for byte."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from simconform.adapters.base import ImuTruth, OdomTruth
from simconform.bag import messages as m
from simconform.bag.packed import ImuPacker, NavSatPacker, OdometryPacker, TfPacker

frame = st.text(min_size=0, max_size=24)  # any length (each pads differently), UTF-8 too
value = st.floats(allow_nan=True, allow_infinity=True, width=64)
value32 = st.floats(allow_nan=True, allow_infinity=True, width=32)


def vectors(n: int):
    """float64 and float32 arrays (a backend's sample may hold either) and plain tuples."""
    return st.one_of(
        st.lists(value, min_size=n, max_size=n).map(np.array),
        st.lists(value32, min_size=n, max_size=n).map(lambda v: np.array(v, np.float32)),
        st.lists(value, min_size=n, max_size=n).map(tuple),
    )


vec, quat = vectors(3), vectors(4)
variance = st.lists(st.floats(0, 1e6), min_size=3, max_size=3).map(np.array)
stamp = st.integers(0, 2**31 * 1_000_000_000 - 1)  # header.stamp.sec is an int32


def rosbags(msg, typename: str) -> bytes:
    return bytes(m.serialize(msg, typename))


@settings(max_examples=300, deadline=None)
@given(frame, stamp, vec, vec, quat, variance, variance, st.booleans())
def test_imu(frame_id, t, accel, gyro, q, av, gv, with_orientation) -> None:
    ac, gc = m.diagonal_covariance(av), m.diagonal_covariance(gv)
    s = ImuTruth(accel=accel, gyro=gyro, orientation=q)
    want = rosbags(m.imu(s, t, frame_id, ac, gc, with_orientation), m.IMU)
    assert ImuPacker(frame_id, ac, gc).pack(s, t, with_orientation) == want


@settings(max_examples=300, deadline=None)
@given(frame, stamp, vec, variance)
def test_navsat(frame_id, t, lla, var) -> None:
    cov = m.diagonal_covariance(var)
    want = rosbags(m.navsat(lla, t, frame_id, cov), m.NAVSATFIX)
    assert NavSatPacker(frame_id, cov).pack(lla, t) == want


@settings(max_examples=300, deadline=None)
@given(frame, frame, stamp, st.tuples(value, value, st.floats(-1e9, 1e9)), vec, variance)
def test_odometry(frame_id, child, t, pose, twist, var) -> None:
    """x, y any float; the yaw finite (an infinite one has no quaternion: yaw_quat raises)."""
    s = OdomTruth(*pose)
    want = rosbags(m.odometry(s, twist, t, frame_id, child, var), m.ODOMETRY)
    assert OdometryPacker(frame_id, child, var).pack(s, twist, t) == want


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(stamp, frame, frame, vec, quat), min_size=0, max_size=4))
def test_tf(items) -> None:
    packer = TfPacker()
    assert packer.pack(items) == rosbags(m.transforms(items), m.TFMESSAGE)
    assert packer.pack(items) == rosbags(m.transforms(items), m.TFMESSAGE)  # its cached layout
