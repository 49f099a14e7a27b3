"""`simconform replay`: verify a bag recorded from another simulator or a real robot.

Exit codes as for `simconform run`: 0 every metric passes, 1 any fails or is inconclusive, 2 bad
input (raised as UserError and turned into one line by cli.main, with nothing written), 4 the
verdict covers only part of the source (a damaged chunk left out, a file cut off).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from simconform.cli.common import (
    JsonOpt,
    ProgressOpt,
    QuietOpt,
    check_confidence,
    err,
    exit_code,
    print_verdict,
    progress_of,
)


def replay_command(
    bag: Annotated[
        Path,
        typer.Argument(
            help="Source bag: rosbag2 folder (MCAP or sqlite3), .mcap file or ROS 1 .bag.",
            metavar="BAG",
        ),
    ],
    map: Annotated[
        Path,
        typer.Option(
            "--map", help="Topic map (YAML): which topic is which sensor, where ground truth is."
        ),
    ],
    out: Annotated[Path, typer.Option(help="Run folder to create.")],
    world: Annotated[
        Path | None, typer.Option(help="World file (YAML); default: the map's world.")
    ] = None,
    spec: Annotated[
        Path | None, typer.Option(help="Sensor spec (YAML); default: the map's spec.")
    ] = None,
    confidence: Annotated[float, typer.Option(help="Confidence level of every interval.")] = 0.95,
    force: Annotated[
        bool, typer.Option("--force", help="Replace an existing run in --out.")
    ] = False,
    align: Annotated[
        bool,
        typer.Option(
            "--align/--no-align",
            help="Estimate each lidar's and IMU's time offset against the pose stream and "
            "recompute truth with it compensated (docs/replay.md).",
        ),
    ] = True,
    time_offset: Annotated[
        list[str] | None,
        typer.Option(
            "--time-offset",
            help="Known offset instead of an estimate: MS (every sensor) or SENSOR=MS, "
            "pose-stream time minus stamp; repeatable.",
        ),
    ] = None,
    progress: ProgressOpt = None,
    quiet: QuietOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Re-record a foreign bag in simconform's layout with its truth, then verify it."""
    from simconform.adapters.replay import ReplayConfig
    from simconform.outdir import session

    check_confidence(confidence)
    with session():  # DIR stays locked until its report is written
        cfg = ReplayConfig(
            bag=bag,
            map=map,
            out=out,
            world=world,
            spec=spec,
            force=force,
            align=align,
            time_offsets=list(time_offset or []),
            level=confidence,
            progress=progress_of(progress, quiet),
        )
        _replay(cfg, confidence, quiet, as_json)


def _replay(cfg, confidence: float, quiet: bool, as_json: bool) -> None:
    from simconform.adapters.replay import replay
    from simconform.verify.verifier import verify_run

    result = replay(cfg)
    if not quiet:
        _summary(result)
    report = verify_run(result.out, confidence, progress=cfg.progress)
    print_verdict(report, result.out / "report", quiet, as_json)
    if not (quiet or as_json):
        print(f"report: {result.out / 'report' / 'report.md'}")
    raise typer.Exit(exit_code(report))


def _summary(result) -> None:
    """What the replay read and how it paired and aligned (stderr)."""
    sec = result.replay
    err.print(
        f"replay: {sec['source_format']} read with {sec['read_with']}, "
        f"{sec['messages_read']} messages, truth {result.truth}"
    )
    for name, info in sec["sensors"].items():
        p = info.get("pairing")
        if p and p["share_beyond_half_bin"] is not None:
            res = p["residual_deg"]
            err.print(
                f"  {name}: paired {p['points_paired']} points by {p['method']}, "
                f"{p['share_beyond_half_bin']:.2%} beyond half a bin, "
                f"residual p95 {res['p95'] or 0:.3g} deg"
            )
    for name, a in (sec.get("alignment") or {}).items():
        if a["mode"] == "estimated":
            lo, hi = a["ci_ms"]
            done = (
                "compensated in truth"
                if a["applied_ms"]
                else "not compensated (interval wider than the tolerance)"
            )
            err.print(
                f"  {name}: time offset {a['offset_ms']:+.3g} ms [{lo:+.3g}, {hi:+.3g}] "
                f"(pose stream minus stamp), {done}"
            )
    for w in sec["warnings"]:
        err.print(f"[yellow]warning[/]: {w}")
    if not result.complete:
        err.print(f"[yellow]incomplete source[/]: {result.reason}; verified what was readable")
