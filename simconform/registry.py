"""The one registry through which simconform finds its pluggable parts.

Backends (`--backend`), the engines the reference backend can render as (`--emulate`), the axis
conventions of foreign ground truth (a replay map's `convention`), lidar odometries (`localize
--odometry`) and exporters (`export`, `export-sdf`)
are each a name -> "module:attribute" table. Entries are imported only when chosen, so a missing
engine matters only to the run that asks for it. A plugin adds an entry at run time
(`BACKENDS["mine"] = "my_pkg.backend:MyBackend"`); campaign workers receive the entry itself, so
they find the plugin too wherever its module imports.
"""

from __future__ import annotations

from importlib import import_module
from pathlib import Path
from typing import Any

from simconform.errors import UserError


class Registry(dict[str, str]):
    """name -> "module:attribute"; `load` imports the chosen one, `check` says what is allowed."""

    def __init__(self, kind: str, flag: str, entries: dict[str, str]) -> None:
        super().__init__(entries)
        self.kind = kind
        self.flag = flag

    def check(self, name: str, file: Path | str | None = None, field: str | None = None) -> str:
        """`name` if registered; otherwise one UserError naming the flag (or file and field)."""
        if name not in self:
            allowed = ", ".join(sorted(self))
            raise UserError(file, field or self.flag, name, f"expected one of {allowed}")
        return name

    def load(self, name: str, file: Path | str | None = None, field: str | None = None) -> Any:
        module, attr = self[self.check(name, file, field)].split(":")
        return getattr(import_module(module), attr)


BACKENDS = Registry(
    "backend",
    "--backend",
    {
        "reference": "simconform.adapters.reference:ReferenceBackend",
        "mujoco": "simconform.adapters.mujoco:MujocoBackend",
        "replay": "simconform.adapters.replay:ReplayBackend",
        "gazebo": "simconform.adapters.gazebo.backend:GazeboBackend",
    },
)

# Engines whose lidar and camera models the reference backend can apply on exact geometry.
EMULATE = Registry(
    "emulated engine", "--emulate", {"gazebo": "simconform.adapters.gazebo.gpu_rays:emulate_sweep"}
)

# Axis conventions of foreign poses: name -> f(xyz, quat_xyzw) -> the same in ROS axes (REP 103).
CONVENTIONS = Registry(
    "axis convention",
    "convention",
    {
        "ros": "simconform.adapters.replay.map:ros_axes",
        "unity": "simconform.adapters.replay.map:unity_to_ros",
    },
)

# Lidar odometries `simconform localize --odometry` runs: name -> a class built from
# (min_range, max_range, deskew) with `register(sweep)` (simconform.downstream.odometry).
ODOMETRY = Registry(
    "lidar odometry", "--odometry", {"kiss-icp": "simconform.downstream.odometry:KissIcp"}
)

# Exporters: name -> a function writing files for another tool. `sdf` writes a world and spec
# (`simconform export-sdf`); the others write a run as a dataset (`simconform export --format`),
# each a function (RunSource, folder, deskew) -> summary (simconform.export.dataset).
EXPORTERS = Registry(
    "exporter",
    "--format",
    {
        "sdf": "simconform.adapters.gazebo.sdf:write_sdf",
        "kitti": "simconform.export.kitti:write_kitti",
        "nuscenes": "simconform.export.nuscenes:write_nuscenes",
    },
)


def get_backend(name: str, emulate: str | None = None):
    """A new, unopened backend; `emulate` (reference only) renders as that engine does."""
    BACKENDS.check(name)
    if emulate is not None and emulate not in EMULATE:
        raise UserError(None, "--emulate", emulate, f"expected {', '.join(EMULATE)}")
    if emulate is not None and name != "reference":
        raise UserError(
            None,
            "--backend",
            name,
            f"expected reference with --emulate {emulate} (it renders as that engine does; "
            f"--backend {name} is the engine itself)",
        )
    backend_cls = BACKENDS.load(name)
    return backend_cls(emulate=emulate) if emulate is not None else backend_cls()
