"""The `simconform` command line: thin, one module per command; the work is in the library.

Exit codes: 0 every metric passes, 1 any metric fails or is inconclusive, 2 bad input (one
message, no traceback, nothing written) or an output folder that cannot be written (locked by
another writer, read-only, a full disk: a run cut short by it keeps what it wrote, marked
incomplete), 3 the engine failed mid-run (the run folder keeps what was recorded and the
engine's log), 4 the verdict covers only part of the run and is not FAIL (damaged data left
out: a file that differs from its SHA-256, an MCAP chunk whose CRC does not match; or a run
that did not record its whole span: interrupted, killed, a source bag cut off; `verify`,
`replay`, `export`, `localize`), 130/143 when `run` was interrupted (after its partial
recording has been verified), 130 for a Ctrl-C anywhere else.
"""

from __future__ import annotations

import os
import sys
from typing import Annotated

# Set before numpy loads (nothing above imports it). Our arrays are small: BLAS threads only
# spin and fight the capture workers for the cores.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import typer  # noqa: E402

from simconform import __version__  # noqa: E402
from simconform.cli import (  # noqa: E402
    backends,
    campaign,
    compare,
    doctor,
    export,
    localize,
    plan,
    replay,
    run,
    sdf,
)
from simconform.cli.common import Interrupted  # noqa: E402
from simconform.errors import UserError  # noqa: E402
from simconform.lifeline import INTERRUPTED  # noqa: E402

app = typer.Typer(
    add_completion=False,
    no_args_is_help=False,
    help="Verify simulated sensor models against their declared error models, on any simulator.",
    pretty_exceptions_enable=False,
)
app.command("run")(run.run)
app.command("verify")(run.verify)
app.command("compare")(compare.compare_command)
app.command("campaign")(campaign.campaign_command)
app.command("replay")(replay.replay_command)
app.command("export-sdf")(sdf.export_sdf_command)
app.command("import-sdf")(sdf.import_sdf_command)
app.command("backends")(backends.backends_command)
app.command("doctor")(doctor.doctor_command)
app.command("localize")(localize.localize_command)
app.command("export")(export.export_command)
app.command("plan")(plan.plan_command)


def _version(value: bool) -> None:
    if value:
        from simconform.provenance import git_commit

        commit = git_commit()
        print(f"simconform {__version__}" + (f" (git {commit})" if commit else ""))
        raise typer.Exit(0)


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Verify simulated sensor models against their declared error models, on any simulator."""


def main() -> None:
    import signal

    # typer turns the KeyboardInterrupt of a Ctrl-C into exit code 130 and says nothing (older
    # typer: click's Abort); a run's capture stops on its own handler (simconform/feed.py) and
    # says so itself
    ctrl_c: list[int] = []

    def on_ctrl_c(signum: int, frame) -> None:
        ctrl_c.append(signum)
        signal.default_int_handler(signum, frame)

    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, on_ctrl_c)
    try:
        from simconform.adapters.base import BackendUnavailable, EngineError
    except KeyboardInterrupt:
        print(INTERRUPTED, file=sys.stderr)
        sys.exit(130)

    if hasattr(signal, "SIGXFSZ"):  # a file size limit (ulimit -f): an error, not a dead process
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)

    try:
        code = app(standalone_mode=False)  # click returns the Exit code in this mode
    except (UserError, BackendUnavailable) as exc:
        one_line = " ".join(str(exc).split())
        print(f"simconform: error: {one_line}", file=sys.stderr)
        sys.exit(2)
    except EngineError as exc:  # the run folder keeps what was recorded and the engine's log
        one_line = " ".join(str(exc).split())
        print(f"simconform: engine error: {one_line}", file=sys.stderr)
        sys.exit(3)
    except PermissionError as exc:  # an input the user may not read (a bag, a run.json)
        where = f"{exc.filename}: " if exc.filename else ""
        print(
            f"simconform: error: {where}{exc.strerror or exc}; expected a file or folder this "
            "user may use (check its permissions)",
            file=sys.stderr,
        )
        sys.exit(2)
    except Interrupted as exc:
        print(f"simconform: {exc}", file=sys.stderr)
        sys.exit(130)
    except typer.Exit as exc:
        code = exc.exit_code
    except KeyboardInterrupt:
        code = 130
    except Exception as exc:  # usage errors of the click that typer bundles
        if type(exc).__name__ == "Abort":
            print(INTERRUPTED if ctrl_c else "simconform: aborted", file=sys.stderr)
            sys.exit(130)
        bad = bad_value(exc, sys.argv[1:])
        if bad is not None:
            print(f"simconform: error: {bad}", file=sys.stderr)
            sys.exit(2)
        if callable(getattr(exc, "show", None)) and isinstance(
            getattr(exc, "exit_code", None), int
        ):
            exc.show()
            sys.exit(2)
        raise
    code = code if isinstance(code, int) else 0
    if ctrl_c and code == 130:
        print(INTERRUPTED, file=sys.stderr)
    sys.exit(code)


def bad_value(exc: Exception, argv: list[str]) -> str | None:
    """click's refusal of an option's value (`--seed 1.5`), in simconform's one-line form with
    the value given: click's own names the option but not the value, under a usage block."""
    opts = getattr(getattr(exc, "param", None), "opts", None)
    if type(exc).__name__ != "BadParameter" or not opts:
        return None
    value = None
    for i, arg in enumerate(argv):
        name, eq, rest = arg.partition("=")
        if name in opts:
            value = rest if eq else (argv[i + 1] if i + 1 < len(argv) else None)
    if value is None:
        return None
    message = str(getattr(exc, "message", exc))
    if "valid integer" in message:  # typer's wording (pydantic's) for int and float options
        message = "expected a whole number"
    elif "valid number" in message:
        message = "expected a number"
    elif message.startswith("Input should be "):  # a range (`min=`): "greater than or equal"
        rest = message.removeprefix("Input should be ")
        message = "expected " + ("a value " if rest.startswith(("greater", "less")) else "") + rest
    return f"{max(opts, key=len)}: got {value!r}; {message}"
