"""Orchestration of one conformance run: inputs -> backend truth -> pipeline -> bag -> verify.

Everything the user can get wrong is validated before the output folder is created. SIGINT and
SIGTERM stop the capture loop at the next sample; the bag is then closed normally, so what was
captured so far stays readable and run.json says "complete": false.

run.json is written before the first capture with "state": "recording" (and the pid and host
of the process), and rewritten when the run ends: "state" finished, interrupted (a signal) or
failed (an error), "recorded_end_ns" (the time the capture loop reached: the end of the
recorded span), and "outputs", the SHA-256 and size of every file in bag/ and gt/. A run killed
outright (SIGKILL, power loss) keeps "state": "recording"; `verify` then recovers what the bag
holds (verify/integrity.py).

About 420 lines: the capture loop, its stop rule and run.json's life cycle are one state
machine; the parts that stand alone are already out (prefetch.py, feed.py, runplan.py).
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from scipy.spatial.transform import Rotation
from threadpoolctl import threadpool_limits

from simconform.adapters.base import EngineError, SensorBackend
from simconform.bag import messages
from simconform.bag.objects import ObjectsRecorder, objects_lidar
from simconform.bag.packed import TfPacker
from simconform.bag.sensor_recorder import SensorRecorder
from simconform.bag.writer import BagRecorder, TumWriter
from simconform.budget import Estimate, estimate
from simconform.budget import check as check_budget
from simconform.demo import DEMO_SPEC, DEMO_TRAJECTORY, DEMO_WORLD
from simconform.errors import UserError
from simconform.feed import Feed, StopFlag, Stopped
from simconform.frames import Pose
from simconform.outdir import check_target, claim, io_error, write_json_atomic
from simconform.pipeline.chain import SensorPipeline
from simconform.pipeline.schedule import capture_times
from simconform.progress import progress_bar
from simconform.provenance import output_digests, recorded_header, sha256
from simconform.registry import get_backend
from simconform.spec import (
    OPTICAL_TO_BODY,
    CameraSpec,
    LidarSpec,
    Spec,
    load_spec,
)
from simconform.trajectory import (
    DEFAULT_INTERPOLATION,
    MAX_STAMP_S,
    Trajectory,
    check_interpolation,
    load_trajectory,
)
from simconform.world import World, load_world

TF_RATE_HZ = 50.0
# The clock a trajectory's t = 0 is put at, in whole seconds since 1970: 2024-01-01T00:00:00Z,
# fixed so that the same run file records the same bag (a consumer that takes stamps near 1970
# for "no time" sees a real clock). A trajectory whose stamps are already on a real clock
# (from 2001 on: REAL_CLOCK_NS) keeps them; `--epoch` sets it (0: the trajectory's own clock).
DEFAULT_EPOCH_S = 1_704_067_200
REAL_CLOCK_NS = 1_000_000_000 * 1_000_000_000


@dataclass
class RunConfig:
    world: Path = DEMO_WORLD
    spec: Path = DEMO_SPEC
    trajectory: Path = DEMO_TRAJECTORY
    backend: str = "reference"
    seed: int = 1234
    out: Path = Path("runs/demo")
    duration: float | None = None
    storage: str = "mcap"
    force: bool = False
    jobs: int = 0  # worker processes rendering lidar/camera ahead; 0 renders in-process
    interpolation: str = DEFAULT_INTERPOLATION  # between the trajectory's poses: spline, linear
    noise: str = "pipeline"  # "engine": the backend's own noise models (gazebo only)
    emulate: str | None = None  # reference only: render as that engine does ("gazebo")
    max_memory: int | None = None  # bytes: refuse a run estimated to need more
    max_disk: int | None = None
    epoch: int | None = None  # s since 1970 at trajectory t = 0; None: DEFAULT_EPOCH_S


@dataclass
class RunResult:
    out: Path
    complete: bool
    captures: dict[str, int] = field(default_factory=dict)
    published: dict[str, int] = field(default_factory=dict)
    stopped_by: str | None = None
    recorded_end_ns: int | None = None  # the capture loop reached this time (end of the span)


@dataclass
class Inputs:
    world: World
    spec: Spec
    trajectory: Trajectory
    start_ns: int
    end_ns: int
    epoch_s: int = 0  # added to the trajectory's stamps (DEFAULT_EPOCH_S)


def load_inputs(cfg: RunConfig) -> Inputs:
    world = load_world(cfg.world)
    spec = load_spec(cfg.spec)
    check_interpolation(cfg.interpolation)
    traj = load_trajectory(cfg.trajectory, world, cfg.interpolation)
    epoch = cfg.epoch
    if epoch is None:
        epoch = 0 if traj.start_ns >= REAL_CLOCK_NS else DEFAULT_EPOCH_S
    # every stamp, the trajectory's last one included, must fit a ROS 2 stamp's int32 seconds
    top = MAX_STAMP_S - 1 - -(-traj.end_ns // 1_000_000_000)
    if isinstance(epoch, bool) or not isinstance(epoch, int) or not 0 <= epoch <= top:
        raise UserError(
            None,
            "--epoch",
            epoch,
            f"expected whole seconds in [0, {top}] (this trajectory's stamps then stay below "
            f"2^31 s, a ROS 2 stamp's int32 seconds)",
        )
    traj = traj.shifted(epoch)
    start, end = traj.start_ns, traj.end_ns
    span_s = (end - start) / 1e9
    if cfg.duration is not None:
        if not (np.isfinite(cfg.duration) and round(cfg.duration * 1e9) >= 1):
            raise UserError(None, "--duration", cfg.duration, "expected finite seconds >= 1e-9")
        if cfg.duration * 1e9 > end - start + 0.5:
            raise UserError(
                cfg.trajectory,
                "--duration",
                cfg.duration,
                f"the trajectory spans only {span_s:g} s; expected a duration in (0, {span_s:g}]",
            )
        end = start + round(cfg.duration * 1e9)
    if cfg.seed < 0 or cfg.seed >= 2**63:
        raise UserError(None, "--seed", cfg.seed, "expected an integer in [0, 2^63)")
    return Inputs(world, spec, traj, start, end, epoch)


def schedule(spec: Spec, start_ns: int, end_ns: int) -> tuple[np.ndarray, np.ndarray]:
    """All capture events (t_ns, sensor index; index -1 is the /tf tick) in time order."""
    times, who = [capture_times(TF_RATE_HZ, start_ns, end_ns)], [None]
    for i, s in enumerate(spec.sensors.values()):
        times.append(capture_times(s.rate_hz, start_ns, end_ns))
        who.append(i)
    t = np.concatenate(times)
    idx = np.concatenate([np.full(len(a), -1 if w is None else w) for a, w in zip(times, who)])
    order = np.lexsort((idx, t))
    return t[order], idx[order]


@dataclass
class Prepared:
    """A run validated and planned, before its engine opens or its folder is touched."""

    inputs: Inputs
    backend: SensorBackend
    workers: int  # capture worker processes (0: heavy sensors render in-process)
    estimate: Estimate


def prepare(cfg: RunConfig) -> Prepared:
    """Validate the inputs and flags and estimate the run's memory and disk (writes nothing)."""
    inp = load_inputs(cfg)
    if cfg.noise not in ("pipeline", "engine"):
        raise UserError(None, "--noise", cfg.noise, "expected pipeline or engine")
    backend: SensorBackend = get_backend(cfg.backend, cfg.emulate)
    if cfg.noise == "engine" and not backend.supports_engine_noise:
        raise UserError(
            None,
            "--noise",
            "engine",
            f"the {cfg.backend} backend has no noise models of its own; only --backend "
            "gazebo supports --noise engine (use --noise pipeline)",
        )
    if inp.world.actors and not backend.moves_actors:
        from simconform.actors import refuse_actors

        engine = cfg.backend + (f" --emulate {cfg.emulate}" if cfg.emulate else "")
        refuse_actors(inp.world, engine)
    heavy = any(isinstance(s, LidarSpec | CameraSpec) for s in inp.spec.sensors.values())
    workers = cfg.jobs if cfg.jobs > 0 and backend.prefetch and heavy else 0
    est = estimate(inp.spec, inp.start_ns, inp.end_ns, workers, cfg.storage, cfg.emulate, cfg.jobs)
    return Prepared(inp, backend, workers, est)


def check_resources(cfg: RunConfig, p: Prepared) -> list[str]:
    """Refuse (UserError) a run whose estimate exceeds the machine or --max-memory/--max-disk."""
    return check_budget(p.estimate, cfg.out, cfg.max_memory, cfg.max_disk, cfg.spec)


def run(cfg: RunConfig, progress: bool | None = None) -> RunResult:
    """Record one run. BLAS runs on one thread meanwhile, here and in the capture workers
    (simconform/prefetch.py): the run's parallelism is its processes, and OpenBLAS's own
    threads, one per core in every process, fight them for the cores (with one core busy
    elsewhere a demo camera frame took 131 ms instead of 8)."""
    with threadpool_limits(limits=1, user_api="blas"):
        return _run(cfg, progress)


def _run(cfg: RunConfig, progress: bool | None) -> RunResult:
    p = prepare(cfg)
    inp, backend = p.inputs, p.backend
    check_target(cfg.out, "run", cfg.force)  # before an engine starts
    check_resources(cfg, p)  # before anything is allocated
    if cfg.noise == "engine":
        backend.use_engine_noise(cfg.seed)
    backend.open(inp.world, inp.spec)  # BackendUnavailable surfaces before anything is written
    try:
        with claim(cfg.out, "run", cfg.force) as out:
            out.declare("run.json", "bag/", "gt/", *backend.run_outputs)
            backend.run_dir = cfg.out  # engines keep their logs in the run folder
            pool = None
            if p.workers:
                from simconform.prefetch import CapturePool

                pool = CapturePool(
                    p.workers,
                    cfg.backend,
                    cfg.world,
                    cfg.spec,
                    cfg.trajectory,
                    cfg.interpolation,
                    cfg.emulate,
                    inp.epoch_s,
                    cfg.seed,
                    tuple(backend.engine_noise_plan()),
                )
            try:
                result = _record(cfg, inp, backend, progress, pool, backend.engine_noise_plan())
            except BaseException as exc:
                if pool is not None:
                    pool.close(kill=True)
                place = io_error(cfg.out, exc, "; the run stopped, marked incomplete")
                if place is not None:
                    raise place from None
                raise
            if pool is not None:
                pool.close(kill=result.stopped_by is not None)
            out.seal()
            return result
    finally:
        backend.close()


def _manifest(cfg: RunConfig, inp: Inputs, engine_plan: dict, engine: str | None) -> dict:
    extra = {}
    if cfg.noise == "engine":  # per sensor: what the engine applied, what simconform applied
        extra["noise_stages"] = engine_plan
    return {
        **recorded_header(),
        "backend": cfg.backend,
        "engine_version": engine,
        "seed": cfg.seed,
        "noise": cfg.noise,
        "emulate": cfg.emulate,
        **extra,
        "storage": cfg.storage,
        "spec": str(cfg.spec),
        "world": str(cfg.world),
        "trajectory": str(cfg.trajectory),
        "spec_sha256": sha256(Path(cfg.spec)),
        "world_sha256": sha256(Path(cfg.world)),
        "trajectory_sha256": sha256(Path(cfg.trajectory)),
        "interpolation": cfg.interpolation,
        "epoch_s": inp.epoch_s,
        "start_ns": inp.start_ns,
        "end_ns": inp.end_ns,
        "tf_rate_hz": TF_RATE_HZ,
        "spec_content": inp.spec.model_dump(mode="json"),
        "world_content": inp.world.model_dump(mode="json"),
        "complete": False,
        "stopped_by": None,
        "state": "recording",  # until the run ends: finished, interrupted or failed
        "pid": os.getpid(),
        "host": socket.gethostname(),
    }


def _record(
    cfg: RunConfig,
    inp: Inputs,
    backend: SensorBackend,
    progress: bool | None,
    pool=None,
    engine_plan: dict | None = None,
) -> RunResult:
    out = cfg.out
    out.mkdir(parents=True, exist_ok=True)  # claimed, so ours and emptied
    (out / "gt").mkdir()
    engine_plan = engine_plan or {}
    manifest = _manifest(cfg, inp, engine_plan, backend.engine_version())
    t0 = time.monotonic()
    write_json_atomic(out / "run.json", manifest)

    spec = inp.spec
    names = list(spec.sensors)
    bag = BagRecorder(out / "bag", cfg.storage)
    recorders = [SensorRecorder(n, spec, inp.world, bag, out / "gt") for n in names]
    pipelines = [
        SensorPipeline(n, spec.sensors[n], cfg.seed, engine_noise=n in engine_plan) for n in names
    ]
    for rec in recorders:  # fixed connection order keeps the bag byte-identical
        for topic, kind in rec.topics():
            bag.connection(topic, kind)
    bag.connection("/tf", messages.TFMESSAGE)
    bag.connection("/tf_static", messages.TFMESSAGE, latched=True)
    # /truth/objects follows the first lidar, where the world has anything to label
    labelled = inp.world.actors or any(o.class_ for o in inp.world.objects)
    lidar = objects_lidar(spec) if labelled else None
    objects = ObjectsRecorder(inp.world, spec, lidar, bag, inp.start_ns) if lidar in names else None
    objects_at = names.index(lidar) if objects is not None else -1
    ident = Pose.identity()
    static = [(inp.start_ns, "map", "odom", ident.t, ident.quat())]
    static += [
        (inp.start_ns, spec.base_frame, spec.frame(n), r.mount.t, r.mount.quat())
        for n, r in zip(names, recorders)
    ]
    optical = Rotation.from_matrix(OPTICAL_TO_BODY).as_quat()
    static += [
        (inp.start_ns, spec.frame(n), r.optical, np.zeros(3), optical)
        for n, r in zip(names, recorders)
        if isinstance(r.s, CameraSpec)
    ]
    bag.push("/tf_static", messages.TFMESSAGE, messages.transforms(static), inp.start_ns)
    base_gt = TumWriter(out / "gt" / "base_link.tum")

    times, who = schedule(spec, inp.start_ns, inp.end_ns)
    feeds = [
        Feed(
            backend,
            n,
            spec.sensors[n].rate_hz,
            inp,
            rec.mount,
            pool if isinstance(spec.sensors[n], LidarSpec | CameraSpec) else None,
        )
        for n, rec in zip(names, recorders)
    ]
    tf_feed = Feed(None, "tf", TF_RATE_HZ, inp, Pose.identity())
    tf_packer = TfPacker()
    # /tf's odom -> base_link is the estimate /odom publishes (sensor_recorder), so /tf and
    # /odom agree; truth has a frame of its own, map -> truth/<base>. Without an odometry
    # sensor there is no estimate, and odom -> base_link is the truth
    estimated = any(r.tf_estimate for r in recorders)
    truth_base = f"truth/{spec.base_frame}"
    result = RunResult(out=out, complete=False)
    bar = progress_bar(len(times), progress)
    now = inp.start_ns
    failure: BaseException | None = None
    try:
        with StopFlag() as stop:
            for i, (t, w) in enumerate(zip(times.tolist(), who.tolist())):
                if stop.signal and t >= now:  # an instant begun is finished: [start, now) whole
                    result.stopped_by = stop.signal
                    break
                if w < 0:
                    _, _, xyz, q = tf_feed.next(t)
                    items = [(t, "map", truth_base, xyz, q)]
                    if not estimated:
                        items.append((t, "odom", spec.base_frame, xyz, q))
                    bag.push("/tf", messages.TFMESSAGE, tf_packer.pack(items), t)
                    base_gt.write(t, xyz, q)
                else:
                    try:
                        truth, noisy, xyz, q = feeds[w].next(t, stop)
                    except (Stopped, EngineError) as exc:
                        # Stopped: a worker kept us waiting after the signal; an EngineError
                        # after it: the signal reached the engine too (a server sharing the
                        # terminal), an interruption, not an engine failure
                        if isinstance(exc, EngineError) and not stop.signal:
                            raise
                        result.stopped_by = stop.signal
                        now = min(now, t)  # this instant is not whole: the span ends before it
                        break
                    published = pipelines[w].process(truth, t, noisy)
                    recorders[w].record(t, truth, published, xyz, q)
                    if w == objects_at:
                        log_ns = t + spec.sensors[lidar].stamp_offset_ns()
                        objects.record(t, truth.objects, Pose.from_xyz_quat(xyz, q), log_ns)
                bag.advance(t)
                now = t + 1  # the recorded span [start, now) holds every event recorded so far
                if bar is not None and i % 200 == 0:
                    bar.update(i)
            else:
                result.complete = True
                now = inp.end_ns
                if bar is not None:  # every instant recorded (the updates come every 200th)
                    bar.update(len(times))
    except BaseException as exc:
        failure = exc
        at = (t - inp.start_ns) / 1e9
        why = f"; the run stopped at t = {at:.3f} s, its folder keeps what it recorded, marked "
        place = io_error(out, exc, why + "incomplete")
        if place is not None:
            raise place from None
        raise
    finally:
        # a full disk fails the closes too: close everything, keep the first error
        propagating = failure is not None
        for close in (bag.close, base_gt.close, *(rec.close for rec in recorders)):
            try:
                close()
            except Exception as exc:
                failure = failure or exc
        if bar is not None:
            bar.close()
        result.captures = {r.name: r.captures for r in recorders}
        result.published = {r.name: r.published for r in recorders}
        result.complete = result.complete and failure is None
        result.recorded_end_ns = now
        state = "finished" if result.complete else "interrupted" if result.stopped_by else "failed"
        manifest.update(
            complete=result.complete,
            stopped_by=result.stopped_by,
            captures=result.captures,
            published=result.published,
            state=state,
            recorded_end_ns=now,
            wall_s=round(time.monotonic() - t0, 3),
        )
        if failure is not None and not isinstance(failure, KeyboardInterrupt):
            at = (now - inp.start_ns) / 1e9
            why = " ".join(str(failure).split())[:300]
            manifest["error"] = f"{type(failure).__name__}: {why}"
            manifest["incomplete_reason"] = f"stopped at t = {at:.3f} s by {manifest['error']}"
        try:
            manifest["outputs"] = output_digests(out)
            write_json_atomic(out / "run.json", manifest)
        except OSError:
            if failure is None:
                raise
            # run.json keeps the "complete": false it was written with at the start
        if failure is not None and not propagating:
            raise failure
    return result
