"""nuScenes layout, loadable by the official nuscenes-devkit (`NuScenes(version, dataroot)`):

    <version>/*.json                 the 13 tables (scene, sample, sample_data, ego_pose, ...)
    samples/LIDAR_TOP/*.pcd.bin      float32 x y z intensity ring, lidar frame
    samples/CAM_FRONT/*.jpg          the key camera frame of each sample; others in sweeps/
    maps/<token>.png                 a 1 x 1 placeholder map mask (no semantic map is exported)

Every lidar sweep is a sample (a key frame) and its timestamp is the sweep's end, as nuScenes
stamps LIDAR_TOP; with `deskew` its points are motion-compensated to that instant (nuScenes'
clouds are). A camera frame is the key frame of the sample nearest in time (within half a
lidar period, one per sample); the others are sweeps whose sample is the next one, as the
devkit's box interpolation expects. Tokens are MD5s of what each record is, so the same run
exports the same tokens. Timestamps are microseconds on the run's bag clock.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from simconform.export.boxes import ObjectBox, ObjectSource, attribute
from simconform.export.source import RunSource
from simconform.frames import Pose

TABLES = (
    "category", "attribute", "visibility", "instance", "sensor", "calibrated_sensor", "ego_pose",
    "log", "scene", "sample", "sample_data", "sample_annotation", "map",
)  # fmt: skip
ATTRIBUTES = (
    "vehicle.moving", "vehicle.stopped", "vehicle.parked", "cycle.with_rider",
    "cycle.without_rider", "pedestrian.sitting_lying_down", "pedestrian.standing",
    "pedestrian.moving",
)  # fmt: skip
VISIBILITY = (("1", "v0-40"), ("2", "v40-60"), ("3", "v60-80"), ("4", "v80-100"))
LIDAR = "LIDAR_TOP"


def _us(t_ns: int) -> int:
    return (int(t_ns) + 500) // 1000


def _wxyz(p: Pose) -> list[float]:
    x, y, z, w = (float(v) for v in p.quat())
    return [w, x, y, z]


@dataclass
class Db:
    """The tables being built, with deterministic tokens."""

    version: str
    tables: dict[str, list[dict]] = field(default_factory=lambda: {t: [] for t in TABLES})

    def token(self, *key) -> str:
        return hashlib.md5(":".join(map(str, (self.version, *key))).encode()).hexdigest()

    def add(self, table: str, row: dict) -> dict:
        self.tables[table].append(row)
        return row


def _link(rows: list[dict]) -> None:
    for a, b in itertools.pairwise(rows):
        a["next"], b["prev"] = b["token"], a["token"]


def write_nuscenes(
    src: RunSource, out: Path, deskew: bool = True, version: str = "v1.0-simconform"
) -> dict:
    """Write the nuScenes layout into `out`; returns what was written (export.json's body)."""
    db = Db(version)
    name = src.run_dir.name
    log = db.add("log", {
        "token": db.token("log"), "logfile": name, "vehicle": src.spec.name,
        "date_captured": _date(src.manifest["start_ns"]), "location": src.world.name,
    })  # fmt: skip
    (out / "maps").mkdir(parents=True)
    map_token = db.token("map")
    _placeholder_png(out / "maps" / f"{map_token}.png")
    db.add("map", {"token": map_token, "log_tokens": [log["token"]],
                   "category": "semantic_prior", "filename": f"maps/{map_token}.png"})  # fmt: skip
    channels = {src.lidar: LIDAR} | _camera_channels(src.cameras)
    calib = {n: _sensor(db, src, n, ch) for n, ch in channels.items()}
    lidar_rows = _lidar(db, src, out, calib[src.lidar], log["logfile"], deskew)
    scene = db.token("scene")
    samples = [
        db.add("sample", {"token": db.token("sample", r["timestamp"]), "timestamp": r["timestamp"],
                          "prev": "", "next": "", "scene_token": scene})
        for r in lidar_rows
    ]  # fmt: skip
    _link(samples)
    for r, s in zip(lidar_rows, samples):
        r["sample_token"] = s["token"]
    frames = sum(
        _camera(db, src, out, n, channels[n], calib[n], samples, log["logfile"])
        for n in src.cameras
    )
    db.add("scene", {
        "token": scene, "log_token": log["token"], "nbr_samples": len(samples),
        "first_sample_token": samples[0]["token"] if samples else "",
        "last_sample_token": samples[-1]["token"] if samples else "", "name": name,
        "description": f"simconform run {name}: backend {src.manifest.get('backend')}, seed "
        f"{src.manifest.get('seed')}, world {src.world.name}, spec {src.spec.name}",
    })  # fmt: skip
    anns = _annotations(db, lidar_rows, samples)
    used = {b.category for r in lidar_rows for b, _n in r.pop("_boxes")}
    _vocabulary(db, used)
    (out / version).mkdir()
    for table, rows in db.tables.items():
        (out / version / f"{table}.json").write_text(json.dumps(rows, indent=1) + "\n")
    return {
        "version": version,
        "samples": len(samples),
        "camera_frames": frames,
        "annotations": anns,
        "instances": len(db.tables["instance"]),
        "sample_instant": "sweep end (the last column's time), as nuScenes stamps LIDAR_TOP",
    }


def _date(t_ns: int) -> str:
    from datetime import datetime, timezone

    return datetime.fromtimestamp(int(t_ns) / 1e9, tz=timezone.utc).strftime("%Y-%m-%d")


def _placeholder_png(path: Path) -> None:
    from PIL import Image

    Image.new("L", (1, 1), 0).save(path)


def _camera_channels(cameras: list[str]) -> dict[str, str]:
    if len(cameras) == 1:
        return {cameras[0]: "CAM_FRONT"}
    return {n: f"CAM_{n.upper()}" for n in cameras}


def _sensor(db: Db, src: RunSource, name: str, channel: str) -> dict:
    s = src.spec.sensors[name]
    modality = "lidar" if name == src.lidar else "camera"
    db.add("sensor", {"token": db.token("sensor", channel), "channel": channel,
                      "modality": modality})  # fmt: skip
    m = src.mount(name)
    k = []
    if modality == "camera":
        fx, fy, cx, cy = s.k()
        k = [[fx, 0.0, cx], [0.0, fy, cy], [0.0, 0.0, 1.0]]
    return db.add("calibrated_sensor", {
        "token": db.token("calibrated_sensor", channel),
        "sensor_token": db.token("sensor", channel),
        "translation": [float(v) for v in m.t], "rotation": _wxyz(m), "camera_intrinsic": k,
    })  # fmt: skip


def _ego(db: Db, src: RunSource, channel: str, t_ns: int) -> str:
    p = src.base_pose(t_ns)[0]
    token = db.token("ego_pose", channel, t_ns)
    db.add("ego_pose", {"token": token, "timestamp": _us(t_ns), "rotation": _wxyz(p),
                        "translation": [float(v) for v in p.t]})  # fmt: skip
    return token


def _lidar(db: Db, src: RunSource, out: Path, cal: dict, logfile: str, deskew: bool) -> list:
    folder = out / "samples" / LIDAR
    folder.mkdir(parents=True)
    objects = ObjectSource(src.world, int(src.manifest["start_ns"]))
    mount = src.mount(src.lidar)
    rows = []
    for c in src.clouds("end", deskew):
        ts = _us(c.ref_ns)
        rel = f"samples/{LIDAR}/{logfile}__{LIDAR}__{ts}.pcd.bin"
        cloud = np.column_stack([c.xyz, c.intensity, c.ring]).astype("<f4")
        cloud.tofile(out / rel)
        pose = src.base_pose(c.ref_ns)[0].compose(mount)
        # counted on the points as written (float32), as a reader of the file counts them
        in_map = pose.apply(cloud[:, :3].astype(np.float64)) if len(cloud) else np.zeros((0, 3))
        boxes = objects.at(c.ref_ns, pose.t, src.lidar_spec.range.max)
        counted = [(b, int(b.contains(in_map).sum())) for b in boxes]
        rows.append(db.add("sample_data", {
            "token": db.token("sample_data", LIDAR, ts), "sample_token": "",
            "ego_pose_token": _ego(db, src, LIDAR, c.ref_ns), "calibrated_sensor_token":
            cal["token"], "timestamp": ts, "fileformat": "pcd", "is_key_frame": True,
            "height": 0, "width": 0, "filename": rel, "prev": "", "next": "", "_boxes": counted,
        }))  # fmt: skip
    rows.sort(key=lambda r: r["timestamp"])  # log order is publish order
    _link(rows)
    return rows


def _camera(db, src: RunSource, out: Path, name: str, channel: str, cal: dict, samples: list,
            logfile: str) -> int:  # fmt: skip
    s = src.spec.sensors[name]
    frames = sorted(((_us(i.stamp_ns), i) for i in src.images(name)), key=lambda p: p[0])
    ts = np.array([s_["timestamp"] for s_ in samples], dtype=np.int64)
    key: dict[int, int] = {}  # sample index -> frame index of its key frame
    half = 0.5e6 / src.lidar_spec.rate_hz
    for j, (t, _i) in enumerate(frames):
        if len(ts):
            k = int(np.argmin(np.abs(ts - t)))
            best = key.get(k)
            if abs(ts[k] - t) <= half and (best is None or abs(frames[best][0] - ts[k]) > abs(
                    t - ts[k])):  # fmt: skip
                key[k] = j
    keyed = {j: k for k, j in key.items()}
    rows = []
    for folder in ("samples", "sweeps"):
        (out / folder / channel).mkdir(parents=True, exist_ok=True)
    for j, (t, img) in enumerate(frames):
        is_key = j in keyed
        if is_key:
            sample = samples[keyed[j]]["token"]
        else:  # the next sample (the devkit interpolates boxes between it and the one before)
            after = np.searchsorted(ts, t)
            sample = samples[min(after, len(ts) - 1)]["token"] if len(ts) else ""
        rel = f"{'samples' if is_key else 'sweeps'}/{channel}/{logfile}__{channel}__{t}.jpg"
        (out / rel).write_bytes(img.jpeg)
        rows.append(db.add("sample_data", {
            "token": db.token("sample_data", channel, t), "sample_token": sample,
            "ego_pose_token": _ego(db, src, channel, img.stamp_ns),
            "calibrated_sensor_token": cal["token"], "timestamp": t, "fileformat": "jpg",
            "is_key_frame": is_key, "height": s.height, "width": s.width, "filename": rel,
            "prev": "", "next": "",
        }))  # fmt: skip
    _link(rows)
    return len(rows)


def _annotations(db: Db, lidar_rows: list, samples: list) -> int:
    """One sample_annotation per box per sample, one instance per object, linked in time."""
    per_instance: dict[str, list[tuple[dict, ObjectBox]]] = {}
    for r, s in zip(lidar_rows, samples):
        for b, n in r["_boxes"]:
            attr = attribute(b.category, b.moving)
            row = db.add("sample_annotation", {
                "token": db.token("sample_annotation", b.key, s["timestamp"]),
                "sample_token": s["token"], "instance_token": db.token("instance", b.key),
                "visibility_token": "", "attribute_tokens": [db.token("attribute", attr)] if attr
                else [], "translation": [float(v) for v in b.center], "size": b.wlh(),
                "rotation": _wxyz(Pose(b.center, b.rot)), "prev": "", "next": "",
                "num_lidar_pts": n, "num_radar_pts": 0,
            })  # fmt: skip
            per_instance.setdefault(b.key, []).append((row, b))
    for key, rows in per_instance.items():
        _link([r for r, _ in rows])
        db.add("instance", {
            "token": db.token("instance", key), "category_token": db.token("category",
            rows[0][1].category), "nbr_annotations": len(rows),
            "first_annotation_token": rows[0][0]["token"],
            "last_annotation_token": rows[-1][0]["token"],
        })  # fmt: skip
    return sum(len(r) for r in per_instance.values())


def _vocabulary(db: Db, used: set[str]) -> None:
    """category (nuScenes' own and those used), attribute and visibility, as nuScenes names
    them; visibility (how much of a box the cameras see) is not computed: tokens are empty."""
    from simconform.export.boxes import NUSCENES_CATEGORIES

    for n in sorted(NUSCENES_CATEGORIES | used):
        db.add("category", {"token": db.token("category", n), "name": n, "description": n})
    for a in ATTRIBUTES:
        db.add("attribute", {"token": db.token("attribute", a), "name": a, "description": a})
    for token, level in VISIBILITY:
        db.add("visibility", {"token": token, "level": level, "description": f"visible {level}"})
