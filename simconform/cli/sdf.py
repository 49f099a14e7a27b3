"""`simconform export-sdf` and `simconform import-sdf`: worlds to and from Gazebo's SDF."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
import yaml

from simconform.errors import UserError


def export_sdf_command(
    out: Annotated[Path, typer.Option(help="Folder to write <world>.sdf (and meshes/) into.")],
    world: Annotated[Path | None, typer.Option(help="World file (YAML).")] = None,
    spec: Annotated[Path | None, typer.Option(help="Sensor spec (YAML).")] = None,
    bridge: Annotated[
        bool, typer.Option("--bridge", help="Also write bridge.yaml for ros_gz_bridge.")
    ] = False,
    force: Annotated[
        bool, typer.Option("--force", help="Replace an earlier export-sdf in --out.")
    ] = False,
) -> None:
    """Export the world and sensor spec as an SDF 1.10 world for Gazebo Harmonic.

    --out follows every command's folder rules (docs/output-safety.md): a folder holding
    anything simconform did not write is refused, and --force replaces only an earlier
    export's files, so a stale bridge.yaml or mesh never outlives the export it came with."""
    from simconform.adapters.gazebo.sdf import bridge_yaml, sdf_name
    from simconform.demo import DEMO_SPEC, DEMO_WORLD
    from simconform.outdir import claim, io_error
    from simconform.registry import EXPORTERS
    from simconform.spec import load_spec
    from simconform.world import load_world

    write_sdf = EXPORTERS.load("sdf")

    w = load_world(world or DEMO_WORLD)
    s = load_spec(spec or DEMO_SPEC)
    with claim(out, "sdf", force, clear=False) as owned:  # the old export stays till then
        name = sdf_name(w)
        try:  # --force: an earlier export's files go too (a bridge.yaml not made now)
            with owned.staged(last=name) as tmp:
                write_sdf(w, s, tmp)
                if bridge:
                    (tmp / "bridge.yaml").write_text(bridge_yaml(s))
        except OSError as exc:
            raise io_error(out, exc) or exc from None
    print(f"sdf: {out / name}")
    if bridge:
        print(f"bridge: {out / 'bridge.yaml'}")


def import_sdf_command(
    sdf_file: Annotated[Path, typer.Argument(help="SDF world file.", metavar="WORLD.sdf")],
    out: Annotated[Path, typer.Option(help="World YAML to write (meshes: <stem>_meshes/).")],
    force: Annotated[bool, typer.Option("--force", help="Replace an existing --out.")] = False,
    parser: Annotated[
        str, typer.Option(help="auto (sdformat14 when it imports), sdformat or xml.")
    ] = "auto",
) -> None:
    """Import an SDF world's static models (box, cylinder, sphere, plane, mesh) as a world YAML."""
    from simconform.adapters.gazebo.sdf_import import SHOWN, write_world
    from simconform.world import World

    if parser not in ("auto", "sdformat", "xml"):
        raise UserError(None, "--parser", parser, "expected auto, sdformat or xml")
    skipped = write_world(sdf_file, out, force, parser)
    n = len(World.model_validate(yaml.safe_load(out.read_text())).objects)
    print(f"world: {out} ({n} objects)")
    print(f"skipped: {len(skipped)}" + "".join(f"\n  - {s}" for s in skipped[:SHOWN]))
    if len(skipped) > SHOWN:
        print(f"  ... and {len(skipped) - SHOWN} more, all listed at the top of {out}")
