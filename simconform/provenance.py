"""Where a result came from: the source tree's commit and the inputs' hashes, for run.json."""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path

from simconform.demo import REPO


def git_commit() -> str | None:
    try:
        res = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    commit = res.stdout.strip()
    if not commit or res.returncode != 0:
        return None
    dirty = subprocess.run(
        ["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        timeout=5,
        check=False,
    ).stdout.strip()
    return commit + ("+dirty" if dirty else "")


def command_line() -> str:
    """The command as typed (program name without its folder), for a report's provenance."""
    argv = [Path(sys.argv[0]).name, *sys.argv[1:]] if sys.argv and sys.argv[0] else []
    return shlex.join(argv)


def machine() -> dict:
    """What the result was computed on: a run's speed and a library's numerics depend on it."""
    return {
        "host": platform.node(),
        "system": f"{platform.system()} {platform.release()}",
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
    }


def recorded_header() -> dict:
    """The first keys of every run.json (run and replay): what recorded it, when, where, how."""
    from simconform import __version__

    return {
        "simconform": __version__,
        "git_commit": git_commit(),
        "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command_line": command_line(),
        "machine": machine(),
    }


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            h.update(block)
    return h.hexdigest()


RECORDED = ("bag", "gt")  # the run folder's data: what verify reads and what a user keeps


def output_digests(run_dir: Path, folders: tuple[str, ...] = RECORDED) -> dict[str, dict]:
    """SHA-256 and size of every file in the run's data folders, by path relative to the run
    folder (forward slashes), for run.json's `outputs`."""
    out = {}
    for folder in folders:
        root = run_dir / folder
        if not root.is_dir():
            continue
        for f in sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink()):
            out[f.relative_to(run_dir).as_posix()] = {
                "sha256": sha256(f),
                "bytes": f.stat().st_size,
            }
    return out


def path_digest(path: Path) -> dict:
    """Absolute path, size and SHA-256 of an input file, or of a folder (a rosbag2 folder):
    its files' sizes summed, and the SHA-256 of their sorted "relative-path sha256" lines,
    each file also listed, so one changed file changes the folder's hash."""
    path = Path(path)
    if not path.is_dir():
        return {"path": str(path.resolve()), "bytes": path.stat().st_size, "sha256": sha256(path)}
    files = {
        f.relative_to(path).as_posix(): {"sha256": sha256(f), "bytes": f.stat().st_size}
        for f in sorted(p for p in path.rglob("*") if p.is_file() and not p.is_symlink())
    }
    lines = "".join(f"{k} {v['sha256']}\n" for k, v in files.items())
    return {
        "path": str(path.resolve()),
        "bytes": sum(v["bytes"] for v in files.values()),
        "sha256": hashlib.sha256(lines.encode()).hexdigest(),
        "files": files,
    }
