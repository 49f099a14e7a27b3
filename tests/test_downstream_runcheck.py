"""`export` and `localize` read a run as `verify` does (downstream/runcheck.py): refused while
`simconform run` still records it, damage and interruptions named as verify names them
(`integrity` in export.json / localization.json, stderr, exit 4), and a run file the user
cannot read refused naming that file, with nothing left in --out. Real runs and real bags,
damaged the way disks and copies damage them."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from export_world import make_run

from conftest import cli

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def lot(tmp_path_factory) -> Path:
    """A 2 s run: lidar and camera, 19 exportable sweeps, verified inconclusive (too short)."""
    return make_run(tmp_path_factory.mktemp("lot"))


def _damage(run: Path, dest: Path, how: str) -> Path:
    """A copy of `run` whose MCAP bag has one byte flipped mid-file, or is cut in half."""
    shutil.copytree(run, dest)
    bag = dest / "bag" / "bag.mcap"
    if how == "cut":
        os.truncate(bag, bag.stat().st_size // 2)
    else:
        data = bytearray(bag.read_bytes())
        data[len(data) // 2] ^= 0xFF
        bag.write_bytes(data)
    return dest


def _integrity_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith("integrity: damaged:")]


@pytest.mark.parametrize("how", ["flip", "cut"])
def test_a_damaged_bag_is_named_as_verify_names_it(lot: Path, tmp_path: Path, how: str) -> None:
    """verify exits 4 on the damaged copy; export (and localize, on the flipped byte) exit 4
    too, leave the damaged chunk's sweeps out and record the very gaps verify's report lists."""
    run = _damage(lot, tmp_path / "run", how)
    v = cli("verify", str(run))
    assert v.returncode == 4, v.stdout + v.stderr
    gaps = json.loads((run / "report" / "report.json").read_text())["run"]["integrity"]["gaps"]
    assert any(g["kind"] == "damaged" for g in gaps)
    res = cli("export", str(run), "--format", "kitti", "--out", str(tmp_path / "k"))
    assert res.returncode == 4, res.stdout + res.stderr
    assert "Traceback" not in res.stderr
    r = json.loads((tmp_path / "k" / "export.json").read_text())
    integ = r["integrity"]
    assert integ["scope"] == "intact part only" and integ["status"] == "damaged"
    assert integ["gaps"] == gaps and integ["outputs_changed"] == ["bag/bag.mcap"]
    assert _integrity_lines(res.stderr) == _integrity_lines(v.stderr) != []
    assert r["scans"] < 19  # the intact run exports 19 (tests/test_export.py)
    if how == "cut":
        assert integ["bag_truncated"] and "cut off" in integ["bag_truncated"]
        return
    assert "CRC mismatch" in "\n".join(integ["findings"])
    loc = cli("localize", str(run), "--out", str(tmp_path / "loc"))
    assert loc.returncode == 4, loc.stdout + loc.stderr
    assert _integrity_lines(loc.stderr) == _integrity_lines(v.stderr)
    lj = json.loads((tmp_path / "loc" / "localization.json").read_text())
    assert lj["integrity"]["gaps"] == gaps and lj["verdict"] == "not_applicable"
    assert "Of the intact part only" in (tmp_path / "loc" / "localization.md").read_text()


def test_an_intact_run_is_exported_whole(lot: Path, tmp_path: Path) -> None:
    res = cli("export", str(lot), "--format", "kitti", "--out", str(tmp_path / "k"))
    assert res.returncode == 0 and "integrity" not in res.stderr, res.stderr
    integ = json.loads((tmp_path / "k" / "export.json").read_text())["integrity"]
    assert integ["scope"] == "whole run" and integ["state"] == "finished"
    assert integ["status"] == "intact" and integ["bag_truncated"] is None


def test_an_unreadable_bag_is_named_and_nothing_written(lot: Path) -> None:
    """bag.mcap mode 000, read by a user who may not read it (where the tests run as root,
    without the capabilities that let root read any file): exit 2 naming the bag, not --out,
    and no --out left behind."""
    root = Path(tempfile.mkdtemp(prefix="simconform-unreadable-"))
    try:
        root.chmod(0o755)
        run = root / "run"
        shutil.copytree(lot, run)
        (run / "bag" / "bag.mcap").chmod(0)
        outs = root / "outs"
        outs.mkdir()
        outs.chmod(0o777)
        as_user = []
        if os.geteuid() == 0:  # root without the capabilities that read and write any file
            drop = "-dac_override,-dac_read_search"
            as_user = ["setpriv", f"--bounding-set={drop}", f"--inh-caps={drop}"]
        for args in (
            ("export", str(run), "--format", "kitti", "--out", str(outs / "x")),
            ("localize", str(run), "--out", str(outs / "y")),
        ):
            res = subprocess.run(
                [*as_user, sys.executable, "-m", "simconform.cli", *args],
                capture_output=True,
                text=True,
                timeout=300,
                cwd=root,
                env={**os.environ, "HOME": str(outs), "MPLCONFIGDIR": str(outs)},
                check=False,
            )
            assert res.returncode == 2, res.stdout + res.stderr
            assert res.stderr.startswith(f"simconform: error: {run / 'bag' / 'bag.mcap'}: read")
            assert "Permission denied" in res.stderr and "--out" not in res.stderr
            assert "Traceback" not in res.stderr
        assert sorted(p.name for p in outs.iterdir()) == []
    finally:
        (root / "run" / "bag" / "bag.mcap").chmod(0o644)
        shutil.rmtree(root, ignore_errors=True)


def _state(run: Path) -> str | None:
    try:
        return json.loads((run / "run.json").read_text()).get("state")
    except (OSError, ValueError):
        return None


def test_a_run_still_recording_is_refused_then_its_interruption_recorded(tmp_path: Path) -> None:
    """While `simconform run` writes DIR, export and localize exit 2 naming the writer and
    write nothing (docs/refusals.md); once it is interrupted (SIGINT), both read what it
    recorded, say it was interrupted (stderr, `integrity`) and exit 4, as verify does."""
    run = tmp_path / "run"
    proc = subprocess.Popen(  # the demo, in-process capture: minutes of recording to refuse in
        [sys.executable, "-m", "simconform.cli", "run", "--out", str(run), "--duration", "200",
         "--jobs", "0"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 180
        while _state(run) != "recording" and proc.poll() is None:
            assert time.monotonic() < deadline, "the run never started recording"
            time.sleep(0.5)
        for args, out in (
            (("export", str(run), "--format", "kitti"), tmp_path / "k"),
            (("localize", str(run)), tmp_path / "loc"),
        ):
            res = cli(*args, "--out", str(out))
            assert res.returncode == 2, res.stdout + res.stderr
            assert f"DIR: got '{run}'; is being written by pid {proc.pid}" in res.stderr
            assert not out.exists()
        assert proc.poll() is None  # the refusals came while it was recording
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert _state(run) == "interrupted"
    for args, out, name in (
        (("export", str(run), "--format", "kitti"), tmp_path / "k", "export.json"),
        (("localize", str(run)), tmp_path / "loc", "localization.json"),
    ):
        res = cli(*args, "--out", str(out))
        assert res.returncode == 4, res.stdout + res.stderr
        assert "integrity: interrupted at t = " in res.stderr and "(SIGINT)" in res.stderr
        integ = json.loads((out / name).read_text())["integrity"]
        assert integ["state"] == "interrupted" and integ["scope"] == "recorded part only"
        assert integ["findings"][0].startswith("interrupted at t = ")
