"""ROS 2 message building (bag/messages.py): the odometry's yaw quaternion written directly has
the bits scipy's rotation gave."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.spatial.transform import Rotation

from simconform.bag.messages import yaw_quat
from simconform.frames import Pose


@settings(max_examples=500, deadline=None)
@given(
    yaw=st.one_of(
        st.floats(-1e6, 1e6, allow_nan=False),
        st.sampled_from([0.0, -0.0, math.pi, -math.pi, 2 * math.pi, -2 * math.pi, 3 * math.pi]),
        st.floats(-1e-300, 1e-300),
    )
)
def test_yaw_quat_is_scipys_canonical_quaternion(yaw: float) -> None:
    want = Pose(np.zeros(3), Rotation.from_euler("z", yaw)).quat()
    got = yaw_quat(yaw)
    assert np.array_equal(got.view(np.uint64), want.view(np.uint64)), (yaw, got, want)
