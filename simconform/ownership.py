"""Who wrote what in an output folder: the checks `--force` and `--out` go through, which write
nothing (simconform.outdir uses them before and after taking the folder's lock).

An output folder is of one kind (a run, a comparison, a campaign), told by its manifest
DIR/.simconform/outputs.json or, for folders written before manifests existed, by its marker
file (MARKER); the paths simconform owns there are the manifest's, or those of the kind's old
layout (LEGACY). Everything else in the folder is the user's ("foreign").
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from simconform.errors import UserError
from simconform.outlock import BOOK, refuse_if_busy

OUTPUTS = "outputs.json"

# the file that marks each kind of folder, and the layout it had before outputs.json existed
MARKER = {
    "run": ("run.json", "cell.json"),  # cell.json: a campaign cell that stopped before its run
    "compare": ("compare.json",),
    "campaign": (".campaign-token",),
    "localize": ("localization.json",),
    "export": ("export.json",),
    "sdf": (),  # export-sdf: known by its outputs.json only (its files are named by the world)
}
LEGACY = {
    "run": ("run.json", "run.json.tmp", "cell.json", "bag/", "gt/", "report/", "gazebo/"),
    "compare": ("compare.json", "compare.md", "junit.xml", "*.png"),
    "campaign": (
        ".campaign-token", "campaign.json", "campaign.md", "junit.xml", "plots/", "specs/",
        "cells/",
    ),
    "localize": ("localization.json", "localization.md", "*.png"),
    "export": ("export.json",),
    "sdf": (),  # an older export-sdf folder looks like a user's SDF files: never taken as ours
}  # fmt: skip
NOUN = {
    "run": "run",
    "compare": "comparison",
    "campaign": "campaign",
    "localize": "localization",
    "export": "dataset export",
    "sdf": "Gazebo SDF export",
}


# ------------------------------------------------------------------ checks that write nothing


def check_target(out: Path, kind: str, force: bool) -> str:
    """Refuse an --out that cannot be (re)written, without writing anything; say what would
    happen ("new", "empty", "replace")."""
    out = Path(out)
    if out.is_symlink():
        raise UserError(
            None,
            "--out",
            str(out),
            f"is a symbolic link (to {os.readlink(out)}); simconform writes only into a real "
            "folder: pass the folder itself",
        )
    if out.exists() and not out.is_dir():
        raise UserError(None, "--out", str(out), "expected a folder path, not a file")
    parent = _existing_ancestor(out)
    if parent != Path(os.path.abspath(out)) and not parent.is_dir():
        raise UserError(None, "--out", str(out), f"expected a folder path, but {parent} is a file")
    if not os.access(parent, os.W_OK | os.X_OK):
        why = "a read-only file system" if _read_only_fs(parent) else "no write permission"
        raise UserError(None, "--out", str(out), f"cannot write in {parent} ({why})")
    if not out.exists():
        return "new"
    refuse_if_busy(out)
    entries = [p for p in out.iterdir() if p.name != BOOK]
    if not entries:
        return "empty"
    found = _kind_of(out)
    if found is None:
        raise UserError(
            None,
            "--out",
            str(out),
            f"is not empty and not a simconform {NOUN[kind]}; "
            + (
                "choose another --out"
                if kind == "campaign"
                else "refusing to delete it even with --force (choose another --out)"
            )
            + (
                " (an export-sdf folder from before 2026-12-07 has no .simconform/outputs.json "
                "to tell it from a user's files: delete it yourself if it is one)"
                if kind == "sdf" and _old_sdf_export(out)
                else ""
            ),
        )
    if found != kind:
        raise UserError(
            None,
            "--out",
            str(out),
            f"holds a simconform {NOUN[found]}, not a {NOUN[kind]}; choose another --out",
        )
    if kind == "campaign":
        return "resume"
    if not force:
        raise UserError(
            None,
            "--out",
            str(out),
            f"a {NOUN[kind]} already exists there; pass --force to replace it or choose "
            "another --out",
        )
    foreign = foreign_paths(out, kind)
    if foreign:
        more = f" and {len(foreign) - 3} more" if len(foreign) > 3 else ""
        shown = ", ".join(foreign[:3]) + more
        raise UserError(
            None,
            "--out",
            str(out),
            f"holds files simconform did not write ({shown}); --force deletes only its own "
            "outputs, so move those away or choose another --out",
        )
    return "replace"


def _kind_of(out: Path) -> str | None:
    book = _read_outputs(out)
    if book is not None and book.get("kind") in MARKER:
        return book["kind"]
    for kind, markers in MARKER.items():
        for marker in markers:
            if (out / marker).is_file() and not (out / marker).is_symlink():
                return kind
    return None


def _old_sdf_export(out: Path) -> bool:
    """A folder laid out as export-sdf wrote before outputs.json (<world>.sdf, meshes/,
    bridge.yaml, nothing else): named in the refusal, never deleted, since a user's own SDF
    folder looks the same."""
    entries = [p for p in out.iterdir() if p.name != BOOK]
    sdf = [p for p in entries if p.suffix == ".sdf" and p.is_file() and not p.is_symlink()]
    rest = [p for p in entries if p not in sdf]
    known = {"meshes": Path.is_dir, "bridge.yaml": Path.is_file}
    return bool(sdf) and all(
        p.name in known and known[p.name](p) and not p.is_symlink() for p in rest
    )


def foreign_paths(out: Path, kind: str) -> list[str]:
    """Paths in `out` (relative, "/" after a folder) that simconform's manifest does not list."""
    owned = owned_paths(out, kind)
    foreign = []
    for root, dirs, files in os.walk(out, followlinks=False):
        rel_root = Path(root).relative_to(out)
        if rel_root.parts[:1] == (BOOK,):
            dirs[:] = []
            continue
        for name in files:
            rel = (rel_root / name).as_posix()
            if not covers(owned, rel):
                foreign.append(rel)
        keep = []
        for name in dirs:
            rel = (rel_root / name).as_posix()
            if rel == BOOK:
                continue
            if os.path.islink(os.path.join(root, name)):  # never followed, never ours
                foreign.append(rel)
            elif covers(owned, rel + "/") or _is_ancestor(owned, rel):
                keep.append(name)
            else:
                foreign.append(rel + "/")
        dirs[:] = keep
    return sorted(foreign)


def owned_paths(out: Path, kind: str) -> set[str]:
    book = _read_outputs(out)
    if book is not None and isinstance(book.get("paths"), list):
        return {str(p) for p in book["paths"]}
    found = set()
    for entry in LEGACY[kind]:
        if "*" in entry:
            found.update(p.name for p in out.glob(entry) if p.is_file() and not p.is_symlink())
        elif (out / entry.rstrip("/")).exists():
            found.add(entry)
    return found


def covers(owned: set[str], rel: str) -> bool:
    """Whether `rel` is ours: listed, inside a folder of ours, or the temporary file an atomic
    write of a file of ours leaves when its writer is killed (run.json.tmp)."""
    if rel in owned or (rel.endswith(".tmp") and rel[: -len(".tmp")] in owned):
        return True
    parts = rel.rstrip("/").split("/")
    return any("/".join(parts[:i]) + "/" in owned for i in range(1, len(parts)))


def _is_ancestor(owned: set[str], rel: str) -> bool:
    return any(p.startswith(rel + "/") for p in owned)


def _read_outputs(out: Path) -> dict | None:
    try:
        data = json.loads((out / BOOK / OUTPUTS).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _existing_ancestor(p: Path) -> Path:
    p = Path(os.path.abspath(p))
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def _read_only_fs(p: Path) -> bool:
    try:
        return bool(os.statvfs(p).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):
        return False
