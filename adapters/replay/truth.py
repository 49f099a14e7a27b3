"""Truth recomputed from the ground-truth motion, and the run's gt/ pose files.

Where the source bag has no /truth/<topic> topics, the reference backend casts the exact
lidar returns, each ray at its published point's own time and pose, and derives IMU, GNSS
and odometry truth from the same motion (in batches per sensor, at the stamps the scan
planned).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from simconform.adapters.base import GnssTruth, ImuTruth, OdomTruth
from simconform.adapters.reference import ReferenceBackend
from simconform.adapters.replay.convert import our_cloud
from simconform.adapters.replay.motion import PoseStream
from simconform.adapters.replay.pairing import RayGrid
from simconform.adapters.replay.state import Sensor
from simconform.bag.cloud import deskew
from simconform.bag.packed import LightMessages
from simconform.bag.writer import TumWriter
from simconform.frames import Pose
from simconform.spec import LidarSpec, Spec
from simconform.world import World


class TruthFeed:
    """Truth of a vector sensor at its (sorted) capture stamps, computed in batches."""

    def __init__(
        self,
        backend: ReferenceBackend,
        name: str,
        stamps: np.ndarray,
        motion: PoseStream,
        batch: int = 2000,
    ) -> None:
        self.backend, self.name, self.motion = backend, name, motion
        self.stamps, self.batch = stamps, batch
        self.k = self.base = self.j = 0
        self.buf: list = []

    def get(self, t: int) -> GnssTruth | ImuTruth | OdomTruth:
        if self.j >= len(self.buf):
            chunk = self.stamps[self.k : self.k + self.batch]
            self.k += len(chunk)
            self.buf = self.backend.capture_batch(self.name, chunk, self.motion)
            self.base = self.k - len(chunk)
            self.j = 0
        if int(self.stamps[self.base + self.j]) != t:
            raise RuntimeError(f"{self.name}: truth requested out of order at {t} ns")
        self.j += 1
        return self.buf[self.j - 1]


class Recompute:
    """Truth of any capture of the mapped sensors from the reference backend and the motion."""

    def __init__(self, world: World, spec: Spec, motion: PoseStream, sensors: list[Sensor]) -> None:
        self.world, self.spec, self.motion = world, spec, motion
        self.backend = ReferenceBackend()
        self.backend.open(world, spec)
        self.feeds: dict[str, TruthFeed] = {}
        for sn in sensors:
            if not sn.is_lidar:
                need = sorted(sn.kept | {m for v in sn.missing_after.values() for m in v})
                self.feeds[sn.name] = TruthFeed(
                    self.backend, sn.name, np.array(need, np.int64), motion.shifted(sn.offset_ns)
                )
        self.light: dict[str, LightMessages] = {}  # a vector sensor's truth messages

    def capture(
        self, sn: Sensor, t: int, ray_ns: np.ndarray | None = None
    ) -> tuple[Any, RayGrid | None]:
        """The truth message of the capture stamped t, and for a deskewed lidar its rays (to
        pair the published cloud with).

        A lidar's truth is cast ray by ray at `ray_ns` (rings, columns; absolute ns), each
        published point's own time, else at the spec's column schedule from the sweep start
        (t minus the spec's header_stamp offset); points stay in the sensor frame at their own
        time, as a driver publishes them, or (map `deskewed: true`) are moved into the frame at
        the stamp like the published ones."""
        s = sn.s
        if isinstance(s, LidarSpec):
            off = s.stamp_offset_ns()
            motion = self.motion.shifted(sn.offset_ns)  # the pose stream on the sensor's clock
            if ray_ns is not None:
                lt = self.backend.lidar_at(sn.name, t, ray_ns, motion)
            else:
                lt = self.backend.capture(sn.name, t - off, motion)
                lt = dataclasses.replace(lt, t_offset=lt.t_offset - off * 1e-9)
            if sn.time_mode != "deskewed":
                return our_cloud(lt, t, sn.frame, timed=True), None
            cols = lt.ranges.shape[1]
            pts = deskew(lt, 0 if off == 0 else cols - 1)
            lt = dataclasses.replace(lt, points=pts, column_motion=None)
            grid = RayGrid.from_truth(lt.points, lt.directions, s.rings.elevations())
            return our_cloud(lt, t, sn.frame, timed=False), grid
        sample = self.feeds[sn.name].get(t)
        if sn.name not in self.light:
            self.light[sn.name] = LightMessages(
                s, sn.frame, self.spec.base_frame, self.world.origin
            )
        return self.light[sn.name].message(sample, t), None


def write_gt(gt_dir: Path, motion: PoseStream, sensors: list[Sensor]) -> None:
    """gt/base_link.tum (the motion at its samples) and gt/<sensor>.tum (the sensor's pose
    at each capture inside the ground truth)."""
    m = motion
    w = TumWriter(gt_dir / "base_link.tum")
    q = Pose(m.positions, m.rotations).quat()
    for t, p, qq in zip(m.times_ns, m.positions, q):
        w.write(int(t), p, qq)
    w.close()
    for sn in sensors:
        ms = m.shifted(sn.offset_ns)  # on the sensor's clock
        t = np.array(sorted(x for x in sn.captures if ms.start_ns <= x <= ms.end_ns), np.int64)
        w = TumWriter(gt_dir / f"{sn.name}.tum")
        if len(t):
            poses = ms.pose_at(t).compose(sn.mount)
            for tt, p, qq in zip(t, poses.t, poses.quat()):
                w.write(int(tt), p, qq)
        w.close()
