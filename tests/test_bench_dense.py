"""bench/raycast_dense.py on a user's own world (`--world`): what an engineer runs to compare
Scene with Embree on their geometry. Checks that it runs and that both casters hit the same
surfaces; the rays/s it prints are measurements, never asserted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench" / "raycast_dense.py"


def _bench(*args: str) -> subprocess.CompletedProcess:
    # a subprocess: the bench pins its process to one CPU when it is imported
    return subprocess.run(
        [sys.executable, str(BENCH), *args], capture_output=True, text=True, timeout=600
    )


def test_your_world_is_benched_beside_embree(tmp_path: Path) -> None:
    """A world file of boxes, a cylinder and a sphere on a plane, scanned by the 16 x 1800
    lidar from the default point (1.8 m above the ground under the map origin): one row, every
    ray hitting what Embree hits."""
    world = {
        "name": "yard",
        "origin": {"lat": 47.0, "lon": 8.0, "alt": 400.0},
        "objects": [
            {"type": "plane"},
            *(
                {"type": "box", "center": [x, y, 1.5], "size": [2.0, 3.0, 3.0]}
                for x, y in ((8, 0), (-6, 5), (0, -9), (4, 7))
            ),
            {"type": "cylinder", "center": [3.0, -4.0, 2.0], "radius": 0.3, "length": 4.0},
            {"type": "sphere", "center": [-5.0, -5.0, 1.0], "radius": 1.0},
        ],
    }
    path = tmp_path / "yard.yaml"
    path.write_text(yaml.safe_dump(world))
    out = _bench("--world", str(path), "--only", "yours", "--quick", "--repeats", "1")
    assert out.returncode == 0, out.stderr
    assert "yours: yard: " in out.stdout and "scanned from 0, 0, 1.8" in out.stdout
    rows = [line.split() for line in out.stdout.splitlines() if line.startswith("yours: yard 16x")]
    assert len(rows) == 1, out.stdout
    row = rows[0]
    assert row[3] == "6"  # the bounded objects
    assert float(row[-2]) > 0.3  # hits: the plane below half the rays, the objects around
    assert row[-1] == "100.0%"  # the same rays hit something in both casters


def test_a_bad_world_is_one_message_and_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("name: bad\nobjects:\n  - {type: box, size: [1, 1]}\n")
    out = _bench("--world", str(path), "--quick")
    assert out.returncode == 2
    assert out.stderr.startswith(f"error: {path}") and "Traceback" not in out.stderr
    assert out.stdout == ""
    out = _bench("--at", "1", "2", "3")
    assert out.returncode == 2 and "give --world too" in out.stderr
