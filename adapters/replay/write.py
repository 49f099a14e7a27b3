"""The second pass of a replay: the run folder in our own layout, from the scanned bag.

Published messages are re-recorded with the source's log (receive) time, so latency is log
time - header.stamp as in our runs; clouds are re-organized into the spec's rings x columns
in the sensor frame. Truth, from the bag's truth topics or recomputed, is logged at its
capture stamp on /truth/<spec topic>; /tf carries the ground-truth motion (map ->
truth/base_link, as in our runs), gt/ its poses, and run.json the replay's own section
(source, provenance with hashes, time alignment, pairing quality, warnings).
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from simconform.adapters.replay.convert import organize, our_cloud, to_ours, truth_cloud
from simconform.adapters.replay.hints import frame_hint
from simconform.adapters.replay.pairing import RayGrid
from simconform.adapters.replay.scan import Scan
from simconform.adapters.replay.state import ReplayResult, Sensor, sec
from simconform.adapters.replay.truth import Recompute, write_gt
from simconform.bag import messages
from simconform.bag.messages import stamp_ns
from simconform.bag.writer import BagRecorder
from simconform.errors import UserError
from simconform.frames import Pose
from simconform.outdir import write_json_atomic
from simconform.progress import progress_bar
from simconform.provenance import output_digests, path_digest, recorded_header, sha256

CLOCK_WARN_S = 60.0  # |log time - stamp| beyond this: the bag's clocks are not comparable


class Replay(Scan):
    """A scanned replay that writes its run folder (`write`, into a folder that exists)."""

    recompute: Recompute | None = None
    alignment: dict | None = None  # sensor -> align.Alignment.as_dict(), set before write

    # ----------------------------------------------------------------- pass 2

    def write(self, out: Path) -> ReplayResult:
        (out / "gt").mkdir()
        self.first_cloud: dict[str, tuple] = {}  # lidar -> its first cloud, for hints.py
        self.recompute = (
            Recompute(self.world, self.spec, self.motion, self.sensors)
            if self.truth == "recompute"
            else None
        )
        stamps = [t for sn in self.sensors for t in sn.kept]
        start, end = min(stamps), max(stamps)
        for sn in self.sensors:
            for v in sn.missing_after.values():
                end = max(end, *v)
        bag = BagRecorder(out / "bag", "mcap")
        for sn in self.sensors:
            bag.connection(sn.out_topic, sn.msgtype)
            bag.connection("/truth" + sn.out_topic, sn.msgtype)
        bag.connection("/tf", messages.TFMESSAGE)
        bag.connection("/tf_static", messages.TFMESSAGE, latched=True)
        ident = Pose.identity()
        static = [(start, "map", "odom", ident.t, ident.quat())]
        static += [
            (start, self.spec.base_frame, sn.frame, sn.mount.t, sn.mount.quat())
            for sn in self.sensors
        ]
        first_log = int(self.suffix_min[0]) if len(self.suffix_min) else start
        static_msg = messages.transforms(static)
        bag.push("/tf_static", messages.TFMESSAGE, static_msg, min(start, first_log))
        tf_next = 0
        bar = progress_bar(self.n_stream, self.cfg.progress, "replaying")
        try:
            stream = self.src.messages(set(self.roles))
            for i, (topic, msgtype, log_ns, raw) in enumerate(stream, start=1):
                if i > self.n_stream:
                    break
                if bar is not None and i % 500 == 0:
                    bar.update(i)
                role, sn = self.roles[topic]
                if role != "pose":
                    msg = self._deserialize(topic, msgtype, raw)
                    self._process(bag, sn, role, topic, msg, log_ns)
                mark = int(self.suffix_min[i]) - 1 if i < self.n_stream else None
                tf_next = self._push_tf(bag, tf_next, mark)
                if mark is not None:
                    bag.advance(mark)
            self._push_tf(bag, tf_next, None)
            if bar is not None:  # every message replayed (the updates come every 500th)
                bar.update(self.n_stream)
        finally:
            bag.close()
            if bar is not None:
                bar.close()
        if self.motion is not None:
            write_gt(out / "gt", self.motion, self.sensors)
        damaged = self.src.damaged
        complete = self.stop_reason is None and not damaged
        reasons = [f"source bag truncated: {self.stop_reason}"] if self.stop_reason else []
        if damaged:
            reasons.append(
                f"source bag damaged: {len(damaged)} stretch(es) skipped (run.json data_gaps)"
            )
        reason = "; ".join(reasons) or None
        section = self._section(start, end)
        manifest = self._manifest(start, end, complete, reason, section)
        manifest["data_gaps"] = self._gaps()
        # as a run's: verify then notices a file of bag/ or gt/ changed after the replay
        manifest["outputs"] = output_digests(out)
        write_json_atomic(out / "run.json", manifest)
        return ReplayResult(out, complete, reason, self.truth, section)

    def _gaps(self) -> list[dict]:
        """The source's damaged stretches and, for a cut file, what follows its last message:
        log-time spans that verify leaves out (verify/integrity.py)."""
        out = [
            {"start_ns": d.start_ns, "end_ns": d.end_ns, "kind": "damaged", "reason": d.text()}
            for d in self.src.damaged
        ]
        last = self.src.last_log_ns
        if self.stop_reason is not None and last is not None:
            out.append(
                {
                    "start_ns": last,
                    "end_ns": None,
                    "kind": "not recorded",
                    "reason": f"the source bag ends at log time {sec(last)} s ({self.stop_reason})",
                }
            )
        return out

    def _push_tf(self, bag: BagRecorder, j: int, mark: int | None) -> int:
        m = self.motion
        if m is None:
            return j
        n = len(m.times_ns)
        stop = n if mark is None else int(np.searchsorted(m.times_ns, mark, side="right"))
        if stop > j:
            poses = Pose(m.positions[j:stop], m.rotations[j:stop])
            q = poses.quat()
            for k in range(stop - j):
                t = int(m.times_ns[j + k])
                truth = f"truth/{self.spec.base_frame}"  # our runs' truth frame
                tf = messages.transforms([(t, "map", truth, poses.t[k], q[k])])
                bag.push("/tf", messages.TFMESSAGE, tf, t)
        return max(j, stop)

    def _process(
        self, bag: BagRecorder, sn: Sensor, role: str, topic: str, msg: Any, log_ns: int
    ) -> None:
        st = stamp_ns(msg.header)
        if st not in sn.kept:
            return
        truth_topic = "/truth" + sn.out_topic
        timed = sn.point_time is not None or (
            self.truth == "recompute" and sn.time_mode == "schedule"
        )
        if role == "truth":  # truth: topics
            with self._usable(topic, sn, st):
                if sn.is_lidar:
                    lt = truth_cloud(sn, msg, st)
                    if st in sn.pub_seen:
                        elev = sn.s.rings.elevations()
                        sn.pending[st] = RayGrid.from_truth(lt.points, lt.directions, elev)
                    out = our_cloud(lt, st, sn.frame, timed)
                else:
                    out = to_ours(msg, sn.msgtype)
            bag.push(truth_topic, sn.msgtype, out, log_ns)
            sn.captures.append(st)
            return
        pub = None
        if self.truth == "recompute" and sn.is_lidar and sn.time_mode != "deskewed":
            # a point at its own time lies on its nominal ray: organize first, then cast
            # each ray's truth at its point's own time
            with self._usable(topic, sn, st):
                motion = self.motion.shifted(sn.offset_ns) if self.motion else None
                pub = organize(sn, msg, st, None, motion)
            ray_ns = st + np.round(pub.t_offset * 1e9).astype(np.int64)
            truth_msg, grid = self.recompute.capture(sn, st, ray_ns)
            bag.push(truth_topic, sn.msgtype, truth_msg, min(st, log_ns))
            sn.captures.append(st)
        elif self.truth == "recompute":
            truth_msg, grid = self.recompute.capture(sn, st)
            bag.push(truth_topic, sn.msgtype, truth_msg, min(st, log_ns))
            sn.captures.append(st)
        else:
            grid = sn.pending.pop(st, None)
            for old in [t for t in sn.pending if t < st]:  # their published copy never came
                del sn.pending[old]
        with self._usable(topic, sn, st):
            if sn.is_lidar:
                motion = self.motion.shifted(sn.offset_ns) if self.motion else None
                if pub is None:
                    pub = organize(sn, msg, st, grid, motion)
                self.first_cloud.setdefault(sn.name, (msg, st, grid, motion))
                out = our_cloud(pub, st, sn.frame, timed)
            else:
                out = to_ours(msg, sn.msgtype)
        bag.push(sn.out_topic, sn.msgtype, out, log_ns)
        sn.published += 1
        for t in sn.missing_after.get(st, ()):
            truth_msg, _grid = self.recompute.capture(sn, t)
            bag.push(truth_topic, sn.msgtype, truth_msg, t)
            sn.captures.append(t)

    @contextlib.contextmanager
    def _usable(self, topic: str, sn: Sensor, st: int) -> Iterator[None]:
        """A source message that deserialized but cannot be decoded or converted."""
        try:
            yield
        except (AttributeError, TypeError, ValueError, KeyError) as exc:
            raise UserError(
                self.bag_path,
                topic,
                f"header.stamp {sec(st)} s",
                f"expected a usable {sn.msgtype} message ({type(exc).__name__}: {exc})",
            ) from None

    # ----------------------------------------------------------------- run.json

    def _section(self, start: int, end: int) -> dict:
        if self.src.read_with == "salvage scan":
            self.warnings.append(
                f"rosbags could not open the bag ({self.src.open_error}); it was read by a "
                "sequential scan of its records"
            )
        for d in self.src.damaged:
            self.warnings.append(f"damaged, skipped and not judged: {d.text()}")
        self.warnings += self.src.notes
        sensors = {}
        for sn in self.sensors:
            lat = (np.asarray(sn.logs) - np.asarray(sn.stamps)) / 1e6 if sn.stamps else None
            info: dict[str, Any] = {
                "source_topic": sn.entry.topic,
                "topic": sn.out_topic,
                "messages": len(sn.stamps),
                "published": sn.published,
                "captures": len(sn.captures),
                "skipped_outside_ground_truth": sn.skipped,
                "inferred_dropped": sum(len(v) for v in sn.missing_after.values()),
                "log_minus_stamp_ms_median": float(np.median(lat)) if lat is not None else None,
            }
            if lat is not None and np.median(np.abs(lat)) > CLOCK_WARN_S * 1e3:
                self.warnings.append(
                    f"{sn.entry.topic}: log time and header.stamp differ by "
                    f"{np.median(lat) / 1e3:.3g} s (median): the bag was probably recorded on "
                    "the wall clock while stamps are simulation time (record with "
                    "use_sim_time), so latency cannot be measured"
                )
            if sn.is_lidar:
                info["point_time"] = (
                    sn.point_time.describe()
                    if sn.time_mode == "points"
                    else "none: deskewed to header.stamp"
                    if sn.time_mode == "deskewed"
                    else "none: the spec's column schedule"
                )
            if sn.stats is not None:
                s = sn.s
                el = s.rings.elevations()
                ring_bin = float(np.rad2deg(np.diff(el).min())) if len(el) > 1 else None
                summary = sn.stats.summary(ring_bin, 360.0 / s.columns)
                info["pairing"] = summary
                share = summary["share_beyond_half_bin"]
                if share is not None and share > 0.05:
                    self.warnings.append(
                        f"{sn.entry.topic}: {share:.1%} of the points lie more than half a bin "
                        f"from every ray of the spec: {self._off_ray_fix(sn, summary)}"
                    )
            sensors[sn.name] = info
        gt = None
        if self.motion is not None:
            m = self.motion
            span = (m.end_ns - m.start_ns) / 1e9
            gt = {
                "topic": self.gt.topic,
                "kind": self.gt.kind,
                "poses": len(m.times_ns),
                "start_ns": m.start_ns,
                "end_ns": m.end_ns,
                "rate_hz": (len(m.times_ns) - 1) / span if span > 0 else None,
            }
        return {
            "source": str(self.bag_path.resolve()),
            "source_format": self.src.format,
            "read_with": self.src.read_with,
            "source_complete": self.stop_reason is None and not self.src.damaged,
            "truncation": self.stop_reason,
            "source_integrity": {
                "chunks": self.src.chunks,
                "damaged": [d.text() for d in self.src.damaged],
                "notes": list(self.src.notes),
            },
            "messages_read": self.n_stream,
            "map": str(Path(self.cfg.map).resolve()),
            "map_content": self.m.model_dump(mode="json"),
            "truth": self.truth,
            "ground_truth": gt,
            "provenance": self._provenance(),
            "alignment": self.alignment,
            "sensors_not_mapped": self.unmapped,
            "sensors": sensors,
            "warnings": self.warnings,
        }

    def _off_ray_fix(self, sn: Sensor, summary: dict) -> str:
        """Points off the rays: the other points_frame where the cloud fits it, else the
        spec's layout or the pairing."""
        first = self.first_cloud.get(sn.name)
        if first is not None:
            msg, st, grid, motion = first
            grid = grid or RayGrid(sn.s.directions(), sn.s.rings.elevations())
            hint = frame_hint(sn, msg, st, grid, motion)
            if hint is not None:
                return hint
        return "check the spec's rings/columns" + (
            ", or set pairing: direction" if summary["method"] == "index" else ""
        )

    def _provenance(self) -> dict:
        """What the verdict was computed from: the source bag (path, size, SHA-256, the log
        time span of the messages judged), the map, spec and world files, and the truth."""
        logs = [t for sn in self.sensors for t in sn.logs[:1] + sn.logs[-1:]]
        first, last = (min(logs), max(logs)) if logs else (None, None)
        bag = path_digest(self.bag_path) | {
            "format": self.src.format,
            "log_start_ns": first,
            "log_end_ns": last,
            "duration_s": (last - first) / 1e9 if logs else None,
        }
        if self.truth == "topics":
            truth = {
                "mode": "topics",
                "what": "recorded /truth/<topic> messages of the source bag (its SHA-256)",
                "topics": [sn.truth_topic for sn in self.sensors],
                "sha256": bag["sha256"],
            }
        else:
            m = self.motion
            h = hashlib.sha256()
            for part in (m.times_ns, m.positions, m.rotations.as_quat()):
                h.update(np.ascontiguousarray(part).tobytes())
            truth = {
                "mode": "recompute",
                "what": "recomputed by the reference backend from the world file and the "
                "ground-truth poses (SHA-256 of the poses as read: int64 stamps, float64 "
                "positions and x y z w quaternions, base_link in the map frame)",
                "pose_topic": self.gt.topic,
                "poses": len(m.times_ns),
                "sha256": h.hexdigest(),
            }
        return {
            "bag": bag,
            "map": path_digest(Path(self.cfg.map)),
            "spec": path_digest(self.spec_path),
            "world": path_digest(self.world_path),
            "truth": truth,
        }

    def _manifest(
        self, start: int, end: int, complete: bool, reason: str | None, section: dict
    ) -> dict:
        return {
            **recorded_header(),
            "backend": "replay",
            "seed": None,
            "storage": "mcap",
            "spec": str(self.spec_path),
            "world": str(self.world_path),
            "trajectory": None,
            "spec_sha256": sha256(self.spec_path),
            "world_sha256": sha256(self.world_path),
            "trajectory_sha256": None,
            "start_ns": int(start),
            "end_ns": int(end),
            "tf_rate_hz": None,
            "spec_content": self.spec.model_dump(mode="json"),
            "world_content": self.world.model_dump(mode="json"),
            "complete": complete,
            "stopped_by": None,
            "state": "finished",
            "incomplete_reason": reason,
            "captures": {sn.name: len(sn.captures) for sn in self.sensors},
            "published": {sn.name: sn.published for sn in self.sensors},
            "replay": section,
        }
