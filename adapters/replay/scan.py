"""The first pass of a replay: validate the map against the bag, read the bag once, plan.

Every message is deserialized and checked (types, frames, stamp order, cloud layouts, truth
before its published copy); the ground-truth poses become the motion (PoseStream); and the
captures that get truth are chosen: those inside the ground truth's span, plus the dropped
ones inferred from gaps in a sensor's stamps.

Length: a little over our ~400 lines, because `Scan` is one pass over the bag whose checks share
its state (per-topic stamps, frames, the pose stream); split, they would pass it all around.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from scipy.spatial.transform import Rotation

from simconform.adapters.replay.hints import tf_pairs
from simconform.adapters.replay.map import (
    POSE_TYPES,
    SENSOR_TYPES,
    JsonPose,
    ReplayMap,
    TfPose,
)
from simconform.adapters.replay.motion import PoseStream
from simconform.adapters.replay.pairing import PairStats
from simconform.adapters.replay.pointtime import (
    MOVING_M,
    check_span,
    refuse_without_time,
    resolve,
    sweep_motion_m,
)
from simconform.adapters.replay.state import ReplayConfig, Sensor, sec
from simconform.bag.messages import cloud_arrays, stamp_ns
from simconform.bag.reader import SourceBag
from simconform.errors import UserError
from simconform.frames import Pose
from simconform.spec import LidarSpec, Spec
from simconform.world import World


class Scan:
    """A replay's first pass: the map fitted to the spec and the source bag, then the whole
    bag read once without writing anything (stamps, order, layouts, ground truth), so that
    bad input is one UserError before the run folder exists."""

    def __init__(
        self,
        cfg: ReplayConfig,
        m: ReplayMap,
        full: Spec,
        world: World,
        spec_path: Path,
        world_path: Path,
        src: SourceBag,
    ) -> None:
        self.cfg, self.m, self.world, self.src = cfg, m, world, src
        self.spec_path, self.world_path = spec_path, world_path
        self.spec = _sub_spec(full, list(m.sensors))
        self.unmapped = [n for n in full.sensors if n not in m.sensors]
        self.bag_path = Path(cfg.bag)
        self.gt = m.ground_truth
        self.warnings: list[str] = []
        self.sensors: list[Sensor] = []
        for name, entry in m.sensors.items():
            s = self.spec.sensors[name]
            self.sensors.append(
                Sensor(
                    name=name,
                    s=s,
                    entry=entry,
                    msgtype=entry.type or SENSOR_TYPES[type(s)],
                    out_topic=self.spec.topic(name),
                    frame=self.spec.frame(name),
                    mount=Pose.from_xyz_rpy(s.mount.xyz, s.mount.rpy),
                    stats=PairStats(entry.pair_by()) if isinstance(s, LidarSpec) else None,
                )
            )
        self.by_name = {s.name: s for s in self.sensors}
        self.truth = self._truth_mode()
        self.roles: dict[str, tuple[str, Sensor | None]] = {}
        for sn in self.sensors:
            self.roles[sn.entry.topic] = ("pub", sn)
            if self.truth == "topics":
                sn.truth_topic = "/truth" + sn.entry.topic
                self.roles[sn.truth_topic] = ("truth", sn)
        if self.gt is not None:
            if self.gt.topic in self.roles:
                raise UserError(
                    cfg.map, "ground_truth.topic", self.gt.topic, "expected a topic of its own"
                )
            self.roles[self.gt.topic] = ("pose", None)
        self._check_topics()
        self.base_in_body = (
            Pose.from_xyz_rpy(self.gt.base_in_body.xyz, self.gt.base_in_body.rpy)
            if self.gt is not None
            else Pose.identity()
        )
        self.motion: PoseStream | None = None

    # ----------------------------------------------------------------- validation

    def _truth_mode(self) -> str:
        present = {c.topic for c in self.src.connections}
        have = all("/truth" + sn.entry.topic in present for sn in self.sensors)
        if self.m.truth == "topics" and not have:
            miss = next(
                "/truth" + sn.entry.topic
                for sn in self.sensors
                if "/truth" + sn.entry.topic not in present
            )
            raise UserError(
                self.bag_path, miss, None, "truth: topics expects /truth/<topic> for every sensor"
            )
        mode = "topics" if self.m.truth == "topics" or (self.m.truth == "auto" and have) else ""
        if not mode:
            if self.gt is None:
                raise UserError(
                    self.cfg.map,
                    "ground_truth",
                    None,
                    "the bag has no /truth/<topic> topics, so truth must be recomputed from a "
                    "ground-truth pose stream: add ground_truth to the map",
                )
            mode = "recompute"
        return mode

    def _check_topics(self) -> None:
        types = self.src.types()
        listing = ", ".join(f"{t} ({'/'.join(sorted(v))})" for t, v in sorted(types.items()))
        for topic, (role, sn) in self.roles.items():
            want = POSE_TYPES[self.gt.kind] if role == "pose" else sn.msgtype
            if topic not in types:
                raise UserError(
                    self.bag_path,
                    topic,
                    None,
                    f"expected the topic with {want} messages in the bag (has: {listing})",
                )
            got = types[topic]
            if got != {want}:
                raise UserError(
                    self.bag_path, topic, "/".join(sorted(got)), f"expected {want} messages"
                )

    # ----------------------------------------------------------------- pass 1

    def scan(self) -> None:
        """Read the whole bag once without writing: stamps, order, layouts, ground truth."""
        poses: list[tuple[int, np.ndarray, np.ndarray]] = []
        earliest: list[int] = []
        last_pose: int | None = None
        counts = dict.fromkeys(self.roles, 0)
        for topic, msgtype, log_ns, raw in self.src.messages(set(self.roles)):
            role, sn = self.roles[topic]
            msg = self._deserialize(topic, msgtype, raw)
            counts[topic] += 1
            if role == "pose":
                first = None
                for st, xyz, q in self._pose_samples(topic, msg, log_ns):
                    if last_pose is not None and st < last_pose:
                        raise UserError(
                            self.bag_path,
                            topic,
                            sec(st),
                            f"expected ground-truth stamps in order; this one is before "
                            f"the previous {sec(last_pose)} s",
                        )
                    if st != last_pose:
                        poses.append((st, xyz, q))
                        last_pose = st
                    first = st if first is None else min(first, st)
                earliest.append(log_ns if first is None else min(log_ns, first))
                continue
            st = self._check_msg(sn, role, topic, msg)
            if role == "pub":
                sn.stamps.append(st)
                sn.logs.append(log_ns)
            else:
                sn.truth_stamps.append(st)
            earliest.append(min(log_ns, st))
        self.n_stream = len(earliest)
        self.stop_reason = self.src.stop_reason
        self.counts = counts
        e = np.asarray(earliest, dtype=np.int64)
        self.suffix_min = np.minimum.accumulate(e[::-1])[::-1] if len(e) else e
        for topic, n in counts.items():
            if n == 0 and self.stop_reason is None:
                raise UserError(self.bag_path, topic, 0, "expected messages on the topic")
        if self.gt is not None:
            self._build_motion(poses)
        self._plan_captures()
        self._check_sweep_motion()

    def _deserialize(self, topic: str, msgtype: str, raw: bytes) -> Any:
        try:
            return self.src.deserialize(raw, msgtype)
        except Exception as exc:
            raise UserError(
                self.bag_path, topic, msgtype, f"expected a valid {msgtype} message ({exc})"
            ) from None

    def _check_msg(self, sn: Sensor, role: str, topic: str, msg: Any) -> int:
        st = stamp_ns(msg.header)
        prev = sn.last.get(role)
        if prev is not None and st <= prev:
            raise UserError(
                self.bag_path,
                topic,
                f"header.stamp {sec(st)} s",
                f"expected header stamps strictly increasing in log order; the previous "
                f"message has {sec(prev)} s",
            )
        sn.last[role] = st
        want_frame = sn.entry.frame
        if (
            role == "pub"
            and want_frame is not None
            and _frame(msg.header.frame_id) != _frame(want_frame)
        ):
            raise UserError(
                self.bag_path,
                topic,
                f"header.frame_id {msg.header.frame_id!r}",
                f"expected {want_frame!r} (sensors.{sn.name}.frame in the map)",
            )
        if sn.is_lidar:
            names = [f.name for f in msg.fields]
            kinds = {f.name: f.datatype for f in msg.fields}
            missing = [k for k in ("x", "y", "z") if kinds.get(k) not in (7, 8)]  # FLOAT32/64
            bad = [f.name for f in msg.fields if not 1 <= f.datatype <= 8]
            if bad:
                raise UserError(
                    self.bag_path,
                    topic,
                    f"field {bad[0]!r} of datatype {kinds[bad[0]]}",
                    "expected PointField datatypes 1 to 8 (INT8 ... FLOAT64)",
                )
            if missing:
                raise UserError(
                    self.bag_path,
                    topic,
                    f"fields {names}",
                    "expected a PointCloud2 with float x, y and z fields",
                )
            rings, cols = len(sn.s.rings.elevations()), sn.s.columns
            organized = role == "truth" or sn.entry.organized
            if organized and (msg.height, msg.width) != (rings, cols):
                what = "the truth cloud" if role == "truth" else "an organized cloud"
                raise UserError(
                    self.bag_path,
                    topic,
                    f"height x width {msg.height} x {msg.width}",
                    f"expected {what} of the spec's {rings} rings x {cols} columns"
                    + ("" if role == "truth" else "; set organized: false in the map if not"),
                )
            if len(msg.data) < msg.row_step * (msg.height - 1) + msg.point_step * msg.width:
                raise UserError(
                    self.bag_path,
                    topic,
                    f"{len(msg.data)} data bytes",
                    f"expected height x width points of point_step {msg.point_step}",
                )
            if role == "pub" and not sn.entry.deskewed:
                self._check_point_time(sn, topic, msg, st)
        if role == "pub" and self.truth == "topics" and st not in sn.truth_seen:
            damaged = self.src.damaged  # chunks skipped as damaged: the truth may be in one
            first = f" (first: {damaged[0].where}, {damaged[0].reason})" if damaged else ""
            raise UserError(
                self.bag_path,
                topic,
                f"header.stamp {sec(st)} s",
                f"expected a truth message on {sn.truth_topic} with the same stamp logged "
                "before it"
                + (
                    f"; the bag has {len(damaged)} damaged chunk(s) that were skipped{first}, "
                    "which may have held it: replay needs the recorded truth intact"
                    if damaged
                    else ""
                ),
            )
        (sn.pub_seen if role == "pub" else sn.truth_seen).add(st)
        return st

    def _check_point_time(self, sn: Sensor, topic: str, msg: Any, st: int) -> None:
        """Resolve the lidar's per-point time at its first cloud; every cloud's times must lie
        near its stamp (a wrong unit or origin is refused, not judged)."""
        where = (self.bag_path, topic)
        if not sn.time_checked:
            sn.time_checked = True
            sn.fields = [f.name for f in msg.fields]
            sn.point_time = resolve(sn.entry, msg, st, (self.cfg.map, topic))
        pt = sn.point_time
        if pt is None:
            return
        if pt.field not in {f.name for f in msg.fields}:
            raise UserError(
                self.bag_path, topic, f"header.stamp {sec(st)} s", f"expected a {pt.field} field"
            )
        v = cloud_arrays(msg)[pt.field]
        ok = np.isfinite(v) if v.dtype.kind == "f" else np.ones(v.shape, dtype=bool)
        t = np.full(v.shape, np.iinfo(np.int64).min)
        t[ok] = pt.times_ns(v[ok], st)
        check_span(pt, t, st, round(1e9 / sn.s.rate_hz), where)

    def _check_sweep_motion(self) -> None:
        """Refuse recomputing truth for a moving lidar whose clouds have no per-point time
        unless the map says how its points are timed (pointtime.py)."""
        for sn in self.sensors:
            if not (sn.is_lidar and self.truth == "recompute" and self.motion is not None):
                continue
            if sn.time_mode != "schedule" or sn.entry.point_time != "auto":
                continue
            if sn.s.shutter == "global":
                continue
            sweep = round(float(sn.s.column_offsets_s()[-1]) * 1e9)
            starts = [t - sn.s.stamp_offset_ns() for t in sn.kept]
            moved = sweep_motion_m(self.motion, sn.mount, starts, sweep)
            if moved > MOVING_M:
                raise refuse_without_time(self.cfg.map, sn.name, sn.entry.topic, sn.fields, moved)

    def _pose_samples(
        self, topic: str, msg: Any, log_ns: int
    ) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
        gt = self.gt
        if isinstance(gt, TfPose):
            for tr in msg.transforms:
                if _frame(tr.header.frame_id) == _frame(gt.parent) and _frame(
                    tr.child_frame_id
                ) == _frame(gt.child):
                    t = tr.transform
                    yield stamp_ns(tr.header), _xyz(t.translation), _quat(t.rotation)
        elif isinstance(gt, JsonPose):
            try:
                got = gt.json_ego.extract(msg.data)
            except ValueError as exc:
                raise UserError(
                    self.bag_path,
                    topic,
                    msg.data[:60],
                    f"expected the ego pose as described by ground_truth.json_ego ({exc})",
                ) from None
            if got is not None:
                xyz, q, st = got
                yield (log_ns if st is None else st), xyz, q
        else:
            p = msg.pose.pose if gt.kind == "odometry" else msg.pose
            yield stamp_ns(msg.header), _xyz(p.position), _quat(p.orientation)

    def _build_motion(self, poses: list) -> None:
        topic = self.gt.topic
        if len(poses) < 2:
            what = (
                f"transforms {self.gt.parent} -> {self.gt.child}"
                if isinstance(self.gt, TfPose)
                else "ego poses"
            )
            have = tf_pairs(self.src, [topic, "/tf", "/tf_static"]) if "->" in what else ""
            raise UserError(
                self.bag_path,
                topic,
                len(poses),
                f"expected at least 2 ground-truth {what}"
                + (f"; the bag has {have}" if have else ""),
            )
        t = np.array([p[0] for p in poses], dtype=np.int64)
        xyz = np.array([p[1] for p in poses])
        q = np.array([p[2] for p in poses])
        norms = np.linalg.norm(q, axis=1)
        bad = np.flatnonzero(~np.isfinite(norms) | (np.abs(norms - 1) > 1e-3))
        if bad.size or not np.all(np.isfinite(xyz)):
            i = int(bad[0]) if bad.size else 0
            raise UserError(
                self.bag_path,
                topic,
                f"quaternion norm {norms[i]:.6g} at {sec(int(t[i]))} s",
                "expected finite positions and unit quaternions",
            )
        body = Pose(xyz, Rotation.from_quat(q / norms[:, None]))
        base = body.compose(self.base_in_body)
        self.motion = PoseStream(t, base.t, base.rot)

    def _plan_captures(self) -> None:
        """Which captures get truth: inside the ground truth; dropped ones from stamp gaps."""
        motion = self.motion
        for sn in self.sensors:
            need_motion = self.truth == "recompute" or sn.entry.points_frame == "world"
            if motion is None or not need_motion:
                sn.kept = set(sn.stamps) | set(sn.truth_stamps)
                continue
            cands = sn.stamps if self.truth == "recompute" else sn.truth_stamps
            kept = [t for t in cands if sn.window_ok(t, motion)]
            sn.skipped = len(cands) - len(kept)
            sn.kept = set(kept)
            if self.truth != "recompute":
                continue
            period = 1e9 / sn.s.rate_hz
            for a, b in itertools.pairwise(kept):
                k = round((b - a) / period)
                if k >= 2:
                    sn.missing_after[a] = [a + round(j * (b - a) / k) for j in range(1, k)]
        if not any(sn.kept for sn in self.sensors):
            span = f"[{sec(motion.start_ns)}, {sec(motion.end_ns)}] s" if motion else "-"
            raise UserError(
                self.bag_path,
                self.gt.topic if self.gt else "topics",
                span,
                "expected sensor messages whose stamps fall inside the ground truth's span",
            )


def _sub_spec(spec: Spec, names: list[str]) -> Spec:
    data = spec.model_dump(mode="json")
    data["sensors"] = {n: v for n, v in data["sensors"].items() if n in names}
    return Spec.model_validate(data)


def _xyz(v: Any) -> np.ndarray:
    return np.array([v.x, v.y, v.z], dtype=float)


def _quat(q: Any) -> np.ndarray:
    return np.array([q.x, q.y, q.z, q.w], dtype=float)


def _frame(name: str) -> str:
    return name.lstrip("/")
