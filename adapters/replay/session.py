"""`simconform replay`: validate everything, then build the run folder and move it into place.

The bag is read twice: a scan validates everything before DIR exists (bad input is one
UserError, nothing written), then the run is built in a temporary folder next to DIR and
moved into place.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

from simconform.adapters.replay.map import check_against_spec, load_map
from simconform.adapters.replay.state import ReplayConfig, ReplayResult
from simconform.adapters.replay.write import Replay
from simconform.bag.reader import SourceBag
from simconform.errors import UserError
from simconform.outdir import check_out
from simconform.spec import load_spec
from simconform.world import load_world


def replay(cfg: ReplayConfig) -> ReplayResult:
    """Validate everything, then build the run folder (verify it with verify_run)."""
    m = load_map(cfg.map)
    spec_path = cfg.spec or m.path_of("spec")
    world_path = cfg.world or m.path_of("world")
    if spec_path is None:
        raise UserError(cfg.map, "spec", None, "expected a sensor spec: --spec or spec: in the map")
    if world_path is None:
        raise UserError(cfg.map, "world", None, "expected a world: --world or world: in the map")
    full = load_spec(spec_path)
    world = load_world(world_path)
    check_against_spec(m, full, cfg.map)
    check_out(cfg.out, cfg.force)  # prepare_out's rules, without deleting anything yet
    src = SourceBag(Path(cfg.bag))
    try:
        job = Replay(cfg, m, full, world, Path(spec_path), Path(world_path), src)
        job.scan()
        cfg.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = cfg.out.parent / f".{cfg.out.name}.replay-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
        try:
            result = job.write(tmp)
            if cfg.out.exists():
                shutil.rmtree(cfg.out)
            os.replace(tmp, cfg.out)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    finally:
        src.close()
    result.out = cfg.out
    return result
