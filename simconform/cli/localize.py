"""`simconform localize RUN_DIR --out DIR`: lidar odometry on a run, judged against its truth
(docs/localization.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from simconform.cli.common import PARTIAL, err, stdout_console


def localize_command(
    run_dir: Annotated[
        Path, typer.Argument(help="A run folder (simconform run or replay).", metavar="RUN_DIR")
    ],
    out: Annotated[
        Path | None,
        typer.Option(
            help="Folder for localization.json, localization.md and plots "
            "(default: RUN_DIR/localization/, which the run's report then shows)."
        ),
    ] = None,
    sensor: Annotated[
        str | None, typer.Option(help="The lidar to use (default: the spec's only lidar).")
    ] = None,
    odometry: Annotated[str, typer.Option(help="Lidar odometry: kiss-icp.")] = "kiss-icp",
    deskew: Annotated[
        bool,
        typer.Option(
            "--deskew/--no-deskew", help="Let the odometry deskew with the per-point time."
        ),
    ] = True,
    segment: Annotated[
        float, typer.Option(min=1.0, help="RPE segment length in m (KITTI: 100).")
    ] = 100.0,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Replace an existing localization in --out (RUN/localization/ is replaced "
            "without it, as verify replaces RUN/report/).",
        ),
    ] = False,
) -> None:
    """Run a lidar odometry on the run's published clouds; APE and RPE against its truth.

    The run is checked as `verify` checks it; damaged chunks are left out and named (stderr,
    localization.json `integrity`). Exit 1 on a FAIL of the spec's tolerance, else 4 when the
    result covers only part of the run."""
    from simconform.downstream.localize import LocalizeConfig, localize
    from simconform.downstream.runcheck import partial
    from simconform.verify.report import SYMBOL

    r = localize(LocalizeConfig(run_dir, out, sensor, odometry, deskew, segment, force))
    c = stdout_console()
    rpe = "n/a" if r["rpe_trans_pct"] is None else f"{r['rpe_trans_pct']:.3g} %"
    c.print(
        f"{r['odometry']} on {r['topic']}: APE RMSE {r['ape_rmse_m']:.3g} m over "
        f"{r['path_length_m']:.1f} m ({r['drift_pct']:.3g} %), RPE {rpe} per "
        f"{r['rpe_segment_m'] or 0:g} m; verdict {SYMBOL[r['verdict']]}"
    )
    c.print(f"wrote {r['written_to']}/localization.md")
    for line in r["integrity"]["findings"]:
        err.print(f"[yellow]integrity[/]: {line}", soft_wrap=True)
    if r["verdict"] == "fail":
        raise typer.Exit(1)
    raise typer.Exit(PARTIAL if partial(r["integrity"]) else 0)
