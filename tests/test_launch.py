"""The command's first step (simconform/launch.py): the fork server it starts early is the
one the pools would start, and the `simconform` script users run works end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import default_sigint
from simconform import launch, lifeline
from simconform.registry import BACKENDS


@pytest.fixture
def two_cpus(monkeypatch) -> None:
    monkeypatch.setattr(launch, "usable_cpus", lambda: 2)


def test_a_run_starts_the_capture_pools_server(two_cpus) -> None:
    capture = lifeline.capture_preload("reference", BACKENDS["reference"])
    for argv in (["run"], ["run", "--jobs", "2"], ["run", "--backend=reference", "--seed", "3"]):
        assert launch.early_preload(argv) == capture
    assert launch.early_preload(["verify", "runs/demo"]) == lifeline.VERIFY_PRELOAD


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["run", "--jobs", "0"],
        ["run", "--jobs=0"],
        ["run", "--dry-run"],
        ["run", "--help"],
        ["run", "--backend", "mujoco"],
        ["plan"],
        ["campaign", "run", "examples/campaign.yaml"],
    ],
)
def test_no_server_where_no_worker_will_start(two_cpus, argv: list[str]) -> None:
    assert launch.early_preload(argv) is None


@pytest.mark.parametrize(
    ("kinds", "server"),
    [(["lidar", "camera", "imu"], True), (["lidar", "imu"], False), (["camera"], False)],
)
def test_verify_starts_a_server_only_for_a_camera_beside_other_sensors(
    two_cpus, tmp_path: Path, kinds: list[str], server: bool
) -> None:
    """verify judges a camera in a worker only beside other sensors (budget.offloaded): the
    run's manifest says which it holds; where it cannot tell, the server is started."""
    sensors = {f"s{i}": {"type": k} for i, k in enumerate(kinds)}
    (tmp_path / "run.json").write_text(json.dumps({"spec_content": {"sensors": sensors}}))
    want = lifeline.VERIFY_PRELOAD if server else None
    assert launch.early_preload(["verify", str(tmp_path)]) == want
    assert launch.early_preload(["verify", "--confidence", "0.9", str(tmp_path)]) == want
    assert launch.early_preload(["verify", str(tmp_path), "--json"]) == want
    assert launch.early_preload(["verify", "--jobs", "1", str(tmp_path)]) == want
    assert launch.early_preload(["verify", "--jobs", "0", str(tmp_path)]) is None  # in-process
    assert launch.early_preload(["verify", "--jobs=00", str(tmp_path)]) is None
    (tmp_path / "run.json").write_text("{not json")
    assert launch.early_preload(["verify", str(tmp_path)]) == lifeline.VERIFY_PRELOAD
    assert launch.early_preload(["verify", str(tmp_path / "nothing")]) == lifeline.VERIFY_PRELOAD


def test_one_cpu_starts_no_server(monkeypatch) -> None:
    monkeypatch.setattr(launch, "usable_cpus", lambda: 1)
    assert launch.early_preload(["run"]) is None


def test_the_simconform_script_runs_the_demo(tmp_path: Path) -> None:
    """The installed `simconform` script (what the README runs), default flags but a 3 s run:
    its early fork server serves the run's capture workers."""
    script = Path(sys.executable).parent / "simconform"
    assert script.exists(), "the package's console script is installed beside the interpreter"
    out = tmp_path / "demo"
    proc = subprocess.run(
        [str(script), "run", "--out", str(out), "--duration", "3", "--quiet", "--no-progress"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    manifest = json.loads((out / "run.json").read_text())
    assert manifest["complete"] and manifest["state"] == "finished"
    verdict = json.loads((out / "report" / "report.json").read_text())["verdict"]
    assert verdict in ("pass", "inconclusive"), proc.stdout  # 3 s: some metrics undecided
    assert proc.returncode == (0 if verdict == "pass" else 1), proc.stderr


def test_the_fork_server_starts_with_ctrl_c_ignored() -> None:
    """It imports its preload before it ignores SIGINT itself: a Ctrl-C in a command's first
    second printed a KeyboardInterrupt traceback from there. The command keeps its handler."""
    code = (
        "import signal\n"
        "from multiprocessing import forkserver\n"
        "from simconform import lifeline\n"
        "lifeline.start_fork_server(lifeline.VERIFY_PRELOAD)\n"
        "pid = forkserver._forkserver._forkserver_pid\n"
        "status = open(f'/proc/{pid}/status').read()\n"
        "ign = next(int(l.split()[1], 16) for l in status.splitlines() if l.startswith('SigIgn'))\n"
        "print(bool(ign >> (signal.SIGINT - 1) & 1))\n"
        "print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        preexec_fn=default_sigint,  # a background job (CI's) starts with SIGINT ignored
    )
    assert out.stdout.split() == ["True", "True"], out.stderr
