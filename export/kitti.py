"""KITTI odometry layout (as KISS-ICP's `kiss_icp.datasets.kitti` reads it):

    sequences/00/velodyne/NNNNNN.bin   float32 x y z intensity, lidar frame (KITTI's velodyne)
    sequences/00/calib.txt             P0..P3 (3x4) and Tr (3x4, velodyne -> camera 0)
    sequences/00/times.txt             seconds since the first scan
    poses/00.txt                       camera 0's pose per scan, relative to the first, 3x4

KITTI's scans are motion-compensated and stamped when the lidar faces forward (the cameras are
triggered then); simconform's column 0 looks along +x at the sweep's start, so each scan is
deskewed to its sweep start and its pose taken there. Camera 0 is the optical frame (z forward,
x right, y down) of the spec's first camera, or, without a camera, a virtual one at the lidar
with optical axes; P0..P3 are all that camera's [K | 0] (there is no stereo rig), and the
identity-like [I | 0] for the virtual one.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from scipy.spatial.transform import Rotation

from simconform.export.source import RunSource
from simconform.frames import Pose
from simconform.spec import OPTICAL_TO_BODY, CameraSpec

SEQUENCE = "00"  # KISS-ICP loads ground-truth poses only for sequences 00-10


def _matrix(p: Pose) -> np.ndarray:
    m = np.eye(4)
    m[:3, :3], m[:3, 3] = p.rot.as_matrix(), p.t
    return m


def _row(values) -> str:
    return " ".join(f"{v:.12e}" for v in np.ravel(values))


def camera0(src: RunSource) -> tuple[Pose, np.ndarray, str]:
    """(camera 0 -> base frame, its 3x4 projection, a description)."""
    if src.cameras:
        name = src.cameras[0]
        s = src.spec.sensors[name]
        assert isinstance(s, CameraSpec)
        fx, fy, cx, cy = s.k()
        p = np.array([[fx, 0, cx, 0], [0, fy, cy, 0], [0, 0, 1, 0]], dtype=float)
        return src.mount(name), p, f"the optical frame of camera {name!r}"
    opt = Pose(np.zeros(3), Rotation.from_matrix(OPTICAL_TO_BODY))
    return src.mount(src.lidar).compose(opt), np.eye(3, 4), "a virtual camera at the lidar"


def write_kitti(src: RunSource, out: Path, deskew: bool = True) -> dict:
    """Write the KITTI layout into `out`; returns what was written (export.json's body)."""
    seq = out / "sequences" / SEQUENCE
    velo = seq / "velodyne"
    velo.mkdir(parents=True)
    (out / "poses").mkdir()
    cam, proj, cam_what = camera0(src)
    lidar = src.mount(src.lidar)
    tr = _matrix(cam.inverse().compose(lidar))  # x_cam0 = Tr x_velo
    scans: list[tuple[int, int, Path]] = []  # (reference ns, stamp ns, file written)
    points = 0
    for c in src.clouds("start", deskew):
        f = velo / f"scan-{c.ref_ns}.bin"
        np.column_stack([c.xyz, c.intensity]).astype("<f4").tofile(f)
        scans.append((c.ref_ns, c.stamp_ns, f))
        points += len(c.xyz)
    scans.sort()  # log order is publish order; a scan's place is its time
    for i, (_ref, _stamp, f) in enumerate(scans):
        f.rename(velo / f"{i:06d}.bin")
    refs = np.array([s[0] for s in scans], dtype=np.int64)
    if len(refs):
        poses = src.base_pose(refs).compose(cam)  # camera 0 in the map frame
        rel = poses[0].inverse().compose(poses)
        mats = np.stack([_matrix(rel[i])[:3] for i in range(len(refs))])
    else:
        mats = np.zeros((0, 3, 4))
    (out / "poses" / f"{SEQUENCE}.txt").write_text("".join(_row(m) + "\n" for m in mats))
    (seq / "times.txt").write_text("".join(f"{(r - refs[0]) / 1e9:.9e}\n" for r in refs))
    calib = "".join(f"P{k}: {_row(proj)}\n" for k in range(4)) + f"Tr: {_row(tr[:3])}\n"
    (seq / "calib.txt").write_text(calib)
    return {
        "layout": f"sequences/{SEQUENCE}/{{velodyne/NNNNNN.bin,calib.txt,times.txt}}, "
        f"poses/{SEQUENCE}.txt",
        "scans": len(scans),
        "points": points,
        "camera0": cam_what,
        "scan_instant": "sweep start (column 0, facing +x)",
        "time0_ns": int(refs[0]) if len(refs) else None,
    }
