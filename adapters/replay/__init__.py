"""Replay: verify a bag recorded from any other simulator or a real robot.

The source bag (ROS 2 sqlite3 or MCAP, or ROS 1) is read through simconform.bag.reader with a
topic map (map.py). Ground truth comes either from /truth/<topic> topics in the bag (our own
layout) or is recomputed: the ground-truth pose stream is interpolated (cubic in position,
rotation spline in orientation, so that the IMU's second differences are smooth) and the
reference backend casts the exact lidar returns, each at its point's own time and pose, and derives
IMU, GNSS and odometry truth from the same motion.

The result is an ordinary run folder in our own layout, so the verifier, the reports and
`simconform compare` treat it like any other run. A source file cut off mid-write is read by
simconform.bag.salvage up to the last complete message, and run.json says "complete": false
with the reason. An MCAP source's chunks are CRC-checked first; a damaged one is skipped, and
run.json's `data_gaps` lists it (and the span after a cut file's last message) for verify.

Where things are, in the order a replay runs:

- session: `replay(ReplayConfig)` -> ReplayResult: validate, scan, align, write into a
  temporary folder next to DIR, move it into place
- map: the topic map (MAP.yaml) models, `load_map`, `check_against_spec`, axis conventions
- state: ReplayConfig, ReplayResult, and Sensor (one mapped sensor's stamps and counts)
- scan: Scan, the first pass (validation, reading, ground-truth motion, capture plan)
- motion: PoseStream, the interpolated ground-truth motion (and Shifted: on a sensor's clock)
- align: each lidar's and IMU's time offset against the pose stream, estimated with its CI
  between the two passes (or fixed, or off); truth is recomputed with it compensated
- write: Replay(Scan), the second pass (bag, gt/, run.json)
- truth: truth recomputed with the reference backend (Recompute, TruthFeed), gt/ files
- convert: source messages in our types (`to_ours`), clouds onto the spec's rays
- pointtime: each lidar point's own time under any driver's field name, type and origin
- pairing: PairStats, RayGrid, pair_by_direction, index_residuals
- hints: the fix named in two errors (the tf pairs a bag has; the points_frame a cloud is in)
- backend: ReplayBackend, the registry's "replay" entry (points `run` to `replay`)
"""

from simconform.adapters.replay.backend import ReplayBackend
from simconform.adapters.replay.session import replay
from simconform.adapters.replay.state import ReplayConfig, ReplayResult

__all__ = ["ReplayBackend", "ReplayConfig", "ReplayResult", "replay"]
