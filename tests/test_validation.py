"""Every user error exits 2 with one message naming file, field, value and what is allowed;
no traceback, and nothing is written."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest

from conftest import DEMO_TRAJECTORY, cli, demo_spec, demo_world, write_yaml
from simconform.cli import main


def run_main(argv: list[str], capsys) -> tuple[int, str, str]:
    old = sys.argv
    sys.argv = ["simconform", *argv]
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    finally:
        sys.argv = old
    out = capsys.readouterr()
    return code, out.out, out.err


def mutate(data: dict, path: str, value) -> dict:
    data = copy.deepcopy(data)
    *parents, last = path.split(".")
    node = data
    for p in parents:
        node = node[int(p)] if p.isdigit() else node[p]
    if value is DELETE:
        del node[last]
    else:
        node[int(last) if last.isdigit() else last] = value
    return data


DELETE = object()

SPEC_CASES = [
    (
        "sensors.lidar.noise.range.sigma",
        -0.1,
        "sensors.lidar.noise.range.sigma",
        "greater than or equal to 0",
    ),
    ("sensors.lidar.dropout.point", 1.0, "sensors.lidar.dropout.point", "less than 1"),
    ("sensors.lidar.rate_hz", 0, "sensors.lidar.rate_hz", "greater than or equal to 0.01"),
    ("sensors.lidar.columns", 0, "sensors.lidar.columns", "greater than or equal to 1"),
    ("sensors.lidar.colums", 5, "sensors.lidar.colums", "unknown key"),
    ("sensors.lidar.shutter", "diagonal", "sensors.lidar.shutter", "'global' or 'rolling'"),
    ("sensors.lidar.rings", {"count": 16, "angles_deg": [0]}, "sensors.lidar.rings", "not both"),
    ("sensors.lidar.range", {"min": 5, "max": 1}, "sensors.lidar.range", "must be below max"),
    (
        "sensors.gnss.latency",
        {"fixed_ms": 1, "jitter_ms": 5},
        "sensors.gnss.latency",
        "must not exceed",
    ),
    ("sensors.imu.noise.accel.sigma", [0.1, 0.1], "sensors.imu.noise.accel.sigma.2", "required"),
    ("sensors.imu.type", "sonar", "sensors.imu", "'lidar', 'imu', 'gnss', 'odom'"),
    (
        "sensors.odom.tolerances",
        {"sigma_rel": 0},
        "sensors.odom.tolerances.sigma_rel",
        "greater than 0",
    ),
    ("name", DELETE, "name", "Field required"),
]


@pytest.mark.parametrize(("path", "value", "field", "allowed"), SPEC_CASES)
def test_spec_errors(tmp_path: Path, capsys, path, value, field, allowed) -> None:
    spec = write_yaml(tmp_path / "bad_spec.yaml", mutate(demo_spec(), path, value))
    out = tmp_path / "out"
    code, stdout, err = run_main(["run", "--spec", str(spec), "--out", str(out)], capsys)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("simconform: error: ")
    assert "bad_spec.yaml" in err and field in err and allowed in err
    assert "Traceback" not in err + stdout
    assert not out.exists()


WORLD_CASES = [
    ("origin.lat", 91, "origin.lat", "less than or equal to 90"),
    ("objects.1.size", [1, -1, 1], "objects.1.size.1", "greater than 0"),
    ("objects.7.radius", 0, "objects.7.radius", "greater than 0"),
    ("objects.0.normal", [0, 0, 0], "objects.0.normal", "non-zero"),
    ("objects.2.type", "torus", "objects.2", "'plane', 'box', 'cylinder', 'sphere', 'mesh'"),
    ("objects.26.file", "meshes/nope.obj", "objects.26.file", "mesh file"),
    ("objects.3.color", [2, 0, 0], "objects.3.color.0", "less than or equal to 1"),
    ("objects", [], "objects", "at least 1 item"),
]


@pytest.mark.parametrize(("path", "value", "field", "allowed"), WORLD_CASES)
def test_world_errors(tmp_path: Path, capsys, path, value, field, allowed) -> None:
    (tmp_path / "meshes").symlink_to(DEMO_TRAJECTORY.parent / "meshes")
    world = write_yaml(tmp_path / "bad_world.yaml", mutate(demo_world(), path, value))
    out = tmp_path / "out"
    code, stdout, err = run_main(["run", "--world", str(world), "--out", str(out)], capsys)
    assert code == 2, err
    assert err.count("\n") == 1 and "bad_world.yaml" in err and field in err and allowed in err
    assert "Traceback" not in err + stdout
    assert not out.exists()


def _tum(rows: list[str]) -> str:
    return "\n".join(rows) + "\n"


TRAJ_CASES = [
    (["0 0 0 0 0 0 0 1", "1 1 0 0 0 0 0 1", "1 2 0 0 0 0 0 1"], "line 3.t", "strictly greater"),
    (["0 0 0 0 0 0 0 1", "1 1 0 0 0 0 0 2"], "line 2.q", "unit quaternion"),
    (["0 0 0 0 0 0 0 1"], "poses", "at least 2 poses"),
    (["0 0 0 0 0 0 0 1", "1 1 0 0 0 0 1"], "line 2", "8 columns"),
    (["0 0 0 0 0 0 0 1", "1 1 0 zero 0 0 0 1"], "line 2", "expected numbers"),
    (["0 0 0 0 0 0 0 1", "1 1 0 nan 0 0 0 1"], "line 2", "finite"),
    (["0 0 0", "1 0 0"], "line 1", "heading is undefined"),
]


@pytest.mark.parametrize(("rows", "field", "allowed"), TRAJ_CASES)
def test_trajectory_errors(tmp_path: Path, capsys, rows, field, allowed) -> None:
    traj = tmp_path / "bad.tum"
    traj.write_text(_tum(rows))
    out = tmp_path / "out"
    code, stdout, err = run_main(["run", "--trajectory", str(traj), "--out", str(out)], capsys)
    assert code == 2, err
    assert err.count("\n") == 1 and "bad.tum" in err and field in err and allowed in err
    assert "Traceback" not in err + stdout
    assert not out.exists()


FLAG_CASES = [
    (["--duration", "500"], "--duration", "spans only 200 s"),
    (["--duration", "-1"], "--duration", "seconds > 0"),
    (["--backend", "unreal"], "--backend", "expected one of"),
    (["--storage", "rosbag1"], "--storage", "mcap or sqlite3"),
    (["--seed", "-5"], "--seed", "[0, 2^63)"),
    (["--confidence", "1.5"], "--confidence", "[0.5, 1)"),
    (["--spec", "/nonexistent/spec.yaml"], "spec.yaml", "existing YAML file"),
]


@pytest.mark.parametrize(("args", "field", "allowed"), FLAG_CASES)
def test_flag_errors(tmp_path: Path, capsys, args, field, allowed) -> None:
    out = tmp_path / "out"
    code, stdout, err = run_main(["run", *args, "--out", str(out)], capsys)
    assert code == 2, err
    assert err.count("\n") == 1 and field in err and allowed in err
    assert "Traceback" not in err + stdout
    assert not out.exists()


def test_yaml_syntax_error(tmp_path: Path, capsys) -> None:
    spec = tmp_path / "broken.yaml"
    spec.write_text("name: rover\nsensors: {lidar: [\n")
    code, _, err = run_main(["run", "--spec", str(spec), "--out", str(tmp_path / "o")], capsys)
    assert code == 2 and "broken.yaml" in err and "valid YAML" in err


def test_refuses_existing_run_without_force(short_run: Path, capsys) -> None:
    before = sorted(p.name for p in short_run.iterdir())
    code, _, err = run_main(["run", "--duration", "1", "--out", str(short_run)], capsys)
    assert code == 2 and "--force" in err
    assert sorted(p.name for p in short_run.iterdir()) == before


def test_force_never_deletes_a_non_run_folder(tmp_path: Path, capsys) -> None:
    (tmp_path / "precious.txt").write_text("keep me")
    code, _, err = run_main(["run", "--duration", "1", "--force", "--out", str(tmp_path)], capsys)
    assert code == 2 and "not a simconform run" in err
    assert (tmp_path / "precious.txt").read_text() == "keep me"


def test_verify_bad_folder(tmp_path: Path, capsys) -> None:
    code, _, err = run_main(["verify", str(tmp_path)], capsys)
    assert code == 2 and "run.json" in err


def test_real_entry_point_error_and_help(tmp_path: Path) -> None:
    res = cli("run", "--duration", "999", "--out", str(tmp_path / "o"))
    assert res.returncode == 2 and res.stderr.startswith("simconform: error:")
    assert "Traceback" not in res.stderr
    helped = cli("run", "--help")
    assert helped.returncode == 0
    for flag in (
        "--world",
        "--spec",
        "--trajectory",
        "--backend",
        "--seed",
        "--out",
        "--duration",
        "--force",
        "--storage",
        "--confidence",
    ):
        assert flag in helped.stdout
