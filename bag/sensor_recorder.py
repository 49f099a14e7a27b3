"""One sensor's samples as ROS 2 messages: truth on /truth/<topic>, published on <topic>
(and the first odometry sensor's estimate on /tf, odom -> base_link).

Which message type each sensor kind writes, and the fields that are derived rather than
sampled (IMU covariances from the spec's sigmas, GNSS latitude/longitude from ENU at the world's
origin, odometry twist from the SE(2) increment between consecutive samples).
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from simconform.adapters.base import CameraTruth, GnssTruth, ImuTruth, LidarTruth, OdomTruth
from simconform.bag import cloud, messages
from simconform.bag.packed import LightMessages, TfPacker
from simconform.bag.writer import BagRecorder, TumWriter
from simconform.frames import Pose
from simconform.spec import CameraSpec, GnssSpec, ImuSpec, LidarSpec, OdomSpec, Spec
from simconform.world import World


class SensorRecorder:
    """One sensor's truth and published samples as messages on its topic and its truth topic."""

    def __init__(self, name: str, spec: Spec, world: World, bag: BagRecorder, gt_dir: Path):
        self.name = name
        self.spec = spec
        self.s = spec.sensors[name]
        self.optical = f"{name}_optical_frame"
        self.topic = spec.topic(name)
        self.frame = spec.frame(name)
        self.base = spec.base_frame
        self.bag = bag
        self._topics: list[tuple[str, str]] | None = None
        # a light sensor's messages are packed, not built and serialized (bag/packed.py)
        if isinstance(self.s, ImuSpec | GnssSpec | OdomSpec):
            self.light = LightMessages(self.s, self.frame, self.base, world.origin)
        self.tf = TfPacker()
        self.gt = TumWriter(gt_dir / f"{name}.tum")
        self.mount = Pose.from_xyz_rpy(self.s.mount.xyz, self.s.mount.rpy)
        self.captures = 0
        self.published = 0
        # the spec's first odometry sensor also broadcasts its estimate on /tf (odom ->
        # base_link), as an odometry node does, so that /tf and /odom agree
        first_odom = next((n for n, x in spec.sensors.items() if isinstance(x, OdomSpec)), None)
        self.tf_estimate = name == first_odom

    KINDS: ClassVar[dict] = {
        LidarSpec: messages.POINTCLOUD2,
        ImuSpec: messages.IMU,
        GnssSpec: messages.NAVSATFIX,
        OdomSpec: messages.ODOMETRY,
    }

    def topics(self) -> list[tuple[str, str]]:
        """Every (topic, type) this sensor writes, published first, then truth (computed once:
        every message asks)."""
        if self._topics is None:
            self._topics = self._make_topics()
        return self._topics

    def _make_topics(self) -> list[tuple[str, str]]:
        pub, truth = self.spec.data_topics(self.name)
        if isinstance(self.s, CameraSpec):
            img = messages.COMPRESSED if self.s.encoding == "jpeg" else messages.IMAGE
            out = [
                (pub, img),
                (f"{self.topic}/camera_info", messages.CAMERA_INFO),
                (truth, messages.IMAGE),
            ]
            if self.s.depth:
                out.append((f"/truth{self.topic}/depth", messages.IMAGE))
            return out
        kind = self.KINDS[type(self.s)]
        return [(pub, kind), (truth, kind)]

    def record(self, t_ns: int, truth, published, xyz, quat) -> None:
        """One capture at t_ns (a lidar's sweep start). A lidar stamped at its sweep end
        (`header_stamp: end`) is stamped, and logged, that much later: its latency counts
        from the stamp, as a driver that publishes after the sweep."""
        self.captures += 1
        self.gt.write(t_ns, xyz, quat)
        shift = self.s.stamp_offset_ns() if isinstance(self.s, LidarSpec) else 0
        for topic, kind, msg in self._truth_msgs(truth, t_ns):
            self.bag.push(topic, kind, msg, t_ns + shift)
        if published.sample is not None:
            self.published += 1
            for topic, kind, msg in self._published_msgs(published.sample, t_ns):
                self.bag.push(topic, kind, msg, published.publish_ns + shift)

    def _truth_msgs(self, truth, t_ns: int):
        topics = self.topics()
        if isinstance(truth, CameraTruth):
            yield topics[2][0], messages.IMAGE, messages.image_rgb8(truth.image, t_ns, self.optical)
            if truth.depth is not None:
                yield (
                    topics[3][0],
                    messages.IMAGE,
                    messages.image_depth(truth.depth, t_ns, self.optical),
                )
            return
        yield topics[1][0], topics[1][1], self._msg(truth, t_ns, "truth")

    def _published_msgs(self, sample, t_ns: int):
        topics = self.topics()
        if isinstance(sample, CameraTruth):
            s = self.s
            if sample.encoded is not None:
                yield (
                    topics[0][0],
                    messages.COMPRESSED,
                    messages.compressed(sample.encoded, t_ns, self.optical),
                )
            else:
                yield (
                    topics[0][0],
                    messages.IMAGE,
                    messages.image_rgb8(sample.image, t_ns, self.optical),
                )
            info = messages.camera_info(s.k(), s.width, s.height, t_ns, self.optical)
            yield topics[1][0], messages.CAMERA_INFO, info
            return
        yield topics[0][0], topics[0][1], self._msg(sample, t_ns, "pub")
        if self.tf_estimate and isinstance(sample, OdomTruth):
            q = messages.yaw_quat(sample.yaw)  # /odom's orientation, the same bits
            xyz = (sample.x, sample.y, 0.0)
            yield "/tf", messages.TFMESSAGE, self.tf.pack([(t_ns, "odom", self.base, xyz, q)])

    def _msg(self, sample, t_ns: int, which: str):
        s = self.s
        if isinstance(sample, LidarTruth):
            off = s.stamp_offset_ns()
            return cloud.cloud(sample, t_ns + off, self.frame, s.point_time, off)
        if isinstance(sample, ImuTruth | GnssTruth | OdomTruth):
            return self.light.message(sample, t_ns, which)
        raise TypeError(type(sample).__name__)

    def close(self) -> None:
        self.gt.close()
