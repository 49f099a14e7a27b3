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


EMULATE = ("gazebo",)  # engines the reference backend can render as (`--emulate`)


def get_backend(name: str, emulate: str | None = None):
    """A new, unopened backend; `emulate` (reference only) renders as that engine does."""
    if name not in BACKENDS:
        raise UserError(None, "--backend", name, f"expected one of {', '.join(sorted(BACKENDS))}")
    if emulate is not None and (name != "reference" or emulate not in EMULATE):
        allowed = ", ".join(EMULATE)
        raise UserError(
            None, "--emulate", emulate, f"expected {allowed}, with --backend reference only"
        )
    module, cls = BACKENDS[name].split(":")
    backend_cls = getattr(import_module(module), cls)
    return backend_cls(emulate=emulate) if emulate is not None else backend_cls()
