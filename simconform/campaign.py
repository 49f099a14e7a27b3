"""Campaigns: one spec swept over backends x seeds x spec variants x worlds, one run per cell.

A campaign file (YAML, validated, unknown keys rejected, paths relative to the file) names the
matrix; every cell is an ordinary run folder DIR/cells/<backend>-s<seed>-<variant>-<scene>/
(bag, run.json, report/) made by `simconform.run.run` and `verify_run`, so everything that
reads a run reads a cell. Beside run.json, cell.json holds the cell's input hash (spec variant
content, world + mesh + trajectory file hashes, seed, backend, duration, storage, interpolation,
confidence, simconform version): a cell whose run is complete, verified and has the same hash
is not run again, so an interrupted or extended campaign resumes where it stopped.

DIR also holds specs/<variant>.yaml (the variant specs the cells ran), campaign.json,
campaign.md, junit.xml and plots/ (simconform.campaign_report), and .campaign-token. Cells of
an earlier matrix that the file no longer names stay on disk but out of the report. `--force`
runs every cell again.

A campaign file::

    spec: ../sensors_spec/rover.yaml          # default: the demo spec, world and trajectory
    backends: [reference]
    seeds: {start: 1, count: 8}               # or a list: [1, 2, 3]
    variants:                                 # name -> overrides of the spec
      nominal: {}
      sigma2x: {noise_scale: 2.0}             # every noise sigma of every sensor times 2
      lidar5cm: {sensors.lidar.noise.range.sigma: 0.05}   # dotted path -> value
    worlds: [{world: ../worlds/demo.yaml, trajectory: ../worlds/demo.tum}]
    duration: 5.0                             # s; default: the whole trajectory
    interpolation: spline                     # or linear (`simconform run --interpolation`)
    confidence: 0.95

Executors:

- ``local``: a ``concurrent.futures.ProcessPoolExecutor`` (spawn, so no fork of a threaded
  driver) of ``--jobs`` workers, at most one cell in flight per worker. A worker that dies
  (``BrokenProcessPool``) breaks the whole pool and every cell in flight with it; those cells
  are retried once, each in its own one-process pool, so the second attempt is attributed
  exactly: a cell that dies there too is reported ``crashed`` and the campaign goes on.
- ``ray``: each cell is a Ray task (``num_cpus=1``, ``max_retries=0``: retries are ours) on
  the cluster at ``--address`` (``local`` starts ``ray.init(num_cpus=jobs)`` in-process,
  ``auto`` joins a running cluster, ``ray://host:port`` is Ray Client). A task that dies
  (``WorkerCrashedError``, node death, OOM kill) is retried once, then reported ``crashed``.
  ``--jobs`` is num_cpus for ``local`` and a cap on cells in flight on a cluster (default: as
  many as the cluster schedules). Every node needs simconform installed.

Files come back to DIR either way. Inputs always travel with a Ray task (spec variant text,
world + meshes + trajectory bytes, put once in the object store). The worker runs in place,
straight into DIR/cells/<id>/, when it sees DIR's ``.campaign-token`` with this campaign's
token and every input file with the driver's hash (a shared filesystem); otherwise it runs in a
scratch folder and returns the run folder as an uncompressed tar, which the driver unpacks into
DIR/cells/<id>/. The bytes are identical either way; only the input paths written in such a
cell's run.json and report name the worker's scratch copies (cell.json names the driver's).

Backends are shipped to workers by their registry entry ("module:Class"), so a backend that
the driver registered at run time in ``simconform.registry.BACKENDS`` (a plugin) runs in the
workers too, provided its module is importable there. That is the only hook the tests use.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import io
import json
import logging
import multiprocessing as mp
import os
import secrets
import shutil
import socket
import sys
import tarfile
import tempfile
import time
import traceback
from collections import Counter, deque
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from simconform import __version__
from simconform.errors import UserError, from_validation, load_yaml, validate

TOKEN_FILE = ".campaign-token"
NAME = r"^[A-Za-z0-9][A-Za-z0-9_]{0,39}$"
MAX_SEED = 2**63
NOISE_SCALE = "noise_scale"
RAY_INSTALL = "install it with pip install 'simconform[ray]' (or pip install 'ray[default]')"
Transfer = Literal["auto", "archive"]


# --------------------------------------------------------------------------- campaign file


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


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


class WorldEntry(_Strict):
    """One world and the trajectory driven through it; `name` defaults to the world's stem."""

    world: Path
    trajectory: Path
    name: Name | None = None


class CampaignFile(_Strict):
    """The campaign YAML. Defaults: the demo spec and world, the reference backend."""

    name: Name | None = None
    spec: Path | None = None
    backends: list[str] = Field(default_factory=lambda: ["reference"], min_length=1)
    seeds: Annotated[list[Seed], BeforeValidator(_seed_list), Field(min_length=1)]
    variants: dict[Name, Annotated[dict[str, Any], BeforeValidator(_no_none)]] = Field(
        default_factory=lambda: {"nominal": {}}, min_length=1
    )
    worlds: list[WorldEntry] | None = Field(default=None, min_length=1)
    duration: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    confidence: Annotated[float, Field(ge=0.5, lt=1)] = 0.95
    storage: Literal["mcap", "sqlite3"] = "mcap"
    interpolation: Literal["spline", "linear"] = "spline"


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
                                duration=self.duration,
                                storage=self.storage,
                                interpolation=self.interpolation,
                                confidence=self.confidence,
                                hash=self._hash(backend, variant, scene, seed),
                                out=str(out / "cells" / cid),
                                root=str(out),
                                files=files,
                                world_rel=scene.files[0][0],
                                trajectory_rel=str(scene.trajectory.relative_to(scene.root)),
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
            "duration": self.duration,
            "storage": self.storage,
            "interpolation": self.interpolation,
            "confidence": self.confidence,
            "simconform": __version__,
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
    scenes = [_scene(path, i, base, e, model.duration) for i, e in enumerate(entries)]
    scenes = _named(path, scenes, entries)
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
    )


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
    return Variant(name, dict(overrides), content, yaml.safe_dump(content, sort_keys=False))


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
    for field in ("world", "trajectory"):
        p = (base / getattr(e, field)).resolve()
        if not p.is_file():
            raise UserError(
                file,
                f"worlds.{i}.{field}",
                str(getattr(e, field)),
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


# --------------------------------------------------------------------------- worker side


def execute_cell(
    cell: Cell,
    mode: Literal["shared", "auto", "archive"] = "shared",
    token: str | None = None,
    spec_text: str | None = None,
    scene_files: dict[str, bytes] | None = None,
) -> dict:
    """Run and verify one cell in this (worker) process.

    Never raises: not every exception pickles back (UserError does not), so failures come
    back as {"status": "error", ...}. Only the death of the process itself is a crash.
    """
    try:
        from simconform.registry import BACKENDS

        BACKENDS.setdefault(cell.backend, cell.backend_entry)
        if mode == "shared" or (mode == "auto" and _sees_driver(cell, token)):
            # what an attempt killed mid-run left behind (the folder is the campaign's own)
            shutil.rmtree(cell.out, ignore_errors=True)
            verdict, complete = _run(cell, cell.spec, cell.world, cell.trajectory, Path(cell.out))
            return {"status": "ran", "verdict": verdict, "complete": complete, "transfer": "shared"}
        if spec_text is None or scene_files is None:
            raise RuntimeError("this worker cannot see the campaign folder and got no inputs")
        with tempfile.TemporaryDirectory(prefix="simconform-cell-") as tmp:
            t = Path(tmp)
            (t / "spec").mkdir()
            spec = t / "spec" / Path(cell.spec).name
            spec.write_text(spec_text)
            for rel, data in scene_files.items():
                dest = t / "scene" / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(data)
            scene = t / "scene"
            verdict, complete = _run(
                cell, spec, scene / cell.world_rel, scene / cell.trajectory_rel, t / "run"
            )
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w") as tar:
                tar.add(t / "run", arcname=".")
            return {
                "status": "ran",
                "verdict": verdict,
                "complete": complete,
                "transfer": "archive",
                "archive": buf.getvalue(),
            }
    except Exception as exc:
        return {
            "status": "error",
            "error": f"{type(exc).__name__}: {' '.join(str(exc).split())}",
            "traceback": traceback.format_exc(limit=8),
        }


def _run(cell: Cell, spec, world, trajectory, out: Path) -> tuple[str, bool]:
    from simconform.run import RunConfig, run
    from simconform.verify.verifier import verify_run

    cfg = RunConfig(
        world=Path(world),
        spec=Path(spec),
        trajectory=Path(trajectory),
        backend=cell.backend,
        seed=cell.seed,
        out=out,
        duration=cell.duration,
        storage=cell.storage,
        interpolation=cell.interpolation,
        force=False,
    )
    result = run(cfg, progress=False)
    report = verify_run(result.out, cell.confidence)
    return report["verdict"], bool(report["run"]["complete"])


def timed_cell(cell: Cell, *args: Any) -> dict:
    """execute_cell plus where and how long it ran (what the executors submit)."""
    t0 = time.monotonic()
    res = execute_cell(cell, *args)
    res.update(pid=os.getpid(), host=socket.gethostname(), wall_s=time.monotonic() - t0)
    return res


def _sees_driver(cell: Cell, token: str | None) -> bool:
    """True on a filesystem shared with the driver: its token and identical inputs are here."""
    try:
        if token is None or (Path(cell.root) / TOKEN_FILE).read_text().strip() != token:
            return False
        return all(_sha(Path(p).read_bytes()) == sha for p, sha in cell.files)
    except OSError:
        return False


# --------------------------------------------------------------------------- executors

Outcome = tuple[Cell, dict, int]  # cell, worker result, attempts


def _crashed(why: str) -> dict:
    return {"status": "crashed", "error": why}


class LocalExecutor:
    """A spawn-context process pool with one cell in flight per worker (see module doc)."""

    name = "local"

    def __init__(self, jobs: int) -> None:
        self.jobs = jobs

    def open(self) -> None:
        """Nothing to connect to: workers start with the first cell."""

    def close(self) -> None:
        """Pools are shut down by execute() itself."""

    def execute(self, cells: list[Cell], token: str | None = None) -> Iterator[Outcome]:
        ctx = mp.get_context("spawn")
        todo, suspects = deque(cells), deque()
        attempts: Counter[str] = Counter()
        pool: ProcessPoolExecutor | None = None
        # future -> (cell, its own one-process pool for a retry, or None for the shared pool)
        inflight: dict[Future, tuple[Cell, ProcessPoolExecutor | None]] = {}
        try:
            while todo or suspects or inflight:
                while len(inflight) < self.jobs and (todo or suspects):
                    if suspects:
                        cell, own = suspects.popleft(), ProcessPoolExecutor(1, mp_context=ctx)
                        inflight[own.submit(timed_cell, cell)] = (cell, own)
                    else:
                        cell = todo.popleft()
                        if pool is None:
                            pool = _started_pool(min(self.jobs, len(todo) + 1), ctx)
                        inflight[pool.submit(timed_cell, cell)] = (cell, None)
                    attempts[cell.id] += 1
                done, _ = wait(inflight, return_when=FIRST_COMPLETED)
                broken = False
                for fut in done:
                    cell, own = inflight.pop(fut)
                    res = self._result(fut, cell, own)
                    if res is None:  # the shared pool died: retry in isolation
                        broken = True
                        suspects.append(cell)
                        continue
                    yield cell, res, attempts[cell.id]
                if broken and pool is not None:
                    rest = [f for f, (_, own) in inflight.items() if own is None]
                    wait(rest)  # a broken pool fails all of them promptly
                    for fut in rest:
                        cell, _ = inflight.pop(fut)
                        res = self._result(fut, cell, None)
                        if res is None:
                            suspects.append(cell)
                        else:
                            yield cell, res, attempts[cell.id]
                    pool.shutdown(wait=True)
                    pool = None
        finally:
            for _, own in inflight.values():
                if own is not None:
                    own.shutdown(wait=False, cancel_futures=True)
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)

    @staticmethod
    def _result(fut: Future, cell: Cell, own: ProcessPoolExecutor | None) -> dict | None:
        try:
            return fut.result()
        except BrokenProcessPool:
            if own is None:
                return None
            return _crashed("the worker process died twice (retried once in its own process)")
        except Exception as exc:  # pickling trouble and the like: not the cell's crash
            return {"status": "error", "error": f"{type(exc).__name__}: {exc}"}
        finally:
            if own is not None:
                own.shutdown(wait=False)


def _started_pool(size: int, ctx) -> ProcessPoolExecutor:
    """A pool whose `size` workers all run before any cell is submitted.

    A spawn-context pool starts workers on demand, and CPython (3.11-3.13) watches only the
    workers that existed when its manager thread last began to wait: the death of one started
    later goes unnoticed until some other result arrives, or forever if none does. Starting
    them all up front closes that gap.
    """
    pool = ProcessPoolExecutor(size, mp_context=ctx)
    try:
        for fut in [pool.submit(os.getpid) for _ in range(size)]:
            fut.result()
    except BrokenProcessPool:
        pool.shutdown(wait=True)
        raise RuntimeError(
            "campaign worker processes die at start-up; a script that calls run_campaign "
            "must guard its top level with `if __name__ == '__main__':`"
        ) from None
    return pool


def _import_ray():
    try:
        import ray
    except ImportError:
        raise UserError(None, "--executor", "ray", f"Ray is not installed; {RAY_INSTALL}") from None
    return ray


class RayExecutor:
    """One Ray task per cell; at most `jobs` in flight when jobs is given (see module doc)."""

    name = "ray"

    def __init__(self, jobs: int | None, address: str | None, transfer: Transfer, plan: Plan):
        self.jobs, self.address, self.transfer, self.plan = jobs, address, transfer, plan
        self.owned = False  # whether this executor started or joined Ray and must shut it down

    def open(self) -> None:
        """Connect (or start Ray) before anything is written, so a bad --address writes nothing."""
        ray = _import_ray()
        if ray.is_initialized():  # an embedding program's session is used as it is
            return
        quiet = {"log_to_driver": False, "logging_level": logging.WARNING}
        address = self.address or os.environ.get("RAY_ADDRESS") or "local"
        try:
            if address == "local":  # a new in-process instance even if another one runs
                cpus = self.jobs or os.cpu_count() or 1
                ray.init(address="local", num_cpus=cpus, include_dashboard=False, **quiet)
            else:
                ray.init(address=address, **quiet)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise UserError(
                None,
                "--address",
                address,
                f"could not connect to Ray ({' '.join(str(exc).split())[:160]}); expected "
                "local, auto (a running cluster) or ray://host:port",
            ) from None
        self.owned = True

    def close(self) -> None:
        if self.owned:
            _import_ray().shutdown()
            self.owned = False

    def execute(self, cells: list[Cell], token: str | None = None) -> Iterator[Outcome]:
        ray = _import_ray()
        names = ("WorkerCrashedError", "NodeDiedError", "OutOfMemoryError", "LocalRayletDiedError")
        crash_types = tuple(getattr(ray.exceptions, n) for n in names if hasattr(ray.exceptions, n))
        inflight: dict[Any, Cell] = {}
        try:
            task = ray.remote(num_cpus=1, max_retries=0)(timed_cell)
            specs = {v.name: ray.put(v.text) for v in self.plan.variants}
            scenes = {s.name: ray.put(scene_bundle(s)) for s in self.plan.scenes}
            todo = deque(cells)
            attempts: Counter[str] = Counter()
            limit = self.jobs or max(1, len(cells))
            while todo or inflight:
                while todo and len(inflight) < limit:
                    c = todo.popleft()
                    attempts[c.id] += 1
                    ref = task.remote(c, self.transfer, token, specs[c.variant], scenes[c.scene])
                    inflight[ref] = c
                ready, _ = ray.wait(list(inflight), num_returns=1)
                for ref in ready:
                    cell = inflight.pop(ref)
                    try:
                        res = ray.get(ref)
                    except crash_types as exc:
                        if attempts[cell.id] < 2:
                            todo.appendleft(cell)
                            continue
                        res = _crashed(f"the Ray worker died twice ({type(exc).__name__})")
                    except ray.exceptions.RayError as exc:
                        res = {"status": "error", "error": f"{type(exc).__name__}: {exc}"}
                    yield cell, res, attempts[cell.id]
        finally:
            for ref in inflight:
                with contextlib.suppress(Exception):  # best effort on the way out
                    ray.cancel(ref, force=True)


def scene_bundle(scene: Scene) -> dict[str, bytes]:
    """The scene's files (world, meshes, trajectory) by path relative to its root."""
    return {rel: (scene.root / rel).read_bytes() for rel, _ in scene.files}


# --------------------------------------------------------------------------- driver


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)


def _prepare(out: Path) -> str:
    """Refuse a non-empty folder that is not a campaign; return the campaign's token."""
    token_file = out / TOKEN_FILE
    if out.exists():
        if not out.is_dir():
            raise UserError(None, "--out", str(out), "expected a folder")
        if any(out.iterdir()) and not token_file.is_file():
            raise UserError(
                None,
                "--out",
                str(out),
                "is not empty and not a simconform campaign; choose another --out",
            )
    if token_file.is_file():
        return token_file.read_text().strip()
    out.mkdir(parents=True, exist_ok=True)
    token = secrets.token_hex(16)
    token_file.write_text(token + "\n")
    return token


def done_record(cell: Cell) -> dict | None:
    """The cell's record if its folder holds a complete, verified run with the same hash."""
    d = Path(cell.out)
    try:
        meta = json.loads((d / "cell.json").read_text())
        run = json.loads((d / "run.json").read_text())
        report = json.loads((d / "report" / "report.json").read_text())
    except (OSError, ValueError):
        return None
    if meta.get("hash") != cell.hash or not run.get("complete") or "verdict" not in report:
        return None
    rec = dict(meta["record"])
    rec.update(status=report["verdict"], verdict=report["verdict"], resumed=True)
    return rec


def _record(cell: Cell, res: dict, attempts: int) -> dict:
    if res["status"] == "ran" and not res.get("complete"):
        res = {**res, "status": "error", "error": "the run stopped before its end (a signal)"}
    rec = {
        "id": cell.id,
        "backend": cell.backend,
        "seed": cell.seed,
        "variant": cell.variant,
        "scene": cell.scene,
        "hash": cell.hash,
        "status": res.get("verdict") if res["status"] == "ran" else res["status"],
        "verdict": res.get("verdict"),
        "complete": res.get("complete", False),
        "attempts": attempts,
        "resumed": False,
        "wall_s": res.get("wall_s"),
        "worker": {"pid": res.get("pid"), "host": res.get("host")},
        "transfer": res.get("transfer"),
        "error": res.get("error"),
        "path": f"cells/{cell.id}",
    }
    return rec


def _untar(archive: bytes, dest: Path) -> None:
    """Unpack a worker's run folder; refuse links and paths leaving `dest` (old Pythons too)."""
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(dest, filter="data")
            return
        for m in tar.getmembers():
            target = (dest / m.name).resolve()
            if not (m.isfile() or m.isdir()) or not target.is_relative_to(dest.resolve()):
                raise RuntimeError(f"refusing {m.name!r} in a worker's run archive")
        tar.extractall(dest)


def finish_cell(cell: Cell, res: dict, attempts: int) -> dict:
    """Unpack a returned run folder, write cell.json, return the cell's record."""
    d = Path(cell.out)
    archive = res.pop("archive", None)
    if archive is not None:
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        _untar(archive, d)
    rec = _record(cell, res, attempts)
    d.mkdir(parents=True, exist_ok=True)
    meta = {
        "hash": cell.hash,
        "inputs": {
            "backend": cell.backend,
            "seed": cell.seed,
            "variant": cell.variant,
            "scene": cell.scene,
            "spec": cell.spec,
            "world": cell.world,
            "trajectory": cell.trajectory,
            "duration": cell.duration,
            "storage": cell.storage,
            "interpolation": cell.interpolation,
            "confidence": cell.confidence,
            "files_sha256": dict(cell.files),
        },
        "record": rec,
        "traceback": res.get("traceback"),
        "finished": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }
    _write_json(d / "cell.json", meta)
    return rec


def run_campaign(
    campaign: str | Path,
    out: str | Path,
    jobs: int | None = None,
    executor: str = "local",
    address: str | None = None,
    force: bool = False,
    progress: bool | None = None,
    transfer: Transfer = "auto",
) -> dict:
    """Run every cell that is not already done, then write the campaign report; returns it.

    `transfer="archive"` makes Ray workers always return run folders as tar bytes, as on a
    cluster without a shared filesystem (to check such a setup on one machine). The local pool
    spawns workers, so a script calling this must guard its top level with
    `if __name__ == "__main__":`.
    """
    from simconform.campaign_report import write_campaign_report

    if executor not in ("local", "ray"):
        raise UserError(None, "--executor", executor, "expected local or ray")
    if jobs is not None and jobs < 1:
        raise UserError(None, "--jobs", jobs, "expected at least 1 worker")
    if address is not None and executor != "ray":
        raise UserError(None, "--address", address, "only used with --executor ray")
    if transfer not in ("auto", "archive"):
        raise UserError(None, "transfer", transfer, "expected auto or archive")
    if executor == "ray":
        _import_ray()
    plan = load_campaign(campaign)
    out = Path(out).resolve()
    n_jobs = jobs or os.cpu_count() or 1
    ex: LocalExecutor | RayExecutor = (
        LocalExecutor(n_jobs) if executor == "local" else RayExecutor(jobs, address, transfer, plan)
    )
    ex.open()
    try:
        token = _prepare(out)
        (out / "specs").mkdir(exist_ok=True)
        for v in plan.variants:
            spec_file = out / "specs" / f"{v.name}.yaml"
            if not spec_file.is_file() or spec_file.read_text() != v.text:
                spec_file.write_text(v.text)
        cells = plan.cells(out)
        records: dict[str, dict] = {}
        if not force:
            for c in cells:
                rec = done_record(c)
                if rec is not None:
                    records[c.id] = rec
        todo = [c for c in cells if c.id not in records]
        for c in todo:
            shutil.rmtree(c.out, ignore_errors=True)
        t0 = time.monotonic()
        interrupted = False
        with CampaignProgress(len(cells), records.values(), progress) as bar:
            try:
                for cell, res, attempts in ex.execute(todo, token):
                    records[cell.id] = finish_cell(cell, res, attempts)
                    bar.done(records[cell.id])
            except KeyboardInterrupt:
                interrupted = True
    finally:
        ex.close()
    for c in cells:
        records.setdefault(c.id, {**_record(c, {"status": "not_run"}, 0), "error": None})
    meta = {
        "name": plan.name,
        "file": str(plan.file),
        "out": str(out),
        "executor": executor,
        "address": address,
        "jobs": n_jobs if executor == "local" else jobs,
        "spec": str(plan.spec),
        "backends": plan.backends,
        "seeds": plan.seeds,
        "variants": {v.name: v.overrides for v in plan.variants},
        "worlds": {
            s.name: {"world": str(s.world), "trajectory": str(s.trajectory)} for s in plan.scenes
        },
        "duration_s": plan.duration,
        "confidence": plan.confidence,
        "storage": plan.storage,
        "interpolation": plan.interpolation,
        "simconform": __version__,
        "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "wall_s": time.monotonic() - t0,
        "interrupted": interrupted,
    }
    report = write_campaign_report(out, meta, [records[c.id] for c in cells])
    if interrupted:
        raise KeyboardInterrupt
    return report


# --------------------------------------------------------------------------- progress + CLI

SYMBOL = {
    "pass": "[green]✓[/]",
    "fail": "[bold red]✗[/]",
    "inconclusive": "[yellow]?[/]",
    "not_applicable": "[dim]-[/]",
    "crashed": "[bold red]☠[/]",
    "error": "[bold red]![/]",
    "not_run": "[dim]·[/]",
}


class CampaignProgress:
    """One rich bar for the campaign, a line per finished cell; silent when not a terminal."""

    def __init__(self, total: int, resumed, enabled: bool | None) -> None:
        self.counts: Counter[str] = Counter(r["status"] for r in resumed)
        self.total = total
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self.p = None

    def __enter__(self) -> CampaignProgress:
        if self.enabled:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self.p = Progress(
                "[progress.description]{task.description}",
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=Console(stderr=True, highlight=False),
                transient=False,
            )
            self.p.start()
            self.task = self.p.add_task(self._desc(), total=self.total, completed=self.total_done)
            if self.total_done:
                self.p.console.print(f"resuming: {self.total_done} cells already done")
        return self

    @property
    def total_done(self) -> int:
        return sum(self.counts.values())

    def _desc(self) -> str:
        parts = [f"{SYMBOL[s]}{n}" for s, n in sorted(self.counts.items())]
        return "campaign " + " ".join(parts)

    def done(self, rec: dict) -> None:
        from rich.markup import escape

        self.counts[rec["status"]] += 1
        if self.p is None:
            return
        wall = f" {rec['wall_s']:.1f} s" if rec.get("wall_s") else ""
        note = f" ({escape(str(rec['error']))})" if rec.get("error") else ""
        tries = f", attempt {rec['attempts']}" if rec["attempts"] > 1 else ""
        self.p.console.print(
            f"{SYMBOL[rec['status']]} {rec['id']}: {rec['status']}{wall}{tries}{note}"
        )
        self.p.update(self.task, completed=self.total_done, description=self._desc())

    def __exit__(self, *exc) -> None:
        if self.p is not None:
            self.p.stop()


__all__ = [
    "CampaignFile",
    "Cell",
    "LocalExecutor",
    "Plan",
    "RayExecutor",
    "execute_cell",
    "load_campaign",
    "run_campaign",
]
