"""A run as `export` and `localize` read it: refused while it is still being recorded, and
checked as `verify` checks it, so a dataset or an odometry result made from a damaged, cut off
or interrupted run says so rather than passing for a whole one (docs/integrity.md).

Both commands only read the run, so the refusal is outlock's `refuse_if_busy` (it opens the
lock to look and writes nothing: a run folder the user may not write stays readable), taken
under the same condition `verify` takes the lock: run.json says "recording". The checks are
verify/integrity.py's own (`check_run` on the bag opened the checked way): damaged chunks are
skipped by the reader and listed, the files are compared with their SHA-256, an interrupted or
killed run's span is named. The result goes into export.json / localization.json as
`integrity`, its findings go to stderr, and the command exits 4 (PARTIAL) as `verify` does
for the same run when its result covers only part of it.
"""

from __future__ import annotations

from pathlib import Path

from simconform.errors import UserError
from simconform.outlock import refuse_if_busy
from simconform.verify.integrity import RunIntegrity, check_run, run_state


def load_run(run_dir: Path) -> dict:
    """run.json; a UserError naming the writer while `simconform run` still writes `run_dir`
    (its bag is still growing: docs/refusals.md). A killed run (state "recording", its lock
    gone with its process) is read, as `verify` reads it."""
    from simconform.verify.verifier import load_manifest

    run_dir = Path(run_dir)
    if not (run_dir / "run.json").is_file():
        refuse_if_busy(run_dir, "DIR")  # a run that has not written run.json yet
    manifest = load_manifest(run_dir)
    if run_state(manifest) == "recording":
        refuse_if_busy(run_dir, "DIR")
    return manifest


def check_integrity(run_dir: Path, manifest: dict) -> RunIntegrity:
    """What verify would find in the run's files, bag chunks and recorded span; a file the user
    cannot read is refused naming it (read_error)."""
    from simconform.verify.reading import open_run_bag

    try:
        src = open_run_bag(Path(run_dir), manifest)
        try:
            return check_run(Path(run_dir), manifest, src)
        finally:
            src.close()
    except OSError as exc:
        raise read_error(exc) or exc from None


def record(found: RunIntegrity, stopped: str | None = None) -> dict:
    """`integrity` in export.json / localization.json: verify's own record (report.json's
    run.integrity), the run's state, and where a reading of the bag stopped early."""
    out = {"state": found.state, **found.as_dict(), "bag_truncated": stopped}
    if stopped:
        out["findings"] = [*out["findings"], f"bag read stopped early: {stopped}"]
    return out


def partial(integrity: dict) -> bool:
    """True where the result covers only part of the run: `verify` exits 4 for it."""
    return integrity.get("scope", "whole run") != "whole run"


def read_error(exc: OSError, out: Path | None = None) -> UserError | None:
    """The UserError for a run file that cannot be read (its name, the system's reason), or
    None where the error is not about reading a file outside `out` (the output folder's own
    errors are outdir.io_error's)."""
    name = getattr(exc, "filename", None)
    if name is None:
        return None
    path = Path(name)
    if out is not None and _inside(path, Path(out)):
        return None
    return UserError(
        path,
        "read",
        exc.strerror or type(exc).__name__,
        "expected a run file this user can read (check its permissions, or run as its owner)",
    )


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.resolve().relative_to(folder.resolve())
    except ValueError:
        return False
    return True
