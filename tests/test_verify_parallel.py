"""Cameras judged in a worker process (verify/parallel.py) give the report one reader gives."""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import pytest

from simconform.errors import UserError
from simconform.verify import parallel, verifier


def _report(run: Path, parallel_on: bool, monkeypatch) -> dict:
    with monkeypatch.context() as m:
        if parallel_on:
            m.setattr(parallel, "OFFLOAD_BYTES", 0)  # the 3 s run's camera is worth a worker
        else:
            m.setattr(parallel, "offload", lambda spec, manifest: ())
        report = verifier.verify_run(run, write=False)
    report.pop("provenance")
    return report


@pytest.mark.parametrize("damaged", [False, True])
def test_camera_in_a_worker_gives_the_single_readers_report(
    short_run: Path, tmp_path: Path, monkeypatch, damaged: bool
) -> None:
    """The demo's first 3 s, intact and with a flipped byte in a late chunk (both readers
    then meet the damage and read again the checked way): every verdict, value, interval,
    count and integrity finding is the single reader's."""
    run = tmp_path / "run"
    shutil.copytree(short_run, run, ignore=shutil.ignore_patterns("report"))
    if damaged:
        bag = run / "bag" / "bag.mcap"
        data = bytearray(bag.read_bytes())
        at = int(len(data) * 0.8)
        data[at] ^= 0x10
        bag.write_bytes(bytes(data))
    manifest = verifier.load_manifest(run)
    spec = verifier.Spec.model_validate(manifest["spec_content"])
    with monkeypatch.context() as m:
        m.setattr(parallel, "OFFLOAD_BYTES", 0)
        assert parallel.offload(spec, manifest) == ("camera",)
    one = _report(run, False, monkeypatch)
    two = _report(run, True, monkeypatch)
    assert two == one
    assert (one["run"]["integrity"]["status"] == "damaged") is damaged


def test_a_short_run_stays_in_one_process(short_run: Path) -> None:
    manifest = verifier.load_manifest(short_run)
    spec = verifier.Spec.model_validate(manifest["spec_content"])
    assert parallel.offload(spec, manifest) == ()  # 30 frames: 28 MB of truth


def test_user_errors_cross_processes_whole() -> None:
    err = UserError("bag/x.mcap", "/camera/image", 12, "expected one per capture")
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is UserError and str(back) == str(err)
    assert (back.file, back.field, back.value, back.allowed) == (
        err.file, err.field, err.value, err.allowed,
    )  # fmt: skip
