"""Hints that name the fix when a replay's map does not fit the bag.

- A ground-truth tf parent -> child that the bag does not have: the transforms it does have
  (every parent -> child pair on the ground-truth topic, /tf and /tf_static), so the user can
  pick the right pair instead of guessing.
- A lidar cloud whose points lie off the spec's rays: whether they fit when read in the other
  points_frame (world instead of sensor, or the reverse). A cloud in the map frame read as
  sensor-frame points lies off every ray, and the generic advice (rings/columns, pairing) would
  send the user the wrong way.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from simconform.adapters.replay.pairing import PairStats, RayGrid, pair_by_direction
from simconform.adapters.replay.state import Sensor
from simconform.bag.messages import cloud_arrays
from simconform.bag.reader import SourceBag

TF_TYPE = "tf2_msgs/msg/TFMessage"
MAX_PAIRS = 20


def tf_pairs(src: SourceBag, topics: list[str]) -> str:
    """The parent -> child pairs on the given topics that hold tf messages, as one line, e.g.
    "world -> npc, world -> rover (/gt/tf); map -> odom (/tf_static)"; "" when none."""
    types = src.types()
    parts = []
    for topic in dict.fromkeys(topics):
        if types.get(topic) != {TF_TYPE}:
            continue
        pairs: set[str] = set()
        for _t, msgtype, _log, raw in src.messages({topic}):
            try:
                msg = src.deserialize(raw, msgtype)
            except Exception:  # a damaged message: the error being explained is another
                continue
            for tr in msg.transforms:
                pairs.add(f"{tr.header.frame_id.lstrip('/')} -> {tr.child_frame_id.lstrip('/')}")
            if len(pairs) > MAX_PAIRS:
                break
        if pairs:
            listed = sorted(pairs)[:MAX_PAIRS]
            more = ", ..." if len(pairs) > MAX_PAIRS else ""
            parts.append(f"{', '.join(listed)}{more} ({topic})")
    return "; ".join(parts)


def off_ray_share(sn: Sensor, xyz: np.ndarray, grid: RayGrid) -> float:
    """Share of a cloud's finite points (N, 3, sensor frame) more than half a bin off every ray."""
    st = PairStats("hint")
    pair_by_direction(xyz, np.zeros(len(xyz)), grid, st)
    finite = st.received - st.nonfinite
    return st.out_of_bin / finite if finite else 0.0


def frame_hint(sn: Sensor, msg: Any, st: int, grid: RayGrid, motion: Any) -> str | None:
    """When one of the lidar's clouds fits the rays far better read in the other points_frame,
    the map key that fixes it; None otherwise (or without a motion to move points with)."""
    if motion is None or not motion.start_ns <= st <= motion.end_ns:
        return None
    f = cloud_arrays(msg)
    raw = np.stack([f["x"], f["y"], f["z"]], axis=-1).astype(np.float64).reshape(-1, 3)
    pose = motion.pose_at(st).compose(sn.mount)
    as_world = pose.inverse().apply(raw)  # the points read as map-frame points
    if sn.entry.points_frame == "world":
        now, other, name = off_ray_share(sn, as_world, grid), off_ray_share(sn, raw, grid), "sensor"
    else:
        now, other, name = off_ray_share(sn, raw, grid), off_ray_share(sn, as_world, grid), "world"
    if other < 0.05 and other < now / 4:
        where = "the sensor frame" if name == "sensor" else "the map (world) frame"
        return (
            f"the points fit the spec's rays when read in {where} ({other:.1%} off the rays "
            f"instead of {now:.1%}): set points_frame: {name} for sensors.{sn.name} in the map"
        )
    return None
