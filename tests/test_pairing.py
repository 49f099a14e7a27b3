"""Pairing a published copy with its truth (verify/pairing.py), on real MCAP bags: a copy
within the hold pairs, a dropped capture is given up once its copy can no longer come, and a
copy later than the hold, or one without a truth, is refused with a message that says which."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from rosbags.rosbag2 import StoragePlugin, Writer

from simconform.adapters.base import OdomTruth
from simconform.bag.messages import TYPESTORE, odom_pose, odometry, serialize
from simconform.bag.reader import SourceBag
from simconform.errors import UserError
from simconform.verify.pairing import HOLD_SLACK_NS, BagSummary, Pair, Unpaired, stream_pairs

MSGTYPE = "nav_msgs/msg/Odometry"
S = 1_000_000_000
LATE = 20_000_000  # the sensor's largest latency here


def write_bag(path: Path, messages: list[tuple[str, int, int]]) -> Path:
    """A rosbag2 MCAP bag of odometry messages (topic, stamp, log time), in log-time order."""
    writer = Writer(path, version=9, storage_plugin=StoragePlugin.MCAP)
    writer.open()
    conns = {
        t: writer.add_connection(t, MSGTYPE, typestore=TYPESTORE) for t in ("/odom", "/truth/odom")
    }
    for topic, stamp, log in sorted(messages, key=lambda m: m[2]):
        pose = OdomTruth(stamp / S, 0.0, 0.0)
        msg = odometry(pose, np.zeros(3), stamp, "odom", "base_link", np.zeros(3))
        writer.write(conns[topic], log, serialize(msg, MSGTYPE))
    writer.close()
    return path


def pairs(path: Path) -> list:
    src = SourceBag(path)
    try:
        return [
            item
            for _s, item in stream_pairs(
                src,
                {"odom": ("/odom", "/truth/odom")},
                {"odom": odom_pose},
                BagSummary(),
                max_latency_ns={"odom": LATE},
            )
        ]
    finally:
        src.close()


def captures(n: int, skip: set[int] = frozenset(), delay: dict[int, int] | None = None) -> list:
    """n captures at 1 Hz: each truth logged at its stamp, its copy 10 ms later (`delay`
    overrides that per capture; `skip`: captures never published)."""
    out = []
    for k in range(n):
        st = k * S
        out.append(("/truth/odom", st, st))
        if k not in skip:
            out.append(("/odom", st, st + (delay or {}).get(k, 10_000_000)))
    return out


def test_copies_pair_and_a_dropped_capture_is_given_up_in_time(tmp_path):
    items = pairs(write_bag(tmp_path / "bag", captures(40, skip={3})))
    kinds = [(type(it).__name__, it.stamp_ns // S) for it in items]
    assert ("Unpaired", 3) in kinds and len(items) == 40
    # given up once the hold passed (11 s of truths later), not at the end of the bag
    assert kinds.index(("Unpaired", 3)) < kinds.index(("Pair", 20))
    assert all(isinstance(it, Pair) for it in items if it.stamp_ns != 3 * S)


def test_a_copy_within_the_hold_still_pairs(tmp_path):
    late = LATE + HOLD_SLACK_NS - S  # past the latency, inside the hold
    items = pairs(write_bag(tmp_path / "bag", captures(30, delay={2: late})))
    it = next(it for it in items if it.stamp_ns == 2 * S)
    assert isinstance(it, Pair) and it.log_ns == 2 * S + late
    assert not any(isinstance(it, Unpaired) for it in items)


def test_a_copy_later_than_the_hold_is_refused(tmp_path):
    late = LATE + HOLD_SLACK_NS + 2 * S
    with pytest.raises(UserError, match=r"published 12\s*s after its capture: more than 10 s"):
        pairs(write_bag(tmp_path / "bag", captures(30, delay={2: late})))


def test_a_copy_without_a_truth_is_refused(tmp_path):
    msgs = [m for m in captures(10) if not (m[0] == "/truth/odom" and m[1] == 4 * S)]
    with pytest.raises(UserError, match=r"has no truth sample with the same header\.stamp"):
        pairs(write_bag(tmp_path / "bag", msgs))
