"""A recorded run as a dataset exporter reads it: the lidar's published clouds moved into one
frame per sweep, the cameras' published frames, and the true poses at any instant.

Drivers publish each point in the sensor frame at its own time (docs/replay.md, "Per-point
time"); KITTI and nuScenes clouds are motion-compensated to one instant per sweep, so with
`deskew` every point p_i measured at t_i becomes L(ref)^-1 L(t_i) p_i, with L the lidar's true
pose (gt/<base_frame>.tum interpolated, composed with the mount). A cloud published without
per-point time (`point_time: deskewed`) is already in the frame at its stamp. Truth poses come
from the run's gt/ record only, so a sweep reaching past the recorded truth is left out
(counted in `skipped`), never extrapolated.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

from simconform.bag.messages import COMPRESSED, image_array, stamp_ns
from simconform.bag.reader import SourceBag
from simconform.downstream.localize import pick_lidar
from simconform.downstream.runcheck import check_integrity, load_run, read_error
from simconform.downstream.sweeps import TruePoses, decode_cloud
from simconform.errors import UserError
from simconform.frames import Pose
from simconform.spec import OPTICAL_TO_BODY, CameraSpec, LidarSpec, Spec
from simconform.verify.integrity import RunIntegrity
from simconform.world import World

Instant = Literal["start", "end"]  # a sweep's first column's time, or its last column's


@dataclass
class Cloud:
    stamp_ns: int  # the published header.stamp
    ref_ns: int  # the instant every point is expressed at (deskewed) and the pose holds at
    xyz: np.ndarray  # (N, 3) float64, lidar frame at ref_ns (or as published, deskew off)
    intensity: np.ndarray  # (N,) float32, as published
    ring: np.ndarray  # (N,) float32 laser index (0 where the layout has none)


@dataclass
class Image:
    stamp_ns: int  # header.stamp: the capture (exposure start) time
    jpeg: bytes  # as published when the camera published JPEG, else encoded here (quality 95)


@dataclass
class RunSource:
    """What an exporter needs from one run folder; `skipped` counts sweeps left out,
    `integrity` is what verify's checks found (damaged chunks are skipped by the reader),
    `stopped` why a reading of the bag ended early (a file cut off)."""

    run_dir: Path
    manifest: dict
    spec: Spec
    world: World
    lidar: str
    cameras: list[str]
    integrity: RunIntegrity = field(default_factory=RunIntegrity)
    skipped: dict[str, int] = field(default_factory=dict)
    stopped: str | None = None

    def __post_init__(self) -> None:
        self.lidar_spec: LidarSpec = self.spec.sensors[self.lidar]  # type: ignore[assignment]
        tum = self.run_dir / "gt" / f"{self.spec.base_frame}.tum"
        if not tum.is_file():
            raise UserError(self.run_dir, "gt", str(tum), "expected the run's ground truth")
        self.base = TruePoses(tum, Pose.identity())

    # ------------------------------------------------------------------ frames and poses

    def mount(self, name: str) -> Pose:
        """Sensor frame -> base frame; a camera's is its optical frame (z forward, y down)."""
        s = self.spec.sensors[name]
        m = Pose.from_xyz_rpy(s.mount.xyz, s.mount.rpy)
        if isinstance(s, CameraSpec):
            from scipy.spatial.transform import Rotation

            return m.compose(Pose(np.zeros(3), Rotation.from_matrix(OPTICAL_TO_BODY)))
        return m

    def base_pose(self, t_ns) -> Pose:
        """The base frame's true pose in the map frame at t_ns (an int or an array)."""
        return self.base.at(np.atleast_1d(np.asarray(t_ns, dtype=np.int64)))

    def covers(self, t_ns: int) -> bool:
        return self.base.covers(int(t_ns))

    def reference_ns(self, stamp: int, instant: Instant) -> int:
        """The sweep's start (capture) or end (last column) time from its published stamp."""
        s = self.lidar_spec
        start = stamp - s.stamp_offset_ns()
        return start if instant == "start" else start + round(s.column_offsets_s()[-1] * 1e9)

    # ------------------------------------------------------------------ data

    def clouds(self, instant: Instant, deskew: bool) -> Iterator[Cloud]:
        """The lidar's published clouds in log order, finite points only."""
        mount = self.mount(self.lidar)
        bag = SourceBag(self.run_dir / "bag")
        try:
            for _t, msgtype, _log, raw in bag.messages({self.spec.topic(self.lidar)}):
                f, xyz, keep, stamp, times = decode_cloud(bag.deserialize(raw, msgtype))
                times = np.full(len(xyz), stamp, np.int64) if times is None else times
                ref = self.reference_ns(stamp, instant)
                span = (int(times[keep].min(initial=ref)), int(times[keep].max(initial=ref)))
                if not all(self.covers(t) for t in (ref, *span)):
                    self.skipped["clouds beyond the recorded truth"] = (
                        self.skipped.get("clouds beyond the recorded truth", 0) + 1
                    )
                    continue
                xyz, times = xyz[keep], times[keep]
                if deskew and len(xyz):
                    xyz = self._deskew(xyz, times, ref, mount)
                ring = f.get("ring", f.get("line"))
                yield Cloud(
                    stamp,
                    ref,
                    xyz,
                    np.asarray(f.get("intensity", np.zeros(len(keep))), np.float32)[keep],
                    (np.zeros(len(xyz)) if ring is None else ring[keep]).astype(np.float32),
                )
            self.stopped = self.stopped or bag.stop_reason
        finally:
            bag.close()

    def _deskew(self, xyz: np.ndarray, times: np.ndarray, ref: int, mount: Pose) -> np.ndarray:
        """Each point from the lidar frame at its own time into the lidar frame at `ref`."""
        uniq, inv = np.unique(times, return_inverse=True)  # one pose per column, not per point
        at = self.base_pose(uniq).compose(mount)
        rel = self.base_pose(ref).compose(mount).inverse().compose(at)
        rot = rel.rot.as_matrix()[inv]
        return np.einsum("nij,nj->ni", rot, xyz) + rel.t[inv]

    def images(self, name: str) -> Iterator[Image]:
        """A camera's published frames in log order."""
        topic = self.spec.data_topics(name)[0]
        bag = SourceBag(self.run_dir / "bag")
        try:
            for _t, msgtype, _log, raw in bag.messages({topic}):
                msg = bag.deserialize(raw, msgtype)
                if msgtype == COMPRESSED and "jpeg" in msg.format.lower():
                    data = bytes(msg.data)
                else:
                    data = _jpeg(image_array(msg))
                yield Image(stamp_ns(msg.header), data)
            self.stopped = self.stopped or bag.stop_reason
        finally:
            bag.close()


def _jpeg(rgb: np.ndarray) -> bytes:
    import io

    from PIL import Image as PilImage

    buf = io.BytesIO()
    PilImage.fromarray(rgb).save(buf, format="JPEG", quality=95)
    return buf.getvalue()


def open_run(run_dir: Path, lidar: str | None) -> RunSource:
    """The run's manifest, spec and world, and its lidar (the only one, or `lidar`); refused
    while the run is still recording, and checked as verify checks it
    (downstream/runcheck.py). Every file is read here once, so a run file the user cannot
    read is refused before anything is written."""
    from pydantic import ValidationError

    from simconform.errors import from_validation

    run_dir = Path(run_dir)
    manifest = load_run(run_dir)
    try:
        spec = Spec.model_validate(manifest["spec_content"])
        world = World.model_validate(manifest["world_content"])
    except ValidationError as err:
        raise from_validation(run_dir / "run.json", err) from None
    lidar = pick_lidar(spec, lidar, run_dir)
    cams = [n for n, s in spec.sensors.items() if isinstance(s, CameraSpec)]
    found = check_integrity(run_dir, manifest)
    try:
        return RunSource(run_dir, manifest, spec, world, lidar, cams, found)
    except OSError as exc:  # gt/ unreadable
        raise read_error(exc) or exc from None
