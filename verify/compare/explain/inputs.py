"""Reopen a recorded run's world and trajectory, to re-cast or re-render what an engine saw.

The run folder records the input files' paths and SHA-256; an explanation cast on changed
inputs would explain nothing, so a missing or changed file is refused (FileNotFoundError, which
compare turns into a note and skips the explanation).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from simconform.world import World

if TYPE_CHECKING:  # at run time imported where used: it loads scipy.interpolate (13.5 MB)
    from simconform.trajectory import Trajectory


def gazebo_side(manifests: tuple[dict, dict]) -> int | None:
    """Which run of a comparison is a gazebo run (0: A, 1: B), when exactly one is."""
    gz = [i for i, m in enumerate(manifests) if m.get("backend") == "gazebo"]
    return gz[0] if len(gz) == 1 else None


def run_inputs(manifest: dict) -> tuple[World, Trajectory]:
    """The run's world and its trajectory, interpolated as the run interpolated it, on the
    run's bag clock (run.json epoch_s)."""
    from simconform.provenance import sha256
    from simconform.trajectory import load_trajectory, run_interpolation
    from simconform.world import load_world

    wpath, tpath = Path(manifest["world"]), Path(manifest["trajectory"])
    for p, key in ((wpath, "world_sha256"), (tpath, "trajectory_sha256")):
        if not p.is_file() or sha256(p) != manifest[key]:
            raise FileNotFoundError(f"{p} is missing or changed since the run")
    world = load_world(wpath)
    traj = load_trajectory(tpath, world, run_interpolation(manifest))
    return world, traj.shifted(int(manifest.get("epoch_s") or 0))  # on the bag's clock
