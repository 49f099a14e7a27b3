"""The `simconform` command's first step, taken before its modules load (1.3 s of imports on
the 2-core host).

A command that will start worker processes (a run's capture workers, verify's camera reader)
starts their fork server here. The server imports the workers' modules itself before it
forks the first worker (1.6 s there): started here, it does so while this process imports
its own, on the other core, instead of afterwards while this process waits for its first
worker with one core idle (2026-12-06: the demo's first capture was submitted at 1.8 s and
waited until 3.4 s). The guess is made from the arguments alone; a wrong one costs only the
server's imports on a core the command would not use (a run whose spec has no lidar or
camera), or the time it saves. `verify DIR` looks at DIR/run.json first: a run with no camera
beside other sensors is judged in one process, and its server would only cost (1.4 CPU-s and
about 220 MB on a rover_core run, 2026-12-06). `python -m simconform.cli` skips this step.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from simconform.lifeline import (
    INTERRUPTED,
    VERIFY_PRELOAD,
    capture_preload,
    start_fork_server,
    usable_cpus,
)

_NEVER = {"--help", "-h", "--dry-run"}


def main() -> None:
    try:
        preload = early_preload(sys.argv[1:])
        if preload is not None:
            start_fork_server(preload)
        from simconform.cli import main as cli_main
    except KeyboardInterrupt:  # Ctrl-C while the modules load: nothing was written yet
        print(INTERRUPTED, file=sys.stderr)
        sys.exit(130)
    cli_main()


def early_preload(argv: list[str]) -> tuple[str, ...] | None:
    """The preload of the fork server that the command `argv` will use, None where it will
    start no worker: the same list as the pool itself would give (lifeline.capture_preload,
    verify/parallel.py), so that the server is the one the pool would have started."""
    if not argv or _NEVER & set(argv) or usable_cpus() < 2:
        return None
    if argv[0] not in ("run", "verify") or _zero(_flag(argv, "--jobs")):
        return None
    if argv[0] == "verify":
        return VERIFY_PRELOAD if _may_offload(argv[1:]) else None
    if _flag(argv, "--backend") not in (None, "reference"):
        return None  # other engines load their modules in each worker (capture_preload)
    from simconform.registry import BACKENDS

    return capture_preload("reference", BACKENDS["reference"])


def _may_offload(args: list[str]) -> bool:
    """Whether `verify DIR` may judge a camera in a worker: DIR's run.json names a camera
    beside other sensors (the first conditions of budget.offloaded, read without loading the
    spec's models). True where run.json cannot tell: the guess then starts the server."""
    valued = ("--confidence", "--jobs")
    rest = [a for i, a in enumerate(args) if not (i and args[i - 1] in valued)]
    run_dir = next((a for a in rest if not a.startswith("-")), None)
    if run_dir is None:
        return True
    try:
        manifest = json.loads((Path(run_dir) / "run.json").read_text())
        kinds = [s["type"] for s in manifest["spec_content"]["sensors"].values()]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return True
    return 0 < kinds.count("camera") < len(kinds)


def _zero(value: str | None) -> bool:
    """`--jobs` given as 0 (as typer reads it: 0, 00, +0)."""
    try:
        return value is not None and int(value) == 0
    except ValueError:
        return False


def _flag(argv: list[str], name: str) -> str | None:
    """The value given to `name` (`--name V` or `--name=V`; the last one), None if absent."""
    value = None
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith(name + "="):
            value = arg[len(name) + 1 :]
    return value
