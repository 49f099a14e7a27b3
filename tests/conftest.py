"""Shared fixtures: demo inputs, small specs written on the fly, and one short recorded run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from simconform.run import DEMO_SPEC, DEMO_TRAJECTORY, DEMO_WORLD, RunConfig, run

REPO = Path(__file__).resolve().parent.parent
# MuJoCo reads MUJOCO_GL once, at import: choose before any test imports it
os.environ.setdefault("MUJOCO_GL", "osmesa")
os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])


def cli(*args: str, cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run the real `simconform` entry point in a subprocess."""
    return subprocess.run(
        [sys.executable, "-m", "simconform.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
        check=False,
    )


def write_yaml(path: Path, data) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def demo_spec() -> dict:
    return yaml.safe_load(DEMO_SPEC.read_text())


def demo_world() -> dict:
    return yaml.safe_load(DEMO_WORLD.read_text())


@pytest.fixture(scope="session")
def short_run(tmp_path_factory) -> Path:
    """The demo for its first 3 s, recorded once for the tests that only read it."""
    out = tmp_path_factory.mktemp("runs") / "short"
    from simconform.verify.verifier import verify_run

    run(RunConfig(out=out, duration=3.0), progress=False)
    verify_run(out)
    return out


__all__ = [
    "DEMO_SPEC",
    "DEMO_TRAJECTORY",
    "DEMO_WORLD",
    "REPO",
    "cli",
    "demo_spec",
    "demo_world",
    "write_yaml",
]
