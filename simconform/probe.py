"""Is a backend usable here? Open it on the demo world with a tiny sensor set and capture once.

`simconform backends` answers this before a long run: an engine that is missing, a renderer
without an OpenGL context, or a Gazebo server that does not start fails here in seconds, with
the same message the run would give. The probe is a real capture (lidar and camera, where the
backend renders both), not an import check, because most failures happen when the engine
first renders.
"""

from __future__ import annotations

import shutil
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from simconform.adapters.base import BackendUnavailable, EngineError
from simconform.demo import DEMO_TRAJECTORY, DEMO_WORLD
from simconform.registry import BACKENDS
from simconform.spec import Spec
from simconform.trajectory import load_trajectory
from simconform.world import load_world

# A 4 x 16 lidar and a 32 x 24 camera at 10 Hz (a whole number of Gazebo's 1 ms steps).
PROBE_SPEC = {
    "name": "probe",
    "sensors": {
        "lidar": {
            "type": "lidar",
            "rate_hz": 10,
            "rings": {"count": 4, "fov_deg": [-10.0, 10.0]},
            "columns": 16,
            "mount": {"xyz": [0.0, 0.0, 1.0]},
        },
        "camera": {
            "type": "camera",
            "rate_hz": 10,
            "width": 32,
            "height": 24,
            "hfov_deg": 90.0,
            "mount": {"xyz": [0.2, 0.0, 1.0]},
        },
    },
}


@dataclass
class Probe:
    backend: str
    usable: bool
    seconds: float
    version: str | None = None
    note: str = ""


def probe(name: str) -> Probe:
    """Open backend `name`, capture one lidar sweep and one camera frame, close it."""
    t0 = time.perf_counter()
    scratch = Path(tempfile.mkdtemp(prefix="simconform_probe_"))
    try:
        backend = BACKENDS.load(name)()
        world = load_world(DEMO_WORLD)
        traj = load_trajectory(DEMO_TRAJECTORY, world)
        backend.run_dir = scratch
        backend.open(world, Spec.model_validate(PROBE_SPEC))
        try:
            for sensor in PROBE_SPEC["sensors"]:
                backend.capture(sensor, traj.start_ns, traj)
            version = backend.engine_version()
        finally:
            backend.close()
        note = "lidar and camera captured"
        return Probe(name, True, time.perf_counter() - t0, version, note)
    except (BackendUnavailable, EngineError) as exc:
        return Probe(name, False, time.perf_counter() - t0, None, " ".join(str(exc).split()))
    except Exception as exc:  # an engine failing in a way we did not foresee: say where
        where = traceback.extract_tb(exc.__traceback__)[-1]
        why = f"{type(exc).__name__}: {exc} ({Path(where.filename).name}:{where.lineno})"
        return Probe(name, False, time.perf_counter() - t0, None, " ".join(why.split()))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
