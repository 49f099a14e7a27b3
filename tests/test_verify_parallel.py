"""Cameras judged in a worker process (verify/parallel.py) give the report one reader gives."""

from __future__ import annotations

import json
import pickle
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import DEMO_SPEC
from simconform import budget
from simconform.errors import UserError
from simconform.spec import load_spec
from simconform.verify import pairing, parallel, reading, verifier


def _report(run: Path, parallel_on: bool, monkeypatch, jobs: int | None = None) -> dict:
    with monkeypatch.context() as m:
        if parallel_on:
            m.setattr(budget, "OFFLOAD_BYTES", 0)  # the 3 s run's camera is worth a worker
        else:
            m.setattr(budget, "offloaded", lambda spec, captures: ())
        report = verifier.verify_run(run, write=False, jobs=jobs)
    report.pop("provenance")
    return report


def _inputs(run: Path):
    """A run's manifest, spec and world origin, as verify_run reads them."""
    manifest = verifier.load_manifest(run)
    spec = verifier.Spec.model_validate(manifest["spec_content"])
    return manifest, spec, verifier.Origin.model_validate(manifest["world_content"]["origin"])


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
        assert budget.verify_readers(spec, manifest["captures"]) == 2
        assert budget.verify_readers(spec, manifest["captures"], jobs=1) == 1
    one = _report(run, False, monkeypatch)
    two = _report(run, True, monkeypatch)
    assert two == one
    assert _report(run, True, monkeypatch, jobs=1) == one  # --jobs 1: one worker reads it all
    assert (one["run"]["integrity"]["status"] == "damaged") is damaged


def test_jobs_0_verifies_without_another_process(short_run: Path, tmp_path: Path, monkeypatch):
    """`--jobs 0` keeps verification in-process, as it keeps recording: no reader is started
    and no figure is drawn in a fork, even where the camera would be worth a worker; the
    report and its figures are the ones the readers and the fork give."""
    run = tmp_path / "run"
    shutil.copytree(short_run, run, ignore=shutil.ignore_patterns("report"))
    monkeypatch.setattr(budget, "OFFLOAD_BYTES", 0)
    two = verifier.verify_run(run)
    figures = {p.name: p.read_bytes() for p in (run / "report").glob("*.png")}
    assert len(figures) >= 2

    def refused(*_args, **_kwargs):
        raise AssertionError("--jobs 0 started a process")

    monkeypatch.setattr(parallel, "ProcessPoolExecutor", refused)
    monkeypatch.setattr("simconform.verify.figures.os.fork", refused)
    none = verifier.verify_run(run, jobs=0)
    assert {p.name: p.read_bytes() for p in (run / "report").glob("*.png")} == figures
    for report in (two, none):
        report.pop("provenance")
    assert none == two


class _Counted:
    """A Progress that keeps what it was told."""

    def __init__(self) -> None:
        self.seen: list[int] = []
        self.closed = False

    def update(self, done: int) -> None:
        self.seen.append(done)

    def close(self) -> None:
        self.closed = True


def test_the_readers_progress_reaches_this_processs_bar(short_run: Path, monkeypatch) -> None:
    """Both readers count their samples into shared memory; the bar of the process that
    started them shows the sum, last after both are done (each reader counts every 50th)."""
    monkeypatch.setattr(budget, "OFFLOAD_BYTES", 0)
    manifest, spec, origin = _inputs(short_run)
    bar = _Counted()
    found, accs, _ = parallel.read_parallel(short_run, manifest, spec, origin, 0.95, bar)
    total = sum(manifest["captures"].values())
    assert set(accs) == set(spec.sensors) and found.nothing_judged is False
    assert bar.closed and bar.seen == sorted(bar.seen)
    assert 0 < bar.seen[-1] <= total


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        if entry.name.isdigit() and f"\nPPid:\t{pid}\n" in status:
            out.append(int(entry.name))
    return out


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads the readers' pids from /proc")
def test_ctrl_c_while_the_readers_read_ends_both(short_run: Path, monkeypatch) -> None:
    """Ctrl-C in the verifying process while both readers read (raised here from the call
    made right after they start): the interrupt reaches the caller and neither reader is
    left running (verify/parallel.py ends them before the interrupt leaves it)."""
    from multiprocessing import forkserver

    from simconform.lifeline import VERIFY_PRELOAD, start_fork_server

    monkeypatch.setattr(budget, "OFFLOAD_BYTES", 0)
    manifest, spec, origin = _inputs(short_run)
    start_fork_server(VERIFY_PRELOAD)  # this process's server (an earlier test's, or a new one)
    server = forkserver._forkserver._forkserver_pid
    before = set(_children(server))
    seen: list[int] = []

    def interrupt() -> None:
        deadline = time.monotonic() + 60
        while len(seen) < 2 and time.monotonic() < deadline:  # both readers started
            seen[:] = sorted(set(_children(server)) - before)
            time.sleep(0.005)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        parallel.read_parallel(short_run, manifest, spec, origin, 0.95, False, interrupt)
    assert len(seen) == 2
    assert not [pid for pid in seen if Path(f"/proc/{pid}").exists()]


def test_the_reporting_process_loads_no_numba(short_run: Path, tmp_path: Path) -> None:
    """With both readers in workers, the process that judges and writes the report never
    imports numba or LLVM (verify/sums.py): 34 MB of its memory and 65-100 MB of the
    library's pages (docs/verification.md#three-processes-for-a-camera-run). The report is
    the single reader's."""
    run = tmp_path / "run"
    shutil.copytree(short_run, run, ignore=shutil.ignore_patterns("report"))
    script = (
        "import sys, json\n"
        "from simconform import budget\n"
        "budget.OFFLOAD_BYTES = 0\n"
        "from simconform.verify.verifier import verify_run\n"
        f"report = verify_run({str(run)!r})\n"
        "print(json.dumps([report['verdict'], 'numba' in sys.modules, "
        "'llvmlite' in sys.modules, 'matplotlib' in sys.modules]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=tmp_path
    )
    verdict, numba, llvm, mpl = json.loads(out.stdout.strip().splitlines()[-1])
    assert (numba, llvm) == (False, False)
    assert (
        mpl and verdict == json.loads((short_run / "report" / "report.json").read_text())["verdict"]
    )


def test_a_short_run_stays_in_one_process(short_run: Path) -> None:
    manifest = verifier.load_manifest(short_run)
    spec = verifier.Spec.model_validate(manifest["spec_content"])
    assert parallel.offload(spec, manifest) == ()  # 30 frames: 28 MB of truth


def test_the_memory_estimate_counts_the_judging_process(monkeypatch) -> None:
    """The demo's 200 s: verify reads its bag in two worker processes, which the estimate
    adds to the verify phase (and says so); on one CPU they are not added."""
    spec = load_spec(DEMO_SPEC)
    end = 200 * 10**9
    est = budget.estimate(spec, 0, end, workers=2)
    assert any("two worker processes" in n for n in est.notes)
    with monkeypatch.context() as m:
        m.setattr(budget.os, "sched_getaffinity", lambda pid: {0})
        single = budget.estimate(spec, 0, end, workers=2)
    assert est.verify_bytes - single.verify_bytes == 2 * budget.BASE_WORKER
    assert est.memory_bytes == max(est.record_bytes + 2 * _worker(est), est.verify_bytes)
    assert not any("two worker processes" in n for n in single.notes)
    # --jobs bounds the readers: 1 reads every sensor in one worker, 0 in this process
    one = budget.estimate(spec, 0, end, workers=1, jobs=1)
    none = budget.estimate(spec, 0, end, jobs=0)
    assert est.verify_bytes - one.verify_bytes == budget.BASE_WORKER
    assert any("every sensor in one worker process" in n for n in one.notes)
    assert none.verify_bytes == single.verify_bytes
    assert not any("verify reads" in n for n in none.notes)


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


@pytest.mark.parametrize("damage", [None, "bag/bag.mcap"])
def test_the_cameras_read_ahead_gives_the_same_report(
    short_run: Path, tmp_path: Path, monkeypatch, damage: str | None
) -> None:
    """A camera's reader reads and deserializes in a thread ahead of its decoding and pairing
    (verify/pairing.py _ahead): every verdict, value, interval, count and integrity finding is
    that of reading in order in one thread, on the intact run and with a flipped byte in a
    late chunk (the one-pass reader meets it mid-read and the bag is read again, checked)."""
    run = tmp_path / "run"
    shutil.copytree(short_run, run, ignore=shutil.ignore_patterns("report"))
    if damage is not None:
        path = run / damage
        data = bytearray(path.read_bytes())
        data[int(len(data) * 0.8)] ^= 0x10
        path.write_bytes(bytes(data))
    assert reading.READ_AHEAD > 0
    ahead = _report(run, False, monkeypatch)
    monkeypatch.setattr(reading, "READ_AHEAD", 0)
    assert _report(run, False, monkeypatch) == ahead


def test_read_ahead_keeps_order_raises_in_order_and_stops_its_thread() -> None:
    def items(n: int, fail_at: int | None = None):
        try:
            for i in range(n):
                if i == fail_at:
                    raise OSError(f"bad {i}")
                yield i
        finally:
            closed.append(n)

    closed: list[int] = []
    assert list(pairing._ahead(items(50), 3)) == list(range(50))
    got = []
    with pytest.raises(OSError, match="bad 7"):
        for x in pairing._ahead(items(50, fail_at=7), 2):
            got.append(x)
    assert got == list(range(7))
    stream = pairing._ahead(items(10_000), 4)
    assert [next(stream) for _ in range(5)] == list(range(5))
    stream.close()  # the caller stops early: the thread stops and closes its source
    assert closed == [50, 50, 10_000]
    assert not any(t.name == "simconform-read-ahead" for t in threading.enumerate())


def test_an_error_while_judging_stops_the_read_ahead_before_the_bag_closes(
    short_run: Path, monkeypatch
) -> None:
    """A camera frame that fails its check ends the reading with a UserError; the read-ahead
    thread has stopped by then (the bag is closed right after), not when the error is freed."""
    from simconform.verify import camera

    seen = []

    def add(self, item) -> None:
        seen.append(item.stamp_ns)
        if len(seen) >= 3:  # the one-pass reading raises, then the checked one again
            raise ValueError("a bad frame")

    monkeypatch.setattr(camera.CameraAccumulator, "add", add)
    manifest, spec, origin = _inputs(short_run)
    with pytest.raises(UserError, match="a bad frame") as err:
        reading.read_run(short_run, manifest, spec, origin, 0.95, False, ("camera",))
    assert not any(t.name == "simconform-read-ahead" for t in threading.enumerate())
    assert err.value.field == "/camera/image/compressed" and len(seen) == 4
