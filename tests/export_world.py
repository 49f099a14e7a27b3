"""A short run for the export tests: a small lot with classed objects (a parked car, a pole, a
ball) seen by a noiseless rover lidar and the rover camera, driving past at 3 m/s."""

from __future__ import annotations

from pathlib import Path

import yaml

from conftest import cli, write_yaml

ROOT = Path(__file__).resolve().parents[1]

WORLD = {
    "name": "lot",
    "origin": {"lat": 48.262, "lon": 11.668, "alt": 480.0},
    "objects": [
        {"type": "plane", "name": "ground"},
        {"type": "box", "name": "car", "class": "car", "center": [9, 4, 0.75],
         "size": [4.2, 1.8, 1.5], "rpy": [0, 0, 0.3]},
        {"type": "cylinder", "name": "pole", "class": "pole", "center": [5, -3, 2.0],
         "radius": 0.2, "length": 4.0},
        {"type": "sphere", "name": "ball", "center": [14, -1.5, 1.0], "radius": 0.8},
        {"type": "box", "name": "wall", "center": [6, 12, 2], "size": [30, 0.5, 4]},
    ],
}  # fmt: skip


def make_run(d: Path, duration: str = "2") -> Path:
    """lot.yaml, lot.txt (2D waypoints), lidar_camera.yaml and the run d/run."""
    write_yaml(d / "lot.yaml", WORLD)
    (d / "lot.txt").write_text("0 0 0\n1 3 0.1\n2 6 0.4\n3 9 0.9\n")
    spec = yaml.safe_load((ROOT / "sensors_spec" / "rover.yaml").read_text())
    lidar = spec["sensors"]["lidar"]
    lidar["noise"]["range"]["sigma"] = 0.0  # exact points: a box's points are exactly its hits
    lidar["dropout"] = {"sample": 0.0, "point": 0.0}
    spec["sensors"] = {"lidar": lidar, "camera": spec["sensors"]["camera"]}
    write_yaml(d / "spec.yaml", spec)
    res = cli(
        "run", "--spec", str(d / "spec.yaml"), "--world", str(d / "lot.yaml"), "--trajectory",
        str(d / "lot.txt"), "--duration", duration, "--out", str(d / "run"),
    )  # fmt: skip
    assert res.returncode in (0, 1), res.stderr
    return d / "run"


def published(run: Path) -> list:
    """The run's published lidar sweeps (finite points, per-point times), in time order."""
    from simconform.bag.reader import SourceBag
    from simconform.downstream.sweeps import sweeps

    bag = SourceBag(run / "bag")
    try:
        return sorted(sweeps(bag, "/lidar/points"), key=lambda s: s.stamp_ns)
    finally:
        bag.close()


def cast_to(world: Path, origins, points_map):
    """The reference ray caster from each point's origin (the lidar where it measured that
    point) towards the point: (|range error| m, index of the object hit)."""
    import numpy as np

    from simconform.raycast import Scene
    from simconform.world import load_world

    v = points_map - origins
    r = np.linalg.norm(v, axis=1)
    hits = Scene(load_world(world)).cast(origins, v / r[:, None])
    return np.abs(hits.dist - r), hits.index
