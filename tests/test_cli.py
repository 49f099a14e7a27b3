"""The command line itself: --version, and `simconform backends` answering before a long run."""

from __future__ import annotations

import re

import pytest

from conftest import cli
from simconform import __version__


def test_version_names_the_release_and_the_commit() -> None:
    r = cli("--version")
    assert r.returncode == 0, r.stderr
    assert re.fullmatch(
        rf"simconform {re.escape(__version__)}( \(git [0-9a-f]{{40}}(\+dirty)?\))?\n", r.stdout
    )


def test_backends_probes_reference_and_mujoco_with_a_real_capture() -> None:
    r = cli("backends", "reference", "mujoco", timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = {line.split("│")[1].strip(): line for line in r.stdout.splitlines() if "│" in line}
    assert "yes" in rows["reference"] and "lidar and camera captured" in rows["reference"]
    assert "yes" in rows["mujoco"] and "MuJoCo" in rows["mujoco"]


def test_backends_refuses_an_unknown_name_with_exit_2() -> None:
    r = cli("backends", "nope")
    assert r.returncode == 2
    assert r.stderr.startswith("simconform: error: ") and "expected one of" in r.stderr


@pytest.mark.gazebo
def test_backends_starts_a_real_gazebo_server() -> None:
    r = cli("backends", "gazebo", timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"gazebo\s*│\s*yes\s*│\s*gz-sim 8\.", r.stdout), r.stdout
