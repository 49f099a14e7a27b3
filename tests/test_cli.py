"""The command line itself: --version, `simconform backends` and `doctor` answering before a
long run, and the habits scripts rely on (--json, --quiet, progress lines on a pipe)."""

from __future__ import annotations

import ctypes.util
import hashlib
import importlib.metadata as md
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import cli, one_error_line
from simconform import __version__
from simconform.registry import BACKENDS


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


def _cli_env(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """The real entry point with stderr a pipe (as in CI) and progress lines every 10 %."""
    return cli(*args, timeout=timeout, env={"SIMCONFORM_PROGRESS_INTERVAL_S": "0"})


def test_doctor_lists_backends_and_components_with_versions() -> None:
    r = _cli_env("doctor", "--json", "--no-capture")
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout)  # nothing but the JSON on stdout
    backends = {f["name"]: f for f in doc["backends"]}
    assert set(backends) == set(BACKENDS) and backends["reference"]["found"]
    parts = {f["name"]: f for f in doc["components"]}
    for dist in ("mujoco", "ray", "kiss-icp"):
        assert parts[dist]["found"] and parts[dist]["detail"] == f"{dist} {md.version(dist)}"
    osmesa = ctypes.util.find_library("OSMesa")
    assert parts["OSMesa"]["found"] == (osmesa is not None)
    assert parts["OSMesa"]["found"] or parts["OSMesa"]["install"] == "apt-get install libosmesa6"
    gz = parts["Gazebo Harmonic"]
    assert gz["found"] == (shutil.which("gz") is not None and "not found" not in gz["detail"])
    # MUJOCO_GL as the user left it: simconform's own choice is not "(set)"
    if "MUJOCO_GL" not in os.environ:
        assert "(default here:" in parts["MUJOCO_GL"]["detail"], parts["MUJOCO_GL"]
    r = cli("doctor", "--json", "--no-capture", env={"MUJOCO_GL": "egl"})
    assert json.loads(r.stdout)["components"], r.stderr
    gl = next(f for f in json.loads(r.stdout)["components"] if f["name"] == "MUJOCO_GL")
    assert gl["detail"] == "egl (set)"


def test_doctor_probes_the_reference_backend_with_a_capture() -> None:
    r = _cli_env("doctor")
    rows = {line.split("│")[1].strip(): line for line in r.stdout.splitlines() if "│" in line}
    assert "yes" in rows["reference"] and "lidar and camera captured" in rows["reference"]
    assert r.stdout.rstrip().splitlines()[-1].startswith(("missing: ", "nothing missing"))


def test_verify_json_quiet_and_progress_for_scripts(short_run: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(short_run, run)
    expected = json.loads((short_run / "report" / "report.json").read_text())["verdict"]
    r = _cli_env("verify", str(run), "--json")
    out = json.loads(r.stdout)  # stdout is the JSON alone: no table, no library warnings
    assert out["verdict"] == expected and out["exit_code"] == r.returncode
    assert out["report"] == str(run / "report" / "report.json")
    assert out["sensors"]["lidar"]["range_std"]["verdict"] in ("pass", "inconclusive")
    assert sum(out["counts"]["total"].values()) == sum(len(s) for s in out["sensors"].values())
    assert re.search(r"^simconform: verifying +\d+ %", r.stderr, re.M), r.stderr
    assert r.stderr.splitlines()[-1].startswith("simconform: verifying 100 % ("), r.stderr
    q = _cli_env("verify", str(run), "--quiet")
    assert q.returncode == r.returncode and q.stdout == "" and q.stderr == ""


def test_run_json_is_the_only_thing_on_stdout(tmp_path: Path) -> None:
    """`run --json`: stdout parses as one JSON object (no table, no library output), the
    capture and verify progress go to stderr as plain lines, the exit code is the verdict's."""
    out = tmp_path / "r"
    r = _cli_env("run", "--duration", "3", "--out", str(out), "--json", "--jobs", "0")
    doc = json.loads(r.stdout)
    report = json.loads((out / "report" / "report.json").read_text())
    assert doc["verdict"] == report["verdict"] and r.returncode == doc["exit_code"]
    assert doc["not_checked"] == report["summary"]["not_checked"]
    progress = [line for line in r.stderr.splitlines() if line.startswith("simconform: ")]
    assert any("capturing" in line for line in progress)
    assert any("verifying" in line for line in progress)
    assert all(line.startswith("simconform: ") for line in r.stderr.splitlines()), r.stderr


def test_doctor_without_capture_agrees_with_the_components_on_gazebo() -> None:
    """`doctor --no-capture` said the gazebo backend was found where Gazebo was not: its
    adapter loads without the engine."""
    from simconform.adapters.gazebo.transport import missing_pieces
    from simconform.doctor import backend_findings, components

    (backend,) = backend_findings(["gazebo"], capture=False)
    part = next(f for f in components() if f.name == "Gazebo Harmonic")
    assert backend.found == part.found == (not missing_pieces())
    assert ("not found" in backend.detail) == (not backend.found)


def test_a_cold_numba_cache_is_told_before_the_first_run(short_run: Path, tmp_path, monkeypatch):
    """The first run after an install compiles for a minute or more with no progress line; it
    now says so first. short_run (the demo spec) has compiled its kernels into this session's
    cache."""
    from simconform.cli.kernels import kernels_cached, needed

    demo = needed("reference", ("lidar", "camera", "imu", "gnss", "odom"))
    assert (short_run / "run.json").is_file() and kernels_cached(demo)
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))  # where numba would cache instead
    assert not kernels_cached(demo)
    # one kernel cached is not all of them (`plan`, or a lidar-only run, compiles only some):
    # seen as a run compiling for 6 minutes without a word
    spec = importlib.util.find_spec("simconform")
    assert spec is not None and spec.submodule_search_locations
    src = Path(spec.submodule_search_locations[0])
    index = next((src / "__pycache__").glob("bvh._build-*.nbi"))
    copy = tmp_path / "simconform" / index.name
    copy.parent.mkdir()
    copy.write_bytes(index.read_bytes())
    assert kernels_cached(["simconform.bvh._build"]) and not kernels_cached(demo)
    # an index numba would find stale (an upgrade changed the source) does not count: numba
    # keys it by the source's SHA-256
    digest = hashlib.sha256((src / "bvh.py").read_bytes()).digest()
    assert digest in copy.read_bytes()
    copy.write_bytes(index.read_bytes().replace(digest, bytes(32)))
    assert not kernels_cached(["simconform.bvh._build"])


def test_the_kernels_looked_at_are_cached_numba_functions() -> None:
    """Each name in cli/kernels.KERNELS is a numba function of its module cached on disk
    (a renamed kernel would otherwise be looked for forever, and the note said every run)."""
    import importlib

    from simconform.cli.kernels import KERNELS

    for names in KERNELS.values():
        for name in names:
            module, _, function = name.rpartition(".")
            kernel = getattr(importlib.import_module(module), function)
            assert type(kernel._cache).__name__ == "FunctionCache", name


def test_a_bad_option_value_is_one_line_with_the_value(tmp_path: Path) -> None:
    """click's own refusal named the option but not the value, in pydantic's words, under a
    usage block; it is now simconform's one line, exit 2, nothing written."""
    out = tmp_path / "o"
    for args, want in (
        (["run", "--seed", "1.5"], "--seed: got '1.5'; expected a whole number"),
        (["run", "--confidence=x"], "--confidence: got 'x'; expected a number"),
        (
            ["localize", str(tmp_path), "--segment", "0.5"],
            "--segment: got '0.5'; expected a value greater than or equal to 1",
        ),
    ):
        res = cli(*args, "--out", str(out))
        assert res.returncode == 2 and one_error_line(res.stderr).endswith(want), res.stderr
        assert "Usage:" not in res.stderr and not out.exists()


@pytest.mark.parametrize("args", [["doctor"], ["backends", "reference"]])
def test_a_probe_that_will_compile_says_so_first(args: list[str], tmp_path: Path) -> None:
    """doctor and backends probe with a real capture: after an install that compiled for two
    minutes with no word, and read as a slow backend."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "simconform.cli", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)},  # an empty cache
    )
    try:
        assert proc.stderr is not None
        first = proc.stderr.readline()
    finally:
        proc.kill()
        proc.wait()
    assert first.startswith("simconform: compiling the numba kernels first"), first
