"""Cameras judged in a worker process (verify/parallel.py) give the report one reader gives."""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import pytest

from conftest import DEMO_SPEC
from simconform import budget
from simconform.errors import UserError
from simconform.spec import load_spec
from simconform.verify import parallel, verifier


def _report(run: Path, parallel_on: bool, monkeypatch) -> dict:
    with monkeypatch.context() as m:
        if parallel_on:
            m.setattr(budget, "OFFLOAD_BYTES", 0)  # the 3 s run's camera is worth a worker
        else:
            m.setattr(parallel, "offload", lambda spec, manifest: ())
        report = verifier.verify_run(run, write=False)
    report.pop("provenance")
    return report


@pytest.mark.parametrize("damage", [None, "bag/bag.mcap", "gt/lidar.tum", "bag/metadata.yaml"])
def test_camera_in_a_worker_gives_the_single_readers_report(
    short_run: Path, tmp_path: Path, monkeypatch, damage: str | None
) -> None:
    """The demo's first 3 s, intact, with a flipped byte in a late chunk of the bag (both
    readers then meet the damage and read again the checked way), or in a file only run.json's
    SHA-256 covers (which only the main process hashes): every verdict, value, interval, count
    and integrity finding is the single reader's."""
    run = tmp_path / "run"
    shutil.copytree(short_run, run, ignore=shutil.ignore_patterns("report"))
    damaged = damage is not None
    if damaged:
        path = run / damage
        data = bytearray(path.read_bytes())
        at = int(len(data) * 0.8)
        data[at] ^= 0x10 if damage.endswith(".mcap") else 0x01  # text: one character changed
        path.write_bytes(bytes(data))
    manifest = verifier.load_manifest(run)
    spec = verifier.Spec.model_validate(manifest["spec_content"])
    with monkeypatch.context() as m:
        m.setattr(budget, "OFFLOAD_BYTES", 0)
        assert parallel.offload(spec, manifest) == ("camera",)
    one = _report(run, False, monkeypatch)
    two = _report(run, True, monkeypatch)
    assert two == one
    assert (one["run"]["integrity"]["status"] == "damaged") is damaged


def test_a_short_run_stays_in_one_process(short_run: Path) -> None:
    manifest = verifier.load_manifest(short_run)
    spec = verifier.Spec.model_validate(manifest["spec_content"])
    assert parallel.offload(spec, manifest) == ()  # 30 frames: 28 MB of truth


def test_the_memory_estimate_counts_the_judging_process(monkeypatch) -> None:
    """The demo's 200 s: verify judges its camera in a second process, which the estimate
    adds to the verify phase (and says so); on one CPU it is not added."""
    spec = load_spec(DEMO_SPEC)
    end = 200 * 10**9
    est = budget.estimate(spec, 0, end, workers=2)
    assert any("second process" in n for n in est.notes)
    with monkeypatch.context() as m:
        m.setattr(budget.os, "sched_getaffinity", lambda pid: {0})
        single = budget.estimate(spec, 0, end, workers=2)
    assert est.verify_bytes - single.verify_bytes == budget.BASE_PROCESS
    assert est.memory_bytes == max(est.record_bytes + 2 * _worker(est), est.verify_bytes)
    assert not any("second process" in n for n in single.notes)


def test_the_verify_estimate_stops_growing_with_the_run() -> None:
    """The verifier keeps bounded state (verify/streaming.py, issue 17): the demo's verify
    estimate grows only until the reservoirs are full, then not at all, and the model's
    bounds are the verifier's own sizes."""
    from simconform.verify import pairing, robust, streaming

    assert budget.LIDAR_KEPT == 2 * robust.SAMPLE
    assert budget.SERIES_KEPT == streaming.SERIES_SAMPLE
    assert budget.HOLD_S * 1e9 == pairing.HOLD_SLACK_NS + pairing.HOLD_CHECK_NS
    spec = load_spec(DEMO_SPEC)
    runs = [budget.estimate(spec, 0, s * 10**9) for s in (200, 20_000, 200_000)]
    assert runs[2].verify_bytes == runs[1].verify_bytes  # every reservoir full
    assert runs[2].verify_bytes - runs[0].verify_bytes < 256 * budget.MiB
    assert runs[2].disk_bytes > 900 * runs[0].disk_bytes  # the bag does grow


def _worker(est) -> int:
    return budget.BASE_WORKER + sum(r.worker_bytes for r in est.sensors)


def test_user_errors_cross_processes_whole() -> None:
    err = UserError("bag/x.mcap", "/camera/image", 12, "expected one per capture")
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is UserError and str(back) == str(err)
    assert (back.file, back.field, back.value, back.allowed) == (
        err.file, err.field, err.value, err.allowed,
    )  # fmt: skip
