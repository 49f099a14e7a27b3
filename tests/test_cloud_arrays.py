"""PointCloud2 -> field arrays (bag/messages.py cloud_arrays): the points read in place from
rows `row_step` apart equal a row-by-row reading, for any padding, field layout and byte order."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simconform.bag.messages import T, cloud_arrays, cloud_xyz

_FORMATS = {7: "f4", 8: "f8", 2: "u1", 4: "u2", 6: "u4"}


def _msg(fields, point_step, row_step, h, w, data, big):
    pf = T["sensor_msgs/msg/PointField"]
    header = T["std_msgs/msg/Header"](stamp=T["builtin_interfaces/msg/Time"](sec=0, nanosec=0),
                                      frame_id="lidar")  # fmt: skip
    return T["sensor_msgs/msg/PointCloud2"](
        header=header, height=h, width=w,
        fields=[pf(name=n, offset=o, datatype=t, count=1) for n, o, t in fields],
        is_bigendian=big, point_step=point_step, row_step=row_step,
        data=np.frombuffer(data, dtype=np.uint8), is_dense=False,
    )  # fmt: skip


def _row_by_row(msg, dtype):
    raw = np.asarray(msg.data, dtype=np.uint8)
    rows = [
        np.frombuffer(raw[r * msg.row_step :].tobytes(), dtype=dtype, count=msg.width)
        for r in range(msg.height)
    ]
    return np.stack(rows) if rows else np.zeros((0, msg.width), dtype)


# row padding, byte order and the bytes' seed, for both readers' tests
_ROWS = {"pad": st.integers(0, 40), "big": st.booleans(), "seed": st.integers(0, 2**32 - 1)}


@settings(max_examples=60, deadline=None)
@given(
    extra=st.lists(st.sampled_from(sorted(_FORMATS)), max_size=3),
    gap=st.integers(0, 9),
    h=st.integers(1, 5),
    w=st.integers(1, 30),
    **_ROWS,
)
def test_in_place_reading_equals_row_by_row(extra, gap, pad, h, w, big, seed) -> None:
    fields, off = [], 0
    for name, t in [("x", 7), ("y", 7), ("z", 7)] + [(f"f{i}", t) for i, t in enumerate(extra)]:
        fields.append((name, off, t))
        off += int(_FORMATS[t][1]) + gap
    point_step = off
    row_step = w * point_step + pad
    data = np.random.default_rng(seed).integers(0, 256, h * row_step, dtype=np.uint8).tobytes()
    msg = _msg(fields, point_step, row_step, h, w, data, big)
    end = ">" if big else "<"
    dtype = np.dtype({"names": [f[0] for f in fields],
                      "formats": [end + _FORMATS[f[2]] for f in fields],
                      "offsets": [f[1] for f in fields], "itemsize": point_step})  # fmt: skip
    want = _row_by_row(msg, dtype)
    got = cloud_arrays(msg)
    for name, *_ in fields:
        assert got[name].shape == (h, w)
        assert np.array_equal(got[name], want[name], equal_nan=True)
        got[name][...] = 0  # writable, and no view into the message
    assert bytes(msg.data) == data


def test_short_data_is_a_clear_error() -> None:
    msg = _msg([("x", 0, 7), ("y", 4, 7), ("z", 8, 7)], 12, 120, 2, 10, bytes(200), False)
    with pytest.raises(ValueError, match="2 rows of 10 points need 240"):
        cloud_arrays(msg)


@settings(max_examples=80, deadline=None)
@given(
    lead=st.sampled_from([0, 4, 16]),
    xyz_type=st.sampled_from([7, 7, 8]),
    gap=st.integers(0, 5),
    h=st.integers(0, 5),
    w=st.integers(0, 30),
    **_ROWS,
)
def test_cloud_xyz_is_the_stack_of_x_y_z(lead, xyz_type, gap, pad, h, w, big, seed) -> None:
    """cloud_xyz reads three consecutive float32 in one strided copy (gap 0), anything else
    through cloud_arrays: always np.stack of x, y, z, NaN payloads and byte order included."""
    size = int(_FORMATS[xyz_type][1])
    fields = [("intensity", 0, 7)] if lead else []
    fields += [(n, lead + i * (size + gap), xyz_type) for i, n in enumerate("xyz")]
    point_step = lead + 3 * (size + gap) + 4
    row_step = w * point_step + pad
    data = np.random.default_rng(seed).integers(0, 256, h * row_step, dtype=np.uint8).tobytes()
    msg = _msg(fields, point_step, row_step, h, w, data, big)
    a = cloud_arrays(msg)
    want = np.stack([a["x"], a["y"], a["z"]], axis=-1)
    got = cloud_xyz(msg)
    assert got.shape == want.shape == (h, w, 3) and got.dtype.kind == "f"
    assert got.dtype.itemsize == want.dtype.itemsize and got.flags.c_contiguous
    assert np.array_equal(got.astype(want.dtype).view(np.uint8), want.view(np.uint8))
    assert got.dtype.isnative


def test_cloud_xyz_of_short_data_is_the_same_clear_error() -> None:
    msg = _msg([("x", 0, 7), ("y", 4, 7), ("z", 8, 7)], 12, 120, 2, 10, bytes(200), False)
    with pytest.raises(ValueError, match="2 rows of 10 points need 240"):
        cloud_xyz(msg)
