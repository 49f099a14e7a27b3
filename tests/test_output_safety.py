"""Output safety, the resource estimate and workers that die with their parent, on real parts:
real `simconform` subprocesses, real locks, real signals, real read-only and full file
systems (a tmpfs where this machine lets us mount one; chmod for a non-root user; a file size
limit everywhere), real symlinks.
"""

from __future__ import annotations

import fcntl
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml
from test_launch import default_sigint

from conftest import (
    DEMO_TRAJECTORY,
    DEMO_WORLD,
    REPO,
    cli,
    demo_spec,
    one_error_line,
    write_yaml,
)
from simconform.adapters.base import EngineError
from simconform.adapters.reference import ReferenceBackend
from simconform.budget import estimate
from simconform.errors import UserError
from simconform.lifeline import alive, scratch_dir
from simconform.outdir import BOOK, check_target, claim, foreign_paths
from simconform.spec import Spec

CORE = str(REPO / "sensors_spec" / "rover_core.yaml")  # the demo without its camera: quick


def popen(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "simconform.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


# Linux carries a process's peak RSS across exec, and a child forked from this test process
# starts from this process's RSS (hundreds of MB late in a full suite). A small intermediate
# Python runs the command instead, so the command's own peak is what gets measured.
_MEASURE = (
    "import resource, subprocess, sys, time\n"
    "t = time.monotonic()\n"
    "p = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,\n"
    "                   text=True)\n"
    "u = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
    "sys.stderr.write(p.stderr)\n"
    "print(p.returncode, u.ru_maxrss * 1024, time.monotonic() - t)\n"
)


def measured(*args: str) -> tuple[int, int, float, str]:
    """(exit code, peak RSS in bytes, wall seconds, stderr) of `simconform ARGS`."""
    r = subprocess.run(
        [sys.executable, "-c", _MEASURE, sys.executable, "-m", "simconform.cli", *args],
        capture_output=True,
        text=True,
        check=True,
    )
    code, peak, wall = r.stdout.split()
    return int(code), int(peak), float(wall), r.stderr


def wait_for(what, timeout: float = 90.0, step: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = what()
        if value:
            return value
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def wait_while_running(proc: subprocess.Popen, what, timeout: float = 90.0):
    """wait_for, failing at once (with the process's stderr) if `proc` exits first."""

    def check():
        if proc.poll() is not None:
            raise AssertionError(f"exited with {proc.returncode}: {proc.stderr.read()[-2000:]}")
        return what()

    return wait_for(check, timeout)


def descendants(pid: int) -> set[int]:
    """Every live process below `pid` (from /proc)."""
    parent: dict[int, int] = {}
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                parent[int(p.name)] = int((p / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    out, frontier = set(), {pid}
    while frontier:
        frontier = {c for c, pp in parent.items() if pp in frontier and c not in out}
        out |= frontier
    return {p for p in out if alive(p)}


def listing(d: Path) -> dict[str, int]:
    """Every file below `d` (bookkeeping aside) with its mtime."""
    return {
        str(p.relative_to(d)): p.lstat().st_mtime_ns
        for p in sorted(d.rglob("*"))
        if ".simconform" not in p.parts and not p.is_dir()
    }


@contextmanager
def tmpfs(path: Path, size: str, ro: bool = False):
    """A real tmpfs at `path`, or a skip where this machine does not let us mount one."""
    path.mkdir(parents=True, exist_ok=True)
    opts = f"size={size}" + (",ro" if ro else "")
    res = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(path)], capture_output=True, check=False
    )
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({res.stderr.decode().strip()[:80]})")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def remount(path: Path, mode: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{mode}", str(path)], check=True)


# ------------------------------------------------------------------ the lock: two writers


def test_two_writers_on_one_out(tmp_path: Path) -> None:
    """While one `simconform run` writes DIR, a second one (even with --force) and a `verify`
    are refused with exit 2, naming the holder; the first finishes untouched."""
    out = tmp_path / "run"
    first = popen("run", "--spec", CORE, "--duration", "10", "--out", str(out))
    try:
        lock = out / ".simconform" / "lock"
        wait_while_running(first, lambda: lock.is_file() and str(first.pid) in lock.read_text())
        wait_while_running(first, lambda: (out / "run.json").is_file())
        # Held stopped while the others try: a quick first run could otherwise finish (and
        # release the lock) before they start, which failed this test once in CI.
        os.kill(first.pid, signal.SIGSTOP)
        try:
            second = cli("run", "--spec", CORE, "--duration", "1", "--out", str(out), "--force")
            again = cli("verify", str(out))
        finally:
            os.kill(first.pid, signal.SIGCONT)
        assert second.returncode == 2
        line = one_error_line(second.stderr)
        assert f"pid {first.pid} (simconform run --spec" in line and "being written" in line
        assert again.returncode == 2 and f"pid {first.pid}" in one_error_line(again.stderr)
        _, err = first.communicate(timeout=300)
    finally:
        first.kill()
    assert first.returncode in (0, 1), err
    manifest = json.loads((out / "run.json").read_text())
    assert manifest["complete"] is True and manifest["captures"]["lidar"] == 100
    assert (out / "report" / "report.json").is_file()
    with open(lock) as fh:  # released with its holder
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)


def test_lock_is_one_per_folder_and_names_its_holder(tmp_path: Path) -> None:
    """In-process claims against a lock held by another real process."""
    out = tmp_path / "cmp"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from simconform import outdir\n"
            f"with outdir.claim(Path({str(out)!r}), 'compare'):\n"
            "    print('held', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with (
            pytest.raises(UserError, match=rf"being written by pid {holder.pid} "),
            claim(out, "compare"),
        ):
            pass
    finally:
        holder.kill()
        holder.wait()
    with claim(out, "compare") as c:  # the kernel dropped the dead holder's lock
        c.declare("compare.json")
        (out / "compare.json").write_text("{}")
    assert foreign_paths(out, "compare") == []


def test_a_busy_folder_is_named_busy_before_its_files_are_judged(tmp_path: Path) -> None:
    """A writer mid-way through an atomic write (run.json.tmp beside run.json) holds its
    folder: a second writer hears who holds it, not that the folder holds files that are not
    simconform's (CI saw that race). Once the holder is gone, the .tmp a killed writer left is
    its own and --force may replace it."""
    out = tmp_path / "run"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time; from pathlib import Path; from simconform import outdir\n"
            f"out = Path({str(out)!r})\n"
            "with outdir.claim(out, 'run') as c:\n"
            "    c.declare('run.json'); (out / 'run.json').write_text('{}')\n"
            "    (out / 'run.json.tmp').write_text('{')\n"
            "    print('held', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        for force in (False, True):
            with pytest.raises(UserError, match=rf"being written by pid {holder.pid} "):
                check_target(out, "run", force)
    finally:
        holder.kill()
        holder.wait()
    assert foreign_paths(out, "run") == []
    assert check_target(out, "run", True) == "replace"
    (out / "notes.tmp").write_text("mine")  # a .tmp of no file of ours stays the user's
    assert foreign_paths(out, "run") == ["notes.tmp"]


# ------------------------------------------------------------------ --force and user files


def test_force_deletes_only_what_simconform_wrote(tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = ("run", "--spec", CORE, "--duration", "1", "--out", str(out))
    assert cli(*args).returncode in (0, 1)
    outputs = json.loads((out / ".simconform" / "outputs.json").read_text())
    assert outputs["kind"] == "run"
    assert {"run.json", "bag/metadata.yaml", "gt/lidar.tum", "report/report.json"} <= set(
        outputs["paths"]
    )
    elsewhere = tmp_path / "data"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("mine")
    plants = {
        "notes.txt": lambda p: p.write_text("my notes"),
        "report/annotated.png": lambda p: p.write_bytes(b"\x89PNG"),
        "bag/extra.mcap": lambda p: p.write_bytes(b"not ours"),
        "mine": lambda p: p.mkdir(),
        "data": lambda p: p.symlink_to(elsewhere),
    }
    for rel, plant in plants.items():
        before = listing(out)
        plant(out / rel)
        res = cli(*args, "--force")
        assert res.returncode == 2, res.stderr
        line = one_error_line(res.stderr)
        assert "did not write" in line and rel in line, line
        after = listing(out)
        assert all(after.get(k) == v for k, v in before.items())  # nothing deleted or rewritten
        if (out / rel).is_dir() and not (out / rel).is_symlink():
            (out / rel).rmdir()
        else:
            (out / rel).unlink()
    assert (elsewhere / "keep.txt").read_text() == "mine"
    assert cli(*args, "--force").returncode in (0, 1)  # only our own files: replaced
    # a run written before outputs.json existed: recognised by its layout
    shutil.rmtree(out / ".simconform")
    (out / "notes.txt").write_text("mine")
    res = cli(*args, "--force")
    assert res.returncode == 2 and "notes.txt" in one_error_line(res.stderr)
    (out / "notes.txt").unlink()
    assert cli(*args, "--force").returncode in (0, 1)


def test_staged_outputs_replace_ours_only_once_built(tmp_path: Path) -> None:
    """Claim.staged, which every writer but run uses: an interrupted build leaves the old
    outputs whole and no staging folder; a finished one replaces exactly our old files."""
    out = tmp_path / "cmp"

    def write(names: list[str], force: bool, stop: bool = False) -> None:
        with (
            claim(out, "compare", force, clear=False) as owned,
            owned.staged(last="compare.json") as tmp,
        ):
            for n in names:
                (tmp / n).write_text(names[0])
            if stop:
                raise KeyboardInterrupt

    def state() -> tuple[list[str], str, list[str]]:
        book = sorted(json.loads((out / BOOK / "outputs.json").read_text())["paths"])
        names = sorted(p.name for p in out.iterdir() if p.name != BOOK)
        return names, (out / "compare.json").read_text(), book

    write(["old.md", "compare.json"], force=False)
    with pytest.raises(KeyboardInterrupt):
        write(["new.md", "compare.json"], force=True, stop=True)
    assert state() == (["compare.json", "old.md"], "old.md", ["compare.json", "old.md"])
    assert not list((out / BOOK).glob("building-*"))
    write(["new.md", "compare.json"], force=True)
    assert state() == (["compare.json", "new.md"], "new.md", ["compare.json", "new.md"])


def test_force_never_touches_a_folder_that_is_not_a_run(tmp_path: Path) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "thesis.tex").write_text("x")
    res = cli("run", "--spec", CORE, "--duration", "1", "--out", str(out), "--force")
    assert res.returncode == 2 and "not a simconform run" in one_error_line(res.stderr)
    assert sorted(p.name for p in out.iterdir()) == ["thesis.tex"]


def test_export_sdf_keeps_the_users_files_and_its_own_stale_ones_go(tmp_path: Path) -> None:
    """export-sdf wrote <world>.sdf and meshes/ into any folder, over a user's files."""
    mine = tmp_path / "mine"
    (mine / "meshes").mkdir(parents=True)
    (mine / "demo.sdf").write_text("my own world")
    res = cli("export-sdf", "--out", str(mine), "--force")
    assert res.returncode == 2 and "not a simconform Gazebo SDF export" in one_error_line(
        res.stderr
    )
    assert (mine / "demo.sdf").read_text() == "my own world"
    assert sorted(p.name for p in mine.iterdir()) == ["demo.sdf", "meshes"]

    out = tmp_path / "gz"
    assert cli("export-sdf", "--out", str(out), "--bridge").returncode == 0
    assert (out / "bridge.yaml").is_file() and list((out / "meshes").glob("*.obj"))
    res = cli("export-sdf", "--out", str(out))
    assert res.returncode == 2 and "pass --force" in one_error_line(res.stderr)
    (out / "notes.txt").write_text("mine")
    res = cli("export-sdf", "--out", str(out), "--force")
    assert res.returncode == 2 and "notes.txt" in one_error_line(res.stderr)
    (out / "notes.txt").unlink()
    assert cli("export-sdf", "--out", str(out), "--force").returncode == 0
    assert not (out / "bridge.yaml").exists()  # the earlier export's, not this one's
    assert (out / "demo.sdf").is_file() and list((out / "meshes").glob("*.obj"))
    # a folder written before export-sdf kept outputs.json looks like a user's: refused, named
    shutil.rmtree(out / BOOK)
    res = cli("export-sdf", "--out", str(out), "--force")
    assert res.returncode == 2 and "from before 2026-12-07" in one_error_line(res.stderr)
    assert (out / "demo.sdf").is_file()

    (tmp_path / "file.txt").write_text("x")
    res = cli("export-sdf", "--out", str(tmp_path / "file.txt" / "sub"))
    assert res.returncode == 2 and "file.txt is a file" in one_error_line(res.stderr)


def test_verify_writes_its_report_only_into_its_own_files(short_run: Path, tmp_path: Path) -> None:
    """verify followed a symbolic link in DIR/report/ and wrote over the file it named; the
    report is now drawn in DIR/.simconform/ and each file renamed into report/."""
    run = tmp_path / "run"
    shutil.copytree(short_run, run)
    mine = tmp_path / "precious.md"
    mine.write_text("the user's")
    before = (run / "report" / "report.json").read_bytes()
    (run / "report" / "report.md").unlink()
    (run / "report" / "report.md").symlink_to(mine)
    res = cli("verify", str(run), "-q")
    assert res.returncode == 2 and "report/report.md is a symbolic link" in one_error_line(
        res.stderr
    )
    assert mine.read_text() == "the user's"
    assert (run / "report" / "report.json").read_bytes() == before  # nothing half replaced
    (run / "report" / "report.md").unlink()
    (run / "report" / "report.md").mkdir()  # a folder of the user's under a report file's name
    (run / "report" / "report.md" / "mine.txt").write_text("mine")
    res = cli("verify", str(run), "-q")
    assert res.returncode == 2 and "report/report.md is a folder" in one_error_line(res.stderr)
    assert (run / "report" / "report.md" / "mine.txt").read_text() == "mine"
    shutil.rmtree(run / "report" / "report.md")
    (run / "report" / "notes.txt").write_text("mine")
    res = cli("verify", str(run), "-q")
    assert res.returncode in (0, 1), res.stderr
    assert (run / "report" / "notes.txt").read_text() == "mine"
    assert (run / "report" / "report.md").is_file()
    assert not list((run / BOOK).glob("building-*"))  # the staging folder is gone
    shutil.move(run / "report", tmp_path / "elsewhere")
    kept = {p.name: p.read_bytes() for p in (tmp_path / "elsewhere").iterdir()}
    for make, words in (
        (lambda p: p.symlink_to(tmp_path / "elsewhere"), "report as a symbolic link"),
        (lambda p: p.write_text("x"), "report as a file"),
    ):
        make(run / "report")
        res = cli("verify", str(run), "-q")
        assert res.returncode == 2 and words in one_error_line(res.stderr), res.stderr
        (run / "report").unlink()
    assert {p.name: p.read_bytes() for p in (tmp_path / "elsewhere").iterdir()} == kept


def interrupt_once_verified(args: list[str], only_verifying: bool) -> tuple[int, str]:
    """Start `simconform ARGS`, send it SIGINT once its verification has read the bag (the
    figures are being drawn then), and return its exit code and the rest of its stderr."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "simconform.cli", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_sigint,
    )
    assert proc.stderr is not None
    line = ""
    while not (line.startswith("simconform: verifying") and "100 %" in line):
        line = proc.stderr.readline()
        assert line, "the command ended before its verification did"
        assert not only_verifying or line.startswith("simconform: verifying"), line
    proc.send_signal(signal.SIGINT)
    rest = proc.stderr.read()
    return proc.wait(timeout=120), rest


def test_ctrl_c_in_verify_says_so_and_keeps_the_old_report(short_run: Path, tmp_path: Path) -> None:
    """Ctrl-C outside a run's capture exited 130 in silence (typer's own handling), and verify
    had rewritten part of report/ by then."""
    run = tmp_path / "run"
    shutil.copytree(short_run, run)
    old = {p.name: p.read_bytes() for p in (run / "report").iterdir()}
    code, rest = interrupt_once_verified(["verify", str(run)], only_verifying=True)
    assert code == 130, rest
    assert rest.strip().splitlines()[-1] == "simconform: interrupted (Ctrl-C)", rest
    assert "Traceback" not in rest
    assert {p.name: p.read_bytes() for p in (run / "report").iterdir()} == old
    assert not list((run / BOOK).glob("building-*"))


def test_ctrl_c_while_a_run_verifies_says_how_to_judge_it(tmp_path: Path) -> None:
    """Ctrl-C after the recording, while the run verified it, said only "interrupted": the
    user was not told the recording was complete, nor how to judge it."""
    out = tmp_path / "run"
    code, rest = interrupt_once_verified(["run", "--duration", "2", "--out", str(out)], False)
    assert code == 130, rest
    last = rest.strip().splitlines()[-1]
    assert last == (
        "simconform: interrupted (Ctrl-C) while verifying; the recording is complete: "
        f"`simconform verify {out}` judges it"
    ), rest
    assert "Traceback" not in rest
    assert json.loads((out / "run.json").read_text())["complete"] is True
    assert cli("verify", str(out), "-q").returncode in (0, 1)


def test_an_unreadable_input_is_one_message(short_run: Path, tmp_path: Path) -> None:
    """A bag or run.json this user may not read ended in a PermissionError traceback. As
    root, the process runs without the capabilities that let root read any file."""
    run = tmp_path / "run"
    shutil.copytree(short_run, run)
    prefix = []
    if os.geteuid() == 0:
        drop = "-dac_override,-dac_read_search"
        prefix = ["setpriv", f"--bounding-set={drop}", f"--inh-caps={drop}"]
    for locked in (next((run / "bag").glob("*.mcap")), run / "run.json"):
        locked.chmod(0)
        res = subprocess.run(
            [*prefix, sys.executable, "-m", "simconform.cli", "verify", str(run), "-q"],
            capture_output=True,
            text=True,
            check=False,
        )
        locked.chmod(0o644)
        assert res.returncode == 2, res.stderr
        assert f"{locked.name}: Permission denied" in one_error_line(res.stderr)


def test_replay_builds_inside_its_folder_and_cleans_what_a_killed_one_left(
    tmp_path: Path,
) -> None:
    src = tmp_path / "src"
    assert cli("run", "--spec", CORE, "--duration", "1", "--out", str(src)).returncode in (0, 1)
    out = tmp_path / "o"
    mp = REPO / "examples" / "replay" / "own_layout.yaml"
    args = ("replay", str(src / "bag"), "--map", str(mp), "--out", str(out))
    first = cli(*args)
    assert first.returncode in (0, 1), first.stderr
    # what a replay killed mid-write leaves: its building folder, inside DIR/.simconform
    stale = out / ".simconform" / "building-999999-deadbeef"
    (stale / "bag").mkdir(parents=True)
    (out / "notes.txt").write_text("mine")
    res = cli(*args, "--force")
    assert res.returncode == 2 and "notes.txt" in one_error_line(res.stderr)
    (out / "notes.txt").unlink()
    assert cli(*args, "--force").returncode in (0, 1)
    assert not stale.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o", "src"]  # nothing next to DIR
    assert not list((out / ".simconform").glob("building-*"))


# ------------------------------------------------------------------ the place: ro, full, link


def test_symlinked_out_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.mkdir()
    link = tmp_path / "link"
    link.symlink_to(target)
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    for out in (link, dangling):
        res = cli("run", "--spec", CORE, "--duration", "1", "--out", str(out), "--force")
        assert res.returncode == 2
        assert "symbolic link" in one_error_line(res.stderr)
        assert out.is_symlink()
    assert list(target.iterdir()) == [] and not (tmp_path / "nowhere").exists()
    camp = write_yaml(
        tmp_path / "c.yaml",
        {"spec": CORE, "seeds": [1], "duration": 1.0,
         "worlds": [{"world": str(DEMO_WORLD), "trajectory": str(DEMO_TRAJECTORY)}]},
    )  # fmt: skip
    res = cli("campaign", str(camp), "--out", str(link))
    assert res.returncode == 2 and "symbolic link" in one_error_line(res.stderr)
    assert list(target.iterdir()) == []


@pytest.fixture
def read_only(tmp_path: Path):
    """A folder this process cannot write: chmod for a user, a read-only tmpfs for root."""
    d = tmp_path / "ro"
    if os.geteuid() != 0:
        d.mkdir()
        d.chmod(0o555)
        yield d, "no write permission"
        d.chmod(0o755)
        return
    with tmpfs(d, "64m", ro=True):
        yield d, "read-only file system"


def test_read_only_out(read_only) -> None:
    d, why = read_only
    res = cli("run", "--spec", CORE, "--duration", "1", "--out", str(d / "run"))
    assert res.returncode == 2
    assert why in one_error_line(res.stderr)
    assert list(d.iterdir()) == []


def test_verify_of_a_run_on_a_read_only_disk(tmp_path: Path) -> None:
    d = tmp_path / "disk"
    with tmpfs(d, "64m"):
        out = d / "run"
        assert cli("run", "--spec", CORE, "--duration", "1", "--out", str(out)).returncode in (0, 1)
        remount(d, "ro")
        res = cli("verify", str(out))
        assert res.returncode == 2 and "read-only file system" in one_error_line(res.stderr)


def _limit_file_size() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))


def test_file_size_limit_stops_the_run_marked_incomplete(tmp_path: Path) -> None:
    """ulimit -f 1 MiB: the bag cannot grow past it; exit 2, one message, and the run folder
    keeps what it wrote with run.json saying where and why it stopped."""
    out = tmp_path / "run"
    args = ("run", "--spec", CORE, "--duration", "30", "--out", str(out))
    res = subprocess.run(
        [sys.executable, "-m", "simconform.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=_limit_file_size,
        check=False,
    )
    assert res.returncode == 2, res.stderr
    line = one_error_line(res.stderr)
    assert "size limit" in line and "marked incomplete" in line and "stopped at t = " in line
    manifest = json.loads((out / "run.json").read_text())
    assert manifest["complete"] is False
    assert "stopped at t = " in manifest["incomplete_reason"]
    assert 0 < manifest["captures"]["lidar"] < 300
    assert (out / "bag").is_dir()  # kept, never deleted


def test_full_disk_stops_the_run_marked_incomplete(tmp_path: Path) -> None:
    """A real ENOSPC: a small tmpfs filled while the run writes."""
    d = tmp_path / "disk"
    with tmpfs(d, "32m"):  # room for the estimate (14 MiB), then filled
        out = d / "run"
        proc = popen("run", "--spec", CORE, "--duration", "15", "--out", str(out))
        try:
            wait_while_running(proc, lambda: list(out.glob("bag/*.mcap")))
            with open(d / "filler", "wb") as fh:  # take every byte that is left
                try:
                    while True:
                        fh.write(b"\0" * 65536)
                        fh.flush()
                except OSError:
                    pass
            _, err = proc.communicate(timeout=300)
        finally:
            proc.kill()
        assert proc.returncode == 2, err
        line = one_error_line(err)
        assert "the disk is full" in line and "marked incomplete" in line
        assert json.loads((out / "run.json").read_text())["complete"] is False
        assert (out / "bag").is_dir()


# ------------------------------------------------------------------ the resource estimate


def big_lidar_spec(tmp_path: Path, rings: int, columns: int) -> Path:
    lidar = demo_spec()["sensors"]["lidar"]
    lidar.update(columns=columns, rings={"count": rings, "fov_deg": [-15.0, 15.0]})
    imu = demo_spec()["sensors"]["imu"]
    return write_yaml(
        tmp_path / "big.yaml", {"name": "big", "sensors": {"lidar": lidar, "imu": imu}}
    )


def test_huge_lidar_is_refused_before_it_allocates(tmp_path: Path) -> None:
    spec = big_lidar_spec(tmp_path, 512, 100000)
    out = tmp_path / "run"
    code, peak, wall, err = measured("run", "--spec", str(spec), "--out", str(out))
    assert code == 2, err
    line = one_error_line(err)
    assert "memory estimate" in line and "lidar 512 x 100000 rays x 2000 captures" in line
    assert "GiB'; more than the" in line and "a model" in line
    assert not out.exists()
    assert wall < 60 and peak < 400 << 20  # nothing of the sweep was allocated


def test_campaign_too_big_for_the_machine_is_refused_before_it_starts(tmp_path: Path) -> None:
    spec = big_lidar_spec(tmp_path, 512, 100000)
    file = write_yaml(
        tmp_path / "c.yaml",
        {"spec": str(spec), "seeds": [1, 2],
         "worlds": [{"world": str(DEMO_WORLD), "trajectory": str(DEMO_TRAJECTORY)}]},
    )  # fmt: skip
    out = tmp_path / "camp"
    res = cli("campaign", str(file), "--out", str(out), "--jobs", "2")
    assert res.returncode == 2
    line = one_error_line(res.stderr)
    assert "memory estimate" in line and "c.yaml" in line and "a model" in line
    assert not out.exists()


def test_dry_run_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "run"
    res = cli("run", "--dry-run", "--out", str(out))
    assert res.returncode == 0, res.stderr
    for word in ("the plan (nothing written)", "resource estimate", "lidar", "camera", "a model"):
        assert word in res.stdout
    assert "16 x 360 rays" in res.stdout and "640 x 480 px" in res.stdout
    assert not out.exists()
    # next to an existing run, with --force: still nothing touched
    assert cli("run", "--spec", CORE, "--duration", "1", "--out", str(out)).returncode in (0, 1)
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*")}
    res = cli("run", "--dry-run", "--force", "--duration", "5", "--out", str(out))
    assert res.returncode == 0 and "replaces the run there" in res.stdout
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*")} == before
    # a run that would be refused: the plan, then the refusal, exit 2
    res = cli("run", "--dry-run", "--max-memory", "100M", "--out", str(tmp_path / "x"))
    assert res.returncode == 2 and "resource estimate" in res.stdout
    assert "--max-memory 100 MiB" in one_error_line(res.stderr)
    res = cli("run", "--max-disk", "64K", "--duration", "1", "--out", str(tmp_path / "y"))
    assert res.returncode == 2 and "disk estimate" in one_error_line(res.stderr)
    res = cli("run", "--max-memory", "lots", "--out", str(tmp_path / "z"))
    assert res.returncode == 2 and "512M, 4G" in one_error_line(res.stderr)
    assert not [n for n in "xyz" if (tmp_path / n).exists()]


def test_estimate_against_a_measured_run(tmp_path: Path) -> None:
    """The model against a real run's peak RSS and disk use. --jobs 0: one process holds all
    the memory, so its peak RSS is the run's. The estimate is never below the measured
    peak by more than 10 %, and at most 1.6 x it;
    the disk estimate is above what was written and at most 4 x it (zstd is scene-dependent)."""
    spec = big_lidar_spec(tmp_path, 64, 2048)
    out = tmp_path / "run"
    code, peak, _, err = measured(
        "run", "--spec", str(spec), "--duration", "2", "--jobs", "0", "--out", str(out)
    )
    assert code in (0, 1), err
    written = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    est = estimate(Spec.model_validate(yaml.safe_load(spec.read_text())), 0, 2_000_000_000)
    assert 0.9 * peak <= est.memory_bytes <= 1.6 * peak, (est.memory_bytes, peak)
    assert written <= est.disk_bytes <= 4 * written, (est.disk_bytes, written)


# ------------------------------------------------------------------ workers die with the parent


def test_sigkilled_run_takes_its_capture_workers_along(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = popen("run", "--spec", CORE, "--duration", "60", "--jobs", "2", "--out", str(out))
    try:
        wait_while_running(proc, lambda: list(out.glob("bag/*.mcap")))
        # the fork server, two workers (and the resource tracker)
        workers = wait_for(lambda: (lambda d: d if len(d) >= 3 else None)(descendants(proc.pid)))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        wait_for(lambda: not any(alive(p) for p in workers), timeout=5)
    finally:
        proc.kill()
    json.loads((out / "run.json").read_text())  # the folder is still recognisably a run


def test_sigkilled_campaign_driver_takes_its_workers_along(tmp_path: Path) -> None:
    file = write_yaml(
        tmp_path / "c.yaml",
        {"spec": CORE, "seeds": [1, 2], "duration": 60.0,
         "worlds": [{"world": str(DEMO_WORLD), "trajectory": str(DEMO_TRAJECTORY)}]},
    )  # fmt: skip
    out = tmp_path / "camp"
    proc = popen("campaign", str(file), "--out", str(out), "--jobs", "2")
    try:
        wait_while_running(proc, lambda: len(list(out.glob("cells/*/bag/*.mcap"))) == 2)
        workers = descendants(proc.pid)
        assert len(workers) >= 2
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        t0 = time.monotonic()
        wait_for(lambda: not any(alive(p) for p in workers), timeout=5)
        assert time.monotonic() - t0 < 5
    finally:
        proc.kill()
    with open(out / ".simconform" / "lock") as fh:  # the driver's lock went with it
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    for cell in out.glob("cells/*"):
        with open(cell / ".simconform" / "lock") as fh:  # and each worker's
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)


def test_sigkilled_ray_campaign_driver_takes_its_tasks_along(tmp_path: Path) -> None:
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'simconform[ray]')")
    file = write_yaml(
        tmp_path / "c.yaml",
        {"spec": CORE, "seeds": [1, 2], "duration": 60.0,
         "worlds": [{"world": str(DEMO_WORLD), "trajectory": str(DEMO_TRAJECTORY)}]},
    )  # fmt: skip
    out = tmp_path / "camp"
    proc = popen(
        "campaign", str(file), "--out", str(out), "--jobs", "2", "--executor", "ray",
        "--address", "local",
    )  # fmt: skip
    try:
        wait_while_running(
            proc, lambda: len(list(out.glob("cells/*/bag/*.mcap"))) == 2, timeout=180
        )
        everything = descendants(proc.pid)
        # Ray's own agents notice a dead raylet after about a minute (measured 62 s); the
        # raylet, the GCS and every worker that ran a cell must go at once
        agents = {p for p in everything if "Agent" in Path(f"/proc/{p}/cmdline").read_text()}
        workers = everything - agents
        assert any("timed_cell" in Path(f"/proc/{p}/cmdline").read_text() for p in workers)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        wait_for(lambda: not any(alive(p) for p in workers), timeout=5)
    finally:
        proc.kill()


# ------------------------------------------------------------------ scratch folders, logs


def test_scratch_folders_of_dead_processes_are_swept(tmp_path: Path) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    pid = int(dead.stdout)
    host = socket.gethostname()
    stale = tmp_path / f"simconform-cell-{host}-{pid}-abc123"
    (stale / "run").mkdir(parents=True)
    other_host = tmp_path / f"simconform-cell-elsewhere-{pid}-abc123"
    other_host.mkdir()
    live = tmp_path / f"simconform-cell-{host}-{os.getppid()}-abc123"
    live.mkdir()
    mine = scratch_dir("simconform-cell-", tmp_path)
    assert not stale.exists() and other_host.exists() and live.exists() and mine.is_dir()


def test_a_failed_scratch_cell_names_files_that_exist(tmp_path: Path, monkeypatch) -> None:
    """A cell run in a scratch folder (a Ray worker without the campaign's filesystem) that
    fails: its error names the engine log in DIR/cells/<id>/, where the log now is, and no
    scratch folder is left."""
    from simconform import campaign as cp
    from simconform.registry import BACKENDS

    monkeypatch.setitem(BACKENDS, "failing", "test_output_safety:FailingBackend")
    file = write_yaml(
        tmp_path / "c.yaml",
        {"spec": CORE, "seeds": [1], "duration": 1.0, "backends": ["failing"],
         "worlds": [{"world": str(DEMO_WORLD), "trajectory": str(DEMO_TRAJECTORY)}]},
    )  # fmt: skip
    plan = cp.load_campaign(file)
    out = tmp_path / "camp"
    cell = plan.cells(out)[0]
    before = set(Path(tempfile.gettempdir()).glob("simconform-cell-*"))
    res = cp.execute_cell(
        cell, "archive", None, plan.variants[0].text, cp.scene_bundle(plan.scenes[0])
    )
    assert res["status"] == "error" and "archive" in res
    assert set(Path(tempfile.gettempdir()).glob("simconform-cell-*")) <= before
    rec = cp.finish_cell(cell, res, 1)
    log = Path(cell.out) / "engine" / "engine.log"
    assert f"see {log}" in rec["error"] and log.read_text() == "the engine said why\n"


class FailingBackend(ReferenceBackend):
    """An engine that dies at its first capture, leaving its log in the run folder."""

    name = "failing"
    run_outputs = ("engine/",)

    def capture_batch(self, sensor, times_ns, motion):
        log = Path(self.run_dir) / "engine" / "engine.log"
        log.parent.mkdir(exist_ok=True)
        log.write_text("the engine said why\n")
        raise EngineError(f"the engine died; see {log}")
