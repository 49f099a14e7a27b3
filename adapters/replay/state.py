"""What a replay carries from its first pass to its second: config, mapped sensors, result."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simconform.adapters.replay.map import SensorTopic
from simconform.adapters.replay.motion import PoseStream
from simconform.adapters.replay.pairing import PairStats, RayGrid
from simconform.adapters.replay.pointtime import PointTime
from simconform.frames import Pose
from simconform.spec import ImuSpec, LidarSpec
from simconform.stamps import format_seconds


@dataclass
class ReplayConfig:
    """The command's inputs: world and spec default to the map's `world:` and `spec:`."""

    bag: Path
    map: Path
    out: Path
    world: Path | None = None
    spec: Path | None = None
    force: bool = False
    align: bool = True  # estimate each sensor's time offset against the pose stream (align.py)
    time_offsets: list[str] = field(default_factory=list)  # --time-offset: MS or SENSOR=MS
    level: float = 0.95  # of the offsets' intervals
    progress: bool | None = None  # simconform/progress.py: None a bar or lines, False silent


@dataclass
class ReplayResult:
    """The run folder written, whether the source was read to its end (else why not), the
    truth mode ("topics" or "recompute") and run.json's replay section."""

    out: Path
    complete: bool
    reason: str | None
    truth: str
    replay: dict


@dataclass
class Sensor:
    """One mapped sensor: where it is in the source, where it goes in our bag, and counts."""

    name: str
    s: Any  # the spec's sensor
    entry: SensorTopic
    msgtype: str
    out_topic: str
    frame: str
    mount: Pose
    truth_topic: str | None = None  # source truth topic (truth: topics)
    stamps: list[int] = field(default_factory=list)  # published stamps, stream order
    logs: list[int] = field(default_factory=list)
    truth_stamps: list[int] = field(default_factory=list)
    truth_seen: set[int] = field(default_factory=set)
    pub_seen: set[int] = field(default_factory=set)
    last: dict[str, int] = field(default_factory=dict)
    kept: set[int] = field(default_factory=set)
    missing_after: dict[int, list[int]] = field(default_factory=dict)
    skipped: int = 0
    captures: list[int] = field(default_factory=list)  # truth stamps written
    published: int = 0
    stats: PairStats | None = None
    pending: dict[int, RayGrid] = field(default_factory=dict)
    offset_ns: int = 0  # pose-stream time of a capture minus its stamp (align.py)
    # lidar: how its clouds give each point's time (None: no time field); resolved at the
    # first published cloud
    point_time: PointTime | None = None
    time_checked: bool = False
    fields: list[str] = field(default_factory=list)

    @property
    def time_mode(self) -> str:
        """points (each point's own time), deskewed (all at header.stamp), or schedule (the
        spec's column times: raw points without a time field)."""
        if self.entry.deskewed:
            return "deskewed"
        return "points" if self.point_time is not None else "schedule"

    @property
    def is_lidar(self) -> bool:
        return isinstance(self.s, LidarSpec)

    def window_ok(self, t: int, motion: PoseStream) -> bool:
        """Whether the capture's whole time window lies inside the ground truth."""
        lo, hi = t, t
        if isinstance(self.s, LidarSpec):  # the sweep: its first to its last column
            lo = t - self.s.stamp_offset_ns()
            hi = lo + round(float(self.s.column_offsets_s()[-1]) * 1e9)
        elif isinstance(self.s, ImuSpec):
            h = round(1e9 / self.s.rate_hz)
            lo, hi = t - h, t + h
        d = self.offset_ns
        return motion.start_ns <= lo + d and hi + d <= motion.end_ns


def sec(t_ns: int) -> str:
    """A stamp in seconds, as error messages and run.json write it."""
    return format_seconds(int(t_ns))
