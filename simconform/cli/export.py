"""`simconform export RUN_DIR --format kitti|nuscenes --out DIR`: a run as a dataset
(docs/export.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from simconform.cli.common import PARTIAL, err, stdout_console


def export_command(
    run_dir: Annotated[
        Path, typer.Argument(help="A run folder (simconform run).", metavar="RUN_DIR")
    ],
    format: Annotated[str, typer.Option("--format", help="kitti or nuscenes.")],
    out: Annotated[Path, typer.Option(help="Folder to write the dataset into.")],
    sensor: Annotated[
        str | None, typer.Option(help="The lidar to export (default: the spec's only lidar).")
    ] = None,
    deskew: Annotated[
        bool,
        typer.Option(
            "--deskew/--no-deskew",
            help="Motion-compensate each sweep with the true motion (KITTI and nuScenes clouds "
            "are); --no-deskew writes the points as published.",
        ),
    ] = True,
    force: Annotated[
        bool, typer.Option("--force", help="Replace an existing export in --out.")
    ] = False,
) -> None:
    """Export a run's published lidar (and camera) data with its ground truth as KITTI
    odometry or nuScenes.

    The run is checked as `verify` checks it; damaged chunks are left out and named (stderr,
    export.json `integrity`). Exit 4 when the dataset covers only part of the run."""
    from simconform.downstream.runcheck import partial
    from simconform.export.dataset import ExportConfig, export

    r = export(ExportConfig(run_dir, format, out, sensor, deskew, force))
    what = (
        f"{r['scans']} scans"
        if r["format"] == "kitti"
        else f"{r['samples']} samples, {r['camera_frames']} camera frames, "
        f"{r['annotations']} annotations"
    )
    skipped = sum(r["skipped"].values())
    stdout_console().print(
        f"{r['format']}: {what} in {r['seconds']:.1f} s -> {out}"
        + (f" ({skipped} sweep(s) past the recorded truth left out)" if skipped else "")
    )
    for line in r["integrity"]["findings"]:
        err.print(f"[yellow]integrity[/]: {line}", soft_wrap=True)
    raise typer.Exit(PARTIAL if partial(r["integrity"]) else 0)
