"""ROS 2 message building (bag/messages.py): the odometry's yaw quaternion written directly has
the bits scipy's rotation gave; the ground truth's TUM lines (bag/writer.py) the text they had."""

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


@settings(max_examples=300, deadline=None)
@given(
    t=st.integers(-(10**12), 10**19),
    pose=st.lists(st.floats(width=64), min_size=7, max_size=7),
    as_array=st.booleans(),
)
def test_tum_lines_are_the_formatted_definition(tmp_path_factory, t, pose, as_array) -> None:
    """TumWriter's one `%` gives the text of formatting each value with `.9f` (as it did)."""
    from simconform.bag.writer import TumWriter
    from simconform.stamps import format_seconds

    xyz, quat = (np.array(pose[:3]), np.array(pose[3:])) if as_array else (pose[:3], pose[3:])
    path = tmp_path_factory.mktemp("tum") / "x.tum"
    w = TumWriter(path)
    w.write(t, xyz, quat)
    w.close()
    want = f"{format_seconds(t)} " + " ".join(f"{v:.9f}" for v in (*xyz, *quat)) + "\n"
    assert path.read_text().splitlines(keepends=True)[1] == want
