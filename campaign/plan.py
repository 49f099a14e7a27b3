"""The campaign file and the plan it expands to: backends x variants x scenes x seeds -> cells.

`load_campaign` validates the YAML (pydantic, unknown keys rejected, paths relative to the file)
and everything it names (backends, spec, spec variants, worlds, trajectories, duration) before
anything is written; `Plan.cells` then names each cell's folder, inputs and input hash, which
is what makes a cell resumable (simconform.campaign.store.done_record).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, ValidationError

from simconform import __version__
from simconform.errors import UserError, dump_yaml, from_validation, load_yaml, validate
from simconform.fields import Strict

NAME = r"^[A-Za-z0-9][A-Za-z0-9_]{0,39}$"
MAX_SEED = 2**63
NOISE_SCALE = "noise_scale"


def _seed_list(v: Any) -> Any:
    """{start, count} as the list it stands for, so the rest only sees a list of seeds."""
    if not isinstance(v, dict):
        return v
    unknown = set(v) - {"start", "count"}
    if unknown:
        raise ValueError(f"unknown key {sorted(unknown)[0]!r}; a seed range has start and count")
    start, count = v.get("start", 0), v.get("count")
    if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= 100_000:
        raise ValueError("count must be an integer in [1, 100000]")
    if not isinstance(start, int) or isinstance(start, bool) or not 0 <= start <= MAX_SEED - count:
        raise ValueError("start must be an integer >= 0 with start + count <= 2^63")
    return list(range(start, start + count))


def _no_none(v: Any) -> Any:
    return {} if v is None else v


Seed = Annotated[int, Field(ge=0, lt=MAX_SEED, strict=True)]
Name = Annotated[str, Field(pattern=NAME)]


class WorldEntry(Strict):
    """One world and the trajectory driven through it; `name` defaults to the world's stem."""

    world: Path
    trajectory: Path
    name: Name | None = None


class CampaignFile(Strict):
    """The campaign YAML. Defaults: the demo spec and world, the reference backend."""

    name: Name | None = None
    spec: Path | None = None
    backends: list[str] = Field(default_factory=lambda: ["reference"], min_length=1)
    seeds: Annotated[list[Seed], BeforeValidator(_seed_list), Field(min_length=1)]
    variants: dict[Name, Annotated[dict[str, Any], BeforeValidator(_no_none)]] = Field(
        default_factory=lambda: {"nominal": {}}, min_length=1
    )
    worlds: list[WorldEntry] | None = Field(default=None, min_length=1)
    # s, or "auto": per variant and world, the length at which every metric that can become
    # conclusive PASSes with 80 % power for a conforming sensor (as `run --duration auto`)
    duration: Annotated[float, Field(gt=0, allow_inf_nan=False)] | Literal["auto"] | None = None
    confidence: Annotated[float, Field(ge=0.5, lt=1)] = 0.95
    storage: Literal["mcap", "sqlite3"] = "mcap"
    interpolation: Literal["spline", "linear"] = "spline"
    localize: bool = False  # also run `simconform localize` in every cell (lidar odometry)


@dataclass(frozen=True)
class Variant:
    name: str
    overrides: dict[str, Any]
    content: dict  # the variant spec, model_dump(mode="json")
    text: str  # the YAML written to DIR/specs/<name>.yaml


@dataclass(frozen=True)
class Scene:
    name: str
    world: Path
    trajectory: Path
    root: Path  # common folder of the world, its meshes and the trajectory (bundle root)
    files: tuple[tuple[str, str], ...]  # (path relative to root, sha256), world first


@dataclass(frozen=True)
class Cell:
    """Everything one worker needs to run one cell; picklable, paths absolute on the driver."""

    id: str
    backend: str
    backend_entry: str
    seed: int
    variant: str
    scene: str
    spec: str
    world: str
    trajectory: str
    duration: float | None
    storage: str
    interpolation: str
    confidence: float
    hash: str
    out: str  # DIR/cells/<id>
    root: str  # DIR
    files: tuple[tuple[str, str], ...]  # every input path the run reads, with its sha256
    world_rel: str  # world and trajectory inside the scene bundle
    trajectory_rel: str
    localize: bool = False


@dataclass
class Plan:
    file: Path
    name: str
    backends: list[str]
    seeds: list[int]
    variants: list[Variant]
    scenes: list[Scene]
    duration: float | None
    confidence: float
    storage: str
    spec: Path
    interpolation: str = "spline"
    localize: bool = False
    # duration "auto": the planned seconds per (variant, scene) name
    auto: dict[tuple[str, str], float] = field(default_factory=dict)

    def cell_duration(self, variant: Variant, scene: Scene) -> float | None:
        return self.auto[variant.name, scene.name] if self.auto else self.duration

    def cells(self, out: Path) -> list[Cell]:
        from simconform.registry import BACKENDS

        out = out.resolve()
        cells = []
        for backend in self.backends:
            for variant in self.variants:
                spec_path = out / "specs" / f"{variant.name}.yaml"
                spec_sha = _sha(variant.text.encode())
                for scene in self.scenes:
                    files = (
                        (str(spec_path), spec_sha),
                        *((str(scene.root / rel), sha) for rel, sha in scene.files),
                    )
                    for seed in self.seeds:
                        cid = f"{backend}-s{seed}-{variant.name}-{scene.name}"
                        cells.append(
                            Cell(
                                id=cid,
                                backend=backend,
                                backend_entry=BACKENDS[backend],
                                seed=seed,
                                variant=variant.name,
                                scene=scene.name,
                                spec=str(spec_path),
                                world=str(scene.world),
                                trajectory=str(scene.trajectory),
                                duration=self.cell_duration(variant, scene),
                                storage=self.storage,
                                interpolation=self.interpolation,
                                confidence=self.confidence,
                                hash=self._hash(backend, variant, scene, seed),
                                out=str(out / "cells" / cid),
                                root=str(out),
                                files=files,
                                world_rel=scene.files[0][0],
                                trajectory_rel=str(scene.trajectory.relative_to(scene.root)),
                                localize=self.localize,
                            )
                        )
        return cells

    def _hash(self, backend: str, variant: Variant, scene: Scene, seed: int) -> str:
        payload = {
            "spec": variant.content,
            "scene_files": sorted(sha for _, sha in scene.files),
            "world_sha256": scene.files[0][1],
            "trajectory_sha256": dict(scene.files)[str(scene.trajectory.relative_to(scene.root))],
            "seed": seed,
            "backend": backend,
            "duration": self.cell_duration(variant, scene),
            "storage": self.storage,
            "interpolation": self.interpolation,
            "confidence": self.confidence,
            "simconform": __version__,
            **({"localize": True} if self.localize else {}),  # earlier cells' hashes stay valid
        }
        return _sha(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode())


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def load_campaign(path: str | Path) -> Plan:
    """Validate a campaign file and everything it names; raises UserError, writes nothing."""
    from simconform.demo import DEMO_SPEC, DEMO_TRAJECTORY, DEMO_WORLD
    from simconform.registry import BACKENDS
    from simconform.spec import load_spec

    path = Path(path)
    model: CampaignFile = validate(CampaignFile, load_yaml(path), path)
    base = path.resolve().parent

    for i, b in enumerate(model.backends):
        if b not in BACKENDS:
            raise UserError(path, f"backends.{i}", b, f"expected one of {', '.join(BACKENDS)}")
    if len(set(model.backends)) != len(model.backends):
        raise UserError(path, "backends", model.backends, "expected each backend once")
    if len(set(model.seeds)) != len(model.seeds):
        dup = next(s for s, n in Counter(model.seeds).items() if n > 1)
        raise UserError(path, "seeds", dup, "expected each seed once")

    spec_path = _existing(path, "spec", base, model.spec, DEMO_SPEC)
    spec = load_spec(spec_path)
    base_content = spec.model_dump(mode="json")
    variants = [_variant(path, n, o, base_content) for n, o in model.variants.items()]

    entries = model.worlds or [WorldEntry(world=DEMO_WORLD, trajectory=DEMO_TRAJECTORY)]
    fixed = None if model.duration == "auto" else model.duration
    scenes = [_scene(path, i, base, e, fixed) for i, e in enumerate(entries)]
    scenes = _named(path, scenes, entries)
    auto = {}
    if model.duration == "auto":
        auto = _auto_lengths(variants, scenes, model.confidence, model.interpolation)
    return Plan(
        file=path.resolve(),
        name=model.name or path.stem,
        backends=list(model.backends),
        seeds=list(model.seeds),
        variants=variants,
        scenes=scenes,
        duration=model.duration,
        confidence=model.confidence,
        storage=model.storage,
        spec=spec_path,
        interpolation=model.interpolation,
        localize=model.localize,
        auto=auto,
    )


AUTO_POWER = 0.8  # duration: auto plans for this power, as `run --duration auto`'s default


def _auto_lengths(variants: list[Variant], scenes: list[Scene], level: float, interp: str):
    """duration: auto, resolved once here so that cells and their hashes are fixed: the
    planned length of each variant on each scene, cut to the scene's trajectory."""
    from simconform.spec import Spec
    from simconform.trajectory import load_trajectory
    from simconform.verify.runlength import auto_length, plan_inputs
    from simconform.world import load_world

    out = {}
    for scene in scenes:
        world = load_world(scene.world)
        traj = load_trajectory(scene.trajectory, world, interp)
        span = (traj.end_ns - traj.start_ns) / 1e9
        for v in variants:
            spec = Spec.model_validate(v.content)
            plan = plan_inputs(spec, world, traj, level, AUTO_POWER)
            out[v.name, scene.name] = round(auto_length(plan, span).seconds, 3)
    return out


def _existing(file: Path, field: str, base: Path, value: Path | None, default: Path) -> Path:
    if value is None:
        return default
    p = (base / value).resolve()
    if not p.is_file():
        raise UserError(
            file, field, str(value), "expected an existing file (paths are relative to this file)"
        )
    return p


def _variant(file: Path, name: str, overrides: dict[str, Any], base: dict) -> Variant:
    """Base spec + `noise_scale` (every noise sigma times the factor) + dotted-path overrides."""
    from simconform.spec import Spec

    data = json.loads(json.dumps(base))  # deep copy of plain JSON data
    scale = overrides.get(NOISE_SCALE)
    if scale is not None:
        ok = isinstance(scale, int | float) and not isinstance(scale, bool)
        if not ok or not 0 < scale < 1e6:
            raise UserError(
                file, f"variants.{name}.{NOISE_SCALE}", scale, "expected a factor in (0, 1e6)"
            )
        for sensor in data.get("sensors", {}).values():
            _scale_sigmas(sensor.get("noise", {}), float(scale))
    for key, value in overrides.items():
        if key != NOISE_SCALE:
            _set_path(file, name, data, key, value)
    try:
        spec = Spec.model_validate(data)
    except ValidationError as err:
        e = from_validation(file, err)
        raise UserError(file, f"variants.{name}: spec {e.field}", e.value, e.allowed) from None
    content = spec.model_dump(mode="json")
    return Variant(name, dict(overrides), content, dump_yaml(content, sort_keys=False))


def _scale_sigmas(node: Any, k: float) -> None:
    if isinstance(node, dict):
        for key, v in node.items():
            if key == "sigma" and isinstance(v, list):
                node[key] = [x * k for x in v]
            elif key == "sigma" and isinstance(v, int | float):
                node[key] = v * k
            else:
                _scale_sigmas(v, k)


def _set_path(file: Path, vname: str, data: dict, path: str, value: Any) -> None:
    field = f"variants.{vname}.{path}"
    node: Any = data
    parts = path.split(".")
    for depth, part in enumerate(parts):
        at = ".".join(parts[:depth]) or "the spec's top level"
        last = depth == len(parts) - 1
        if isinstance(node, dict):
            if part not in node:
                keys = ", ".join(sorted(node)) or "(none)"
                allowed = f"no key {part!r} at {at}; expected a dotted spec path ({keys})"
                if depth == 0:
                    allowed += f" or {NOISE_SCALE}"
                raise UserError(file, field, value, allowed)
            if last:
                node[part] = value
            else:
                node = node[part]
        elif isinstance(node, list):
            if not part.isdigit() or int(part) >= len(node):
                raise UserError(
                    file, field, value, f"{at} is a list; expected an index in [0, {len(node)})"
                )
            if last:
                node[int(part)] = value
            else:
                node = node[int(part)]
        else:
            raise UserError(file, field, value, f"{at} is a value, not a mapping")


def _scene(file: Path, i: int, base: Path, e: WorldEntry, duration: float | None) -> Scene:
    from simconform.trajectory import load_trajectory
    from simconform.world import Mesh, load_world

    paths = []
    for key in ("world", "trajectory"):
        p = (base / getattr(e, key)).resolve()
        if not p.is_file():
            raise UserError(
                file,
                f"worlds.{i}.{key}",
                str(getattr(e, key)),
                "expected an existing file (paths are relative to the campaign file)",
            )
        paths.append(p)
    world_path, traj_path = paths
    world = load_world(world_path)
    traj = load_trajectory(traj_path, world)
    span = (traj.end_ns - traj.start_ns) / 1e9
    if duration is not None and duration * 1e9 > traj.end_ns - traj.start_ns + 0.5:
        raise UserError(
            file,
            "duration",
            duration,
            f"the trajectory {traj_path.name} of worlds.{i} spans only {span:g} s; "
            f"expected a duration in (0, {span:g}]",
        )
    meshes = [(world_path.parent / o.file).resolve() for o in world.objects if isinstance(o, Mesh)]
    everything = [world_path, *meshes, traj_path]
    root = Path(os.path.commonpath([p.parent for p in everything]))
    files: dict[str, str] = {}
    for p in everything:
        files.setdefault(str(p.relative_to(root)), _sha(p.read_bytes()))
    return Scene(e.name or "", world_path, traj_path, root, tuple(files.items()))


def _named(file: Path, scenes: list[Scene], entries: list[WorldEntry]) -> list[Scene]:
    """Scene names: given, else the world's stem, else world_trajectory stems; unique."""

    def clean(s: str) -> str:
        s = "".join(c if c.isalnum() or c == "_" else "_" for c in s).strip("_") or "world"
        return s[:40]

    stems = Counter(clean(s.world.stem) for s in scenes)
    out = []
    for s, e in zip(scenes, entries):
        name = e.name or clean(s.world.stem)
        if not e.name and stems[name] > 1:
            name = clean(f"{s.world.stem}_{s.trajectory.stem}")
        out.append(Scene(name, s.world, s.trajectory, s.root, s.files))
    seen = Counter(s.name for s in out)
    for i, s in enumerate(out):
        if seen[s.name] > 1:
            raise UserError(
                file, f"worlds.{i}.name", s.name, "expected a name no other world entry has"
            )
    return out
