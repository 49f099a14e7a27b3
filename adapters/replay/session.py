"""`simconform replay`: validate everything, then build the run folder and move it into place.

The bag is read twice: a scan validates everything before DIR exists (bad input is one
UserError, nothing written), the sensors' time offsets are estimated (align.py, a partial
third read), then, with DIR locked (simconform.outdir.claim), the run is built
in DIR/.simconform/building-*/ and moved into place; a replay killed meanwhile leaves only that
folder, inside DIR, which the next claim of DIR removes.
"""

from __future__ import annotations

from pathlib import Path

from simconform.adapters.replay.align import align, parse_offsets
from simconform.adapters.replay.map import check_against_spec, load_map
from simconform.adapters.replay.state import ReplayConfig, ReplayResult
from simconform.adapters.replay.write import Replay
from simconform.bag.reader import SourceBag
from simconform.errors import UserError
from simconform.outdir import check_target, claim, io_error
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
    fixed = parse_offsets(cfg.time_offsets, list(m.sensors))
    check_target(cfg.out, "run", cfg.force)  # the same rules as the claim below, writing nothing
    out_r, bag_r = Path(cfg.out).resolve(), Path(cfg.bag).resolve()
    if out_r == bag_r or out_r in bag_r.parents:  # --force would delete the bag being read
        raise UserError(None, "--out", str(cfg.out), "expected a folder that does not hold the bag")
    src = SourceBag(Path(cfg.bag))
    try:
        job = Replay(cfg, m, full, world, Path(spec_path), Path(world_path), src)
        job.scan()
        job.alignment = align(job, "auto" if cfg.align else "off", fixed, cfg.level)
        # locked for the whole write; an old run (--force) stays until the new one is built
        with claim(cfg.out, "run", cfg.force, clear=False) as out:
            try:
                with out.staged(last="run.json") as tmp:  # in DIR/.simconform: none beside DIR
                    result = job.write(tmp)
            except BaseException as exc:
                place = io_error(cfg.out, exc)
                if place is not None:
                    raise place from None
                raise
    finally:
        src.close()
    result.out = cfg.out
    return result
