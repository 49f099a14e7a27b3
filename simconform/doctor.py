"""What this machine has for simconform, and what it lacks: `simconform doctor`.

Each backend is probed by a real capture (probe.py, as `simconform backends`), and each
optional piece is looked up where its user looks for it (the Python package, the shared
library, the executable), with its version, what it is needed for and how to get it. Nothing
is installed or changed.
"""

from __future__ import annotations

import ctypes.util
import importlib.metadata as md
import os
import sys
from dataclasses import asdict, dataclass

from simconform.probe import probe
from simconform.registry import BACKENDS


@dataclass
class Finding:
    name: str
    found: bool
    detail: str  # the version or where it was found; or what is missing
    needed_for: str
    install: str = ""  # how to get it, when missing


def _package(dist: str, needed_for: str, install: str) -> Finding:
    try:
        return Finding(dist, True, f"{dist} {md.version(dist)}", needed_for)
    except md.PackageNotFoundError:
        return Finding(dist, False, "not installed", needed_for, install)


def _library(name: str, soname: str, needed_for: str, install: str) -> Finding:
    path = ctypes.util.find_library(soname)
    if path is None:
        return Finding(name, False, f"lib{soname} not found", needed_for, install)
    return Finding(name, True, path, needed_for)


def components() -> list[Finding]:
    """Optional pieces: engines, renderers, executors, lidar odometry, faster ray casting."""
    from simconform.adapters.gazebo.transport import gz_sim_version, missing_pieces

    gl = os.environ.get("MUJOCO_GL")
    gpu = any(os.path.exists(p) for p in ("/dev/nvidia0", "/dev/dri/renderD128"))
    chosen = gl or ("egl" if gpu else "osmesa")
    if getattr(sys.modules.get("simconform.adapters.mujoco"), "PICKED", None) is not None:
        gl = None  # simconform chose it when the mujoco backend loaded (probed above)
    out = [
        _package("mujoco", "--backend mujoco", "pip install 'simconform[mujoco]'"),
        _library(
            "OSMesa",
            "OSMesa",
            "MuJoCo rendering without a GPU (MUJOCO_GL=osmesa)",
            "apt-get install libosmesa6",
        ),
        _library(
            "EGL", "EGL", "MuJoCo rendering on a GPU (MUJOCO_GL=egl)", "apt-get install libegl1"
        ),
        Finding(
            "MUJOCO_GL",
            True,
            f"{chosen}" + (" (set)" if gl else f" (default here: {'a GPU' if gpu else 'no GPU'})"),
            "which OpenGL MuJoCo renders with",
        ),
    ]
    missing = missing_pieces()
    version = gz_sim_version()  # None without a `gz` on PATH
    out.append(
        Finding(
            "Gazebo Harmonic",
            not missing,
            (version or "gz found") if not missing else ", ".join(missing) + " not found",
            "--backend gazebo, --noise engine, --emulate gazebo checks",
            "docs/gazebo.md (Gazebo Harmonic: gz-sim 8, gz-transport 13, gz-msgs 10)",
        )
    )
    out += [
        _package("ray", "campaign --executor ray", "pip install 'simconform[ray]'"),
        _package("kiss-icp", "simconform localize", "pip install 'simconform[localize]'"),
        _package("evo", "simconform localize (APE/RPE)", "pip install 'simconform[localize]'"),
        _package(
            "embreex",
            "the Embree peer of the ray-casting benchmarks (bench/raycast*.py)",
            "pip install 'simconform[bench]' (Linux x86-64 wheels)",
        ),
        _package("mcap", "reading damaged MCAP bags chunk by chunk", "pip install mcap"),
    ]
    return out


def backend_findings(names: list[str] | None = None, capture: bool = True) -> list[Finding]:
    """One finding per backend: a probe capture (capture=True) or only whether it loads."""
    out = []
    for name in names or list(BACKENDS):
        if name == "replay":
            out.append(Finding("replay", True, "no engine: replays recorded bags", "replay"))
            continue
        if not capture:
            try:
                BACKENDS.load(name)
                note = "its module loads; the engine was not probed (--no-capture)"
                missing = _engine_missing(name)
                if missing:  # the adapter loads without its engine: say what is absent
                    note = f"its module loads, but {missing} not found (see components)"
                out.append(Finding(name, not missing, note, "--backend"))
            except Exception as exc:  # an optional engine's import error, said as it is
                out.append(Finding(name, False, " ".join(str(exc).split()), "--backend"))
            continue
        p = probe(name)
        detail = f"{p.version or '?'}; {p.note} in {p.seconds:.1f} s" if p.usable else p.note
        out.append(Finding(name, p.usable, detail, f"--backend {name}"))
    return out


def _engine_missing(name: str) -> str:
    """What the engine behind a backend lacks here, as far as can be told without starting it
    (Gazebo's programs and Python bindings; "" where nothing is known to be missing)."""
    if name != "gazebo":
        return ""
    from simconform.adapters.gazebo.transport import missing_pieces

    return ", ".join(missing_pieces())


def as_json(backends: list[Finding], parts: list[Finding]) -> dict:
    return {"backends": [asdict(f) for f in backends], "components": [asdict(f) for f in parts]}
