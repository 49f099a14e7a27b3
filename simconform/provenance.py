"""Where a result came from: the source tree's commit and the inputs' hashes, for run.json."""

from __future__ import annotations

import hashlib
import subprocess
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


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
