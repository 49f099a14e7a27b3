"""The output folder: never replace what is not ours, write files whole or not at all."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from simconform.errors import UserError


def check_out(out: Path, force: bool) -> None:
    """Refuse to replace a run without --force, and anything that is not a run at all."""
    if out.exists() and not out.is_dir():
        raise UserError(None, "--out", str(out), "expected a folder path, not a file")
    if out.exists() and any(out.iterdir()):
        if not force:
            raise UserError(
                None,
                "--out",
                str(out),
                "a run already exists there; pass --force to replace it or choose another --out",
            )
        if not (out / "run.json").exists():
            raise UserError(
                None,
                "--out",
                str(out),
                "is not empty and not a simconform run; refusing to delete it even with --force",
            )


def prepare_out(out: Path, force: bool) -> None:
    check_out(out, force)
    if out.exists():
        shutil.rmtree(out)


def write_json_atomic(path: Path, data: dict) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")
    os.replace(tmp, path)
