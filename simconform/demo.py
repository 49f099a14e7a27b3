"""The bundled demo's inputs: every `simconform run` flag defaults to them."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if not (REPO / "worlds" / "demo.yaml").is_file():  # installed without the source tree
    REPO = Path.cwd()
DEMO_WORLD = REPO / "worlds" / "demo.yaml"
DEMO_TRAJECTORY = REPO / "worlds" / "demo.tum"
DEMO_SPEC = REPO / "sensors_spec" / "rover.yaml"
