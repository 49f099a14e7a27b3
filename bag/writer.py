"""Recording: the rosbag2 directory (rosbags writer) and the ground-truth TUM files.

Messages are written in log-time order (log time = publish time, truth at capture time): each
message waits in a heap until the simulation clock has passed its log time, so a bag is
byte-identical for the same inputs and seed, and an interrupted run's bag is complete up to the
moment it stopped. The rosbags writers are storage.py's: MCAP bags carry CRCs (every chunk, the
data section, the summary) and every complete chunk reaches the operating system as it is
written; sqlite3 bags are committed after about every MiB, so a killed run keeps them.
"""

from __future__ import annotations

import heapq
from pathlib import Path
from typing import Any

from rosbags.interfaces import (
    Qos,
    QosDurability,
    QosHistory,
    QosLiveliness,
    QosReliability,
    QosTime,
)
from rosbags.rosbag2 import CompressionFormat, CompressionMode, StoragePlugin

from simconform.bag.messages import TYPESTORE
from simconform.bag.storage import CrcWriter
from simconform.stamps import format_seconds

STORAGES = {"mcap": StoragePlugin.MCAP, "sqlite3": StoragePlugin.SQLITE3}

_INF = QosTime(sec=2147483647, nsec=4294967295)


def _qos(reliability: QosReliability, durability: QosDurability, depth: int) -> Qos:
    return Qos(
        history=QosHistory.KEEP_LAST,
        depth=depth,
        reliability=reliability,
        durability=durability,
        deadline=_INF,
        lifespan=_INF,
        liveliness=QosLiveliness.AUTOMATIC,
        liveliness_lease_duration=_INF,
        avoid_ros_namespace_conventions=False,
    )


# What a ROS 2 publisher of each kind offers, recorded so `ros2 bag play` republishes with it
# (an empty list makes ROS 2 tools warn and fall back to defaults): sensor streams with
# rclcpp's SensorDataQoS as drivers do, /tf_static latched, everything else (tf, odometry,
# ground truth, which a consumer must not lose) with the default reliable profile.
_LATCHED = _qos(QosReliability.RELIABLE, QosDurability.TRANSIENT_LOCAL, 1)
_SENSOR_DATA = _qos(QosReliability.BEST_EFFORT, QosDurability.VOLATILE, 5)
_RELIABLE = _qos(QosReliability.RELIABLE, QosDurability.VOLATILE, 10)


def offered_qos(topic: str, msgtype: str, latched: bool = False) -> Qos:
    """The QoS profile a publisher of `topic` offers (see above)."""
    if latched:
        return _LATCHED
    if msgtype.startswith("sensor_msgs/") and not topic.startswith("/truth/"):
        return _SENSOR_DATA
    return _RELIABLE


class BagRecorder:
    def __init__(self, path: Path, storage: str = "mcap") -> None:
        self.writer = CrcWriter(path, version=9, storage_plugin=STORAGES[storage])
        if storage == "mcap":  # zstd chunks: truth images and clouds compress several-fold
            self.writer.set_compression(CompressionMode.STORAGE, CompressionFormat.ZSTD)
        self.writer.open()
        self.connections: dict[str, Any] = {}
        self.heap: list[tuple[int, int, str, memoryview]] = []
        self.seq = 0
        self.written = 0

    def connection(self, topic: str, msgtype: str, latched: bool = False) -> None:
        if topic not in self.connections:
            qos = [offered_qos(topic, msgtype, latched)]
            self.connections[topic] = self.writer.add_connection(
                topic, msgtype, typestore=TYPESTORE, offered_qos_profiles=qos
            )

    def push(self, topic: str, msgtype: str, msg, log_ns: int) -> None:
        """Queue a message (or its CDR bytes: bag/packed.py); it is written once the clock
        passes log_ns."""
        self.connection(topic, msgtype)
        # serialize_cdr gives a memoryview: written, never copied
        data = msg if isinstance(msg, bytes) else TYPESTORE.serialize_cdr(msg, msgtype)
        heapq.heappush(self.heap, (int(log_ns), self.seq, topic, data))
        self.seq += 1

    def advance(self, now_ns: int | None) -> None:
        """Write every queued message with log time <= now_ns (all of them for None)."""
        while self.heap and (now_ns is None or self.heap[0][0] <= now_ns):
            log_ns, _, topic, data = heapq.heappop(self.heap)
            self.writer.write(self.connections[topic], log_ns, data)
            self.written += 1

    def close(self) -> None:
        self.advance(None)
        self.writer.close()


class TumWriter:
    """gt/*.tum: poses in the map frame, readable by evo (`evo_traj tum gt/base_link.tum`)."""

    def __init__(self, path: Path) -> None:
        self.fh = open(path, "w")  # noqa: SIM115 - closed by close()
        self.fh.write("# t x y z qx qy qz qw (map frame)\n")

    LINE = "%s" + " %.9f" * 7 + "\n"  # the 7 values as Python floats: 3x faster than numpy's

    def write(self, t_ns: int, xyz, quat) -> None:
        self.fh.write(self.LINE % (format_seconds(t_ns), *map(float, xyz), *map(float, quat)))

    def close(self) -> None:
        self.fh.close()
