"""Which two runs may be compared and what the comparison says about each: the same spec, world,
trajectory, seed and time span (a replay run: the same world and sensor configuration), the
spec and origin to compare under, each run's summary for the report, and a safe --out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from simconform.errors import UserError, from_validation
from simconform.ownership import check_target
from simconform.spec import Spec
from simconform.world import Origin, World

IDENTITY = (
    "spec_content",
    "world_content",
    "trajectory_sha256",
    "interpolation",
    "seed",
    "start_ns",
    "end_ns",
)


def _first_difference(a: Any, b: Any, path: str) -> tuple[str, Any, Any] | None:
    """The first field path where two run.json values differ, with both values."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in list(a) + [k for k in b if k not in a]:
            if key not in a or key not in b:
                return f"{path}.{key}", a.get(key), b.get(key)
            found = _first_difference(a[key], b[key], f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{path} (length)", len(a), len(b)
        for i, (x, y) in enumerate(zip(a, b)):
            found = _first_difference(x, y, f"{path}.{i}")
            if found:
                return found
        return None
    return None if a == b else (path, a, b)


def check_comparable(dir_a: Path, a: dict, dir_b: Path, b: dict) -> None:
    """Refuse two runs unless spec, world, trajectory, seed and time span are the same.

    A replay run (a bag from another simulator) has no seed or trajectory file of ours: it is
    compared with a run of the same world whose spec holds each replayed sensor unchanged,
    over the stamps both recorded.
    """
    if "replay" in (a.get("backend"), b.get("backend")):
        _check_replay_comparable(dir_a, a, dir_b, b)
        return
    for side, d, m in (("a", dir_a, a), ("b", dir_b, b)):
        if m.get("trajectory_sha256") is None or m.get("seed") is None:
            key = "trajectory_sha256" if m.get("trajectory_sha256") is None else "seed"
            raise UserError(
                d / "run.json",
                key,
                None,
                "compare needs runs made by `simconform run` with a known trajectory and seed "
                f"(run {side.upper()} has none; a replayed bag cannot be shown to match)",
            )
    for key in IDENTITY:
        diff = _first_difference(_identity(a, key), _identity(b, key), key)
        if diff is not None:
            where, va, vb = diff
            ea, eb = (int(m.get("epoch_s") or 0) for m in (a, b))
            clock = (
                f"; the runs are on different bag clocks (epoch {ea} s and {eb} s): rerun "
                f"{dir_a} with --epoch {eb}"
                if key in ("start_ns", "end_ns") and ea != eb
                else ""
            )
            raise UserError(
                dir_b / "run.json",
                where,
                vb,
                f"expected {_short(va)} as in {dir_a / 'run.json'}: compare needs runs of one "
                "spec, world, trajectory, interpolation, seed and time span (only the backend "
                "may differ)" + clock,
            )


def _identity(m: dict, key: str) -> Any:
    """run.json's value of an IDENTITY key; runs from before --interpolation were linear."""
    if key == "interpolation":
        from simconform.trajectory import run_interpolation

        return run_interpolation(m)
    model = {"spec_content": Spec, "world_content": World}.get(key)
    if model is not None and isinstance(m.get(key), dict):
        # with every default filled in: a run made before a spec or world field existed (its
        # run.json lacks the key, e.g. a world object's `class`) has the same spec or world as
        # one made after that wrote the default
        try:
            return model.model_validate(m[key]).model_dump(mode="json")
        except ValidationError:
            return m[key]  # spec_and_origin names what is wrong with it
    return m.get(key)


def _check_replay_comparable(dir_a: Path, a: dict, dir_b: Path, b: dict) -> None:
    replay_dir, rep, other = (dir_b, b, a) if b.get("backend") == "replay" else (dir_a, a, b)
    diff = _first_difference(
        _identity(other, "world_content"), _identity(rep, "world_content"), "world_content"
    )
    if diff is not None:
        where, va, vb = diff
        raise UserError(
            replay_dir / "run.json",
            where,
            vb,
            f"expected {_short(va)}: a replay run is compared with a run of the same world",
        )
    theirs = (_identity(other, "spec_content") or {}).get("sensors", {})
    for name, s in ((_identity(rep, "spec_content") or {}).get("sensors") or {}).items():
        diff = _first_difference(theirs.get(name), s, f"spec_content.sensors.{name}")
        if diff is not None:
            where, va, vb = diff
            raise UserError(
                replay_dir / "run.json",
                where,
                vb,
                f"expected {_short(va)}: every "
                "replayed sensor must be configured as in the other run",
            )


def replay_side(a: dict, b: dict) -> int | None:
    """0 or 1 for the replay run of a pair, None when neither is one."""
    if b.get("backend") == "replay":
        return 1
    return 0 if a.get("backend") == "replay" else None


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def check_out(out: Path, force: bool, runs: tuple[Path, Path]) -> None:
    """--out is neither compared run, and may be written (outdir.check_target's rules)."""
    out_r = out.resolve()
    if any(out_r == r.resolve() for r in runs):
        raise UserError(None, "--out", str(out), "expected a folder other than the runs compared")
    check_target(out, "compare", force)


def spec_and_origin(run_dir: Path, manifest: dict) -> tuple[Spec, Origin]:
    try:
        spec = Spec.model_validate(manifest["spec_content"])
        origin = Origin.model_validate(manifest["world_content"]["origin"])
    except ValidationError as err:
        raise from_validation(run_dir / "run.json", err) from None
    return spec, origin


def run_info(run_dir: Path, m: dict) -> dict:
    return {
        "path": str(run_dir),
        "backend": m["backend"],
        "seed": m["seed"],
        "complete": bool(m.get("complete", False)),
        "stopped_by": m.get("stopped_by"),
        "spec": m.get("spec"),
        "world": m.get("world"),
        "trajectory": m.get("trajectory"),
        "duration_s": (m["end_ns"] - m["start_ns"]) / 1e9,
        "simconform": m.get("simconform"),
        "git_commit": m.get("git_commit"),
    }
