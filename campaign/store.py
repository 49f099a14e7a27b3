"""The campaign folder DIR: its token, the cells' cell.json records and returned run folders.

A cell is done (and skipped on a rerun) when its folder holds a complete, verified run whose
cell.json has the cell's input hash; a worker without DIR's filesystem returns its run folder
as a tar, unpacked here.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import secrets
import tarfile
from pathlib import Path

from simconform.campaign.plan import Cell, Scene
from simconform.outdir import remove_owned, update, write_json_atomic

TOKEN_FILE = ".campaign-token"


def prepare(out: Path) -> str:
    """The campaign's token (made on its first run); `out` is claimed (outdir.claim)."""
    token_file = out / TOKEN_FILE
    if token_file.is_file():
        return token_file.read_text().strip()
    token = secrets.token_hex(16)
    token_file.write_text(token + "\n")
    return token


def done_record(cell: Cell) -> dict | None:
    """The cell's record if its folder holds a complete, verified run with the same hash."""
    d = Path(cell.out)
    try:
        meta = json.loads((d / "cell.json").read_text())
        run = json.loads((d / "run.json").read_text())
        report = json.loads((d / "report" / "report.json").read_text())
    except (OSError, ValueError):
        return None
    if meta.get("hash") != cell.hash or not run.get("complete") or "verdict" not in report:
        return None
    rec = dict(meta["record"])
    rec.update(status=report["verdict"], verdict=report["verdict"], resumed=True)
    return rec


def record(cell: Cell, res: dict, attempts: int) -> dict:
    """The cell's line in campaign.json from a worker's result (or a stand-in for none)."""
    if res["status"] == "ran" and not res.get("complete"):
        res = {**res, "status": "error", "error": "the run stopped before its end (a signal)"}
    rec = {
        "id": cell.id,
        "backend": cell.backend,
        "seed": cell.seed,
        "variant": cell.variant,
        "scene": cell.scene,
        "hash": cell.hash,
        "status": res.get("verdict") if res["status"] == "ran" else res["status"],
        "verdict": res.get("verdict"),
        "complete": res.get("complete", False),
        "attempts": attempts,
        "resumed": False,
        "wall_s": res.get("wall_s"),
        "worker": {"pid": res.get("pid"), "host": res.get("host")},
        "transfer": res.get("transfer"),
        "error": res.get("error"),
        "path": f"cells/{cell.id}",
    }
    return rec


def _untar(archive: bytes, dest: Path) -> None:
    """Unpack a worker's run folder; refuse links and paths leaving `dest` (old Pythons too)."""
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(dest, filter="data")
            return
        for m in tar.getmembers():
            target = (dest / m.name).resolve()
            if not (m.isfile() or m.isdir()) or not target.is_relative_to(dest.resolve()):
                raise RuntimeError(f"refusing {m.name!r} in a worker's run archive")
        tar.extractall(dest)


def finish_cell(cell: Cell, res: dict, attempts: int) -> dict:
    """Unpack a returned run folder, write cell.json, return the cell's record."""
    d = Path(cell.out)
    archive = res.pop("archive", None)
    if archive is not None:
        remove_owned(d)
        d.mkdir(parents=True)
        _untar(archive, d)
    rec = record(cell, res, attempts)
    d.mkdir(parents=True, exist_ok=True)
    meta = {
        "hash": cell.hash,
        "inputs": {
            "backend": cell.backend,
            "seed": cell.seed,
            "variant": cell.variant,
            "scene": cell.scene,
            "spec": cell.spec,
            "world": cell.world,
            "trajectory": cell.trajectory,
            "duration": cell.duration,
            "storage": cell.storage,
            "interpolation": cell.interpolation,
            "confidence": cell.confidence,
            "files_sha256": dict(cell.files),
        },
        "record": rec,
        "traceback": res.get("traceback"),
        "finished": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }
    with update(d) as owned:
        owned.declare("cell.json")
        write_json_atomic(d / "cell.json", meta)
    return rec


def scene_bundle(scene: Scene) -> dict[str, bytes]:
    """The scene's files (world, meshes, trajectory) by path relative to its root."""
    return {rel: (scene.root / rel).read_bytes() for rel, _ in scene.files}
