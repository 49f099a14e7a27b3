"""Every user error exits 2 with one message naming file, field, value and what is allowed;
no traceback, and nothing is written."""

from __future__ import annotations

import copy
import math
import sys
from pathlib import Path

import pytest
import yaml

from conftest import DEMO_TRAJECTORY, cli, demo_spec, demo_world, write_yaml
from simconform.cli import main
from simconform.errors import dump_yaml, load_yaml
from simconform.spec import load_spec


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


def _misspelt_columns() -> dict:
    lidar = copy.deepcopy(demo_spec()["sensors"]["lidar"])
    lidar["colums"] = lidar.pop("columns")
    return lidar


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
    ("sensors.imu.noise.accel.sigma", [0.1, 0.1], "accel.sigma: got [0.1, 0.1]", "expected 3"),
    # a misspelt required key is named as the typo, with the key it probably meant
    ("sensors.lidar", _misspelt_columns(), "sensors.lidar.colums", "did you mean 'columns'"),
    # lax pydantic read these as 1 Hz and 100 Hz
    ("sensors.imu.rate_hz", True, "sensors.imu.rate_hz", "not true/false"),
    ("sensors.imu.rate_hz", "100", "sensors.imu.rate_hz", "not a string"),
    ("sensors.camera.jpeg_quality", True, "sensors.camera.jpeg_quality", "not true/false"),
    ("sensors.lidar.rings", {"angles_deg": [0, False]}, "rings.angles_deg", "not true/false"),
    ("sensors.imu.type", "sonar", "sensors.imu", "'lidar', 'imu', 'gnss', 'odom'"),
    (
        "sensors.odom.tolerances",
        {"sigma_rel": 0},
        "sensors.odom.tolerances.sigma_rel",
        "greater than 0",
    ),
    ("name", DELETE, "name", "it is required"),
    # issue 15's examples, each once a traceback or silently accepted
    ("sensors.lidar.mount.xyz", [math.nan, 0, 1.2], "sensors.lidar.mount.xyz.0", "finite number"),
    ("sensors.lidar.mount.rpy", [0, math.inf, 0], "sensors.lidar.mount.rpy.1", "finite number"),
    ("sensors.lidar.noise.range.sigma", math.inf, "noise.range.sigma", "finite number"),
    ("sensors.camera.noise.intensity.bias", math.nan, "intensity.bias", "finite number"),
    ("sensors.lidar.noise.range.bias", 1e300, "range.bias", "less than or equal to 1000000"),
    ("sensors.imu.rate_hz", 1e-9, "sensors.imu.rate_hz", "greater than or equal to 0.01"),
    ("sensors.camera.hfov_deg", math.inf, "sensors.camera.hfov_deg", "finite number"),
    ("sensors.lidar.rings", {"count": 4, "fov_deg": [15, -15]}, "rings", "lower < upper"),
    ("sensors.lidar.rings", {"count": 1, "fov_deg": [15, -15]}, "rings", "lower <= upper"),
    (  # a ray (u - cx) / fx overflowed: the run failed with a traceback
        "sensors.camera",
        {
            "type": "camera",
            "rate_hz": 10,
            "width": 8,
            "height": 6,
            "intrinsics": {"fx": 1e-300, "fy": 1e-300, "cx": 3.5, "cy": 2.5},
        },
        "sensors.camera",
        "expected fx and fy at least 1e-12 of that",
    ),
    ("sensors.imu.topic", "/tf", "sensors.imu.topic", "one of the bag's own topics"),
    ("sensors.imu.topic", "/clock", "sensors.imu.topic", "one of the bag's own topics"),
    ("sensors.imu.topic", "/truth/imu", "sensors.imu.topic", "outside /truth/"),
    ("sensors.imu.topic", "", "sensors.imu.topic", "ROS 2 topic name"),
    ("sensors.imu.topic", "/my imu", "sensors.imu.topic", "ROS 2 topic name"),
    ("sensors.imu.topic", "/gps/fix", "sensors.gnss.topic", "which sensor imu writes too"),
    ("sensors.imu.frame_id", "imu link", "sensors.imu.frame_id", "tf2 frame id"),
    ("base_frame", "map", "base_frame", "other than map and odom"),
    ("base_frame", "lidar_link", "sensors.lidar.frame_id", "not map, odom or the base_frame"),
    ("sensors.imu.frame_id", "base_link", "sensors.imu.frame_id", "a frame of its own"),
    ("sensors.imu.frame_id", "lidar_link", "sensors.imu.frame_id", "lidar uses it"),
    ("sensors.imu.frame_id", "truth/base_link", "sensors.imu.frame_id", "outside truth/"),
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
    ("objects.0.normal", [0, 0, math.inf], "objects.0.normal.2", "finite number"),
    ("objects.0.normal", [math.nan, 0, 1], "objects.0.normal.0", "finite number"),
    ("objects.4.center", [1e300, 0, 0], "objects.4.center.0", "less than or equal to"),
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
    (["0 0 0", "1 0 0"], "line 1", "is undefined where waypoints repeat"),
    (["0 0 0", "1 1 0", "2 0 0", "3 1 0"], "line 2", "or the path turns straight back"),
    (["0 0 0 0 0 0 0 1", "inf 1 0 0 0 0 0 1"], "line 2", "finite"),
    (["-1 0 0 0 0 0 0 1", "1 1 0 0 0 0 0 1"], "line 1.t", "int32 seconds"),
    (["0 0 0 0 0 0 0 1", "1e19 1 0 0 0 0 0 1"], "line 2.t", "int32 seconds"),
    (["0 0 0 0 0 0 0 1", "1 1e300 0 0 0 0 0 1"], "line 2", "<= 1e+07 m"),
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
    (["--duration", "-1"], "--duration", "finite seconds >= 1e-9"),
    (["--duration", "1e-12"], "--duration", "finite seconds >= 1e-9"),  # 0 ns: an empty run
    (["--duration", "inf"], "--duration", "finite seconds"),
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


BILLION_LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi")
)
# few aliases, each a big list: caught by the expanded size, not the alias count
WIDE_LAUGHS = "a: &a [" + ", ".join(["x"] * 2000) + "]\nb: [" + ", ".join(["*a"] * 60) + "]\n"
RAW_CASES = [
    (b"name: rover\nname: other\n", "line 2: got 'name'", "each key once in a mapping"),
    (
        b"sensors:\n  imu:\n    rate_hz: 1\n    rate_hz: 2\n",
        "line 4: got 'rate_hz'",
        "(first at line 3)",
    ),
    (BILLION_LAUGHS.encode(), "line 9: got '65 aliases'", "at most 64 *alias uses"),
    (WIDE_LAUGHS.encode(), "line 1: got '122065 values once aliases", "at most 100000"),
    (b"a: " + b"[" * 5000 + b"]" * 5000 + b"\n", "line 1: got 'depth 33'", "at most 32 deep"),
    (
        b"a: " + b"{b: " * 200 + b"1" + b"}" * 200 + b"\n",
        "line 1: got 'depth 33'",
        "at most 32 deep",
    ),
    (b"\xff\xfe" + b"name: rover\n", "line 1: got b'\\xff\\xfe", "expected UTF-8 text"),
    (b"# caf\xe9\nname: rover\n", "line 1: got b'\\xe9", "expected UTF-8 text"),
]


@pytest.mark.parametrize(("raw", "where", "allowed"), RAW_CASES)
def test_yaml_refusals_name_the_line(tmp_path: Path, capsys, raw, where, allowed) -> None:
    """Duplicate keys, alias bombs, deep nesting and non-UTF-8 input: refused by the YAML
    loader (simconform/errors.py) with the file and line, before anything is expanded."""
    spec = tmp_path / "raw.yaml"
    spec.write_bytes(raw)
    out = tmp_path / "out"
    code, stdout, err = run_main(["run", "--spec", str(spec), "--out", str(out)], capsys)
    assert code == 2, err
    assert err.count("\n") == 1 and f"raw.yaml: {where}" in err and allowed in err, err
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


def test_exponent_floats_are_numbers(tmp_path: Path) -> None:
    """YAML 1.2's 1e-3 is a number (PyYAML's YAML 1.1 would read a string, now refused)."""
    data = mutate(demo_spec(), "sensors.lidar.noise.range.sigma", 0.0)
    text = yaml.safe_dump(data).replace("sigma: 0.0", "sigma: 1e-3", 1)
    (tmp_path / "spec.yaml").write_text(text)
    assert load_yaml(tmp_path / "spec.yaml")["sensors"]["lidar"]["noise"]["range"]["sigma"] == 0.001
    assert load_spec(tmp_path / "spec.yaml").sensors["lidar"].noise.range.sigma == 0.001
    # and what simconform writes (campaign variants, import-sdf) reads back the same
    data = {"name": "1e3", "sigma": 2e5, "odd": "._e3"}
    (tmp_path / "written.yaml").write_text(dump_yaml(data))
    assert load_yaml(tmp_path / "written.yaml") == data
