"""Simulator backends behind one SensorBackend interface; `--backend NAME` picks one.

Adding a backend is one module plus one entry here; entries are imported lazily so a missing
engine only matters when its backend is chosen.
"""

from __future__ import annotations

from importlib import import_module

from simconform.errors import UserError

BACKENDS: dict[str, str] = {
    "reference": "simconform.adapters.reference:ReferenceBackend",
    "mujoco": "simconform.adapters.mujoco:MujocoBackend",
    "replay": "simconform.adapters.replay:ReplayBackend",
    "gazebo": "simconform.adapters.gazebo.backend:GazeboBackend",
}


def get_backend(name: str):
    if name not in BACKENDS:
        raise UserError(None, "--backend", name, f"expected one of {', '.join(sorted(BACKENDS))}")
    module, cls = BACKENDS[name].split(":")
    return getattr(import_module(module), cls)()
