"""Orchestration of one conformance run: inputs -> backend truth -> pipeline -> bag -> verify.

Everything the user can get wrong is validated before the output folder is created. SIGINT and
SIGTERM stop the capture loop at the next sample; the bag is then closed normally, so what was
captured so far stays readable and run.json says "complete": false.
"""

from __future__ import annotations

import collections
import contextlib
import datetime as dt
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np
import pymap3d
from scipy.spatial.transform import Rotation

from simconform import __version__
from simconform.adapters.base import (
    CameraTruth,
    GnssTruth,
    ImuTruth,
    LidarTruth,
    OdomTruth,
    SensorBackend,
)
from simconform.bag import messages
from simconform.bag.writer import BagRecorder, TumWriter
from simconform.demo import DEMO_SPEC, DEMO_TRAJECTORY, DEMO_WORLD
from simconform.errors import UserError
from simconform.frames import Pose
from simconform.outdir import prepare_out, write_json_atomic
from simconform.pipeline.chain import SensorPipeline
from simconform.pipeline.noise import se2_increment
from simconform.pipeline.schedule import capture_times
from simconform.progress import progress_bar
from simconform.provenance import git_commit, sha256
from simconform.registry import get_backend
from simconform.spec import (
    OPTICAL_TO_BODY,
    CameraSpec,
    GnssSpec,
    ImuSpec,
    LidarSpec,
    OdomSpec,
    Spec,
    load_spec,
)
from simconform.trajectory import (
    DEFAULT_INTERPOLATION,
    Trajectory,
    check_interpolation,
    load_trajectory,
)
from simconform.world import World, load_world

TF_RATE_HZ = 50.0


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


@dataclass
class RunResult:
    out: Path
    complete: bool
    captures: dict[str, int] = field(default_factory=dict)
    published: dict[str, int] = field(default_factory=dict)
    stopped_by: str | None = None


@dataclass
class Inputs:
    world: World
    spec: Spec
    trajectory: Trajectory
    start_ns: int
    end_ns: int


def load_inputs(cfg: RunConfig) -> Inputs:
    world = load_world(cfg.world)
    spec = load_spec(cfg.spec)
    check_interpolation(cfg.interpolation)
    traj = load_trajectory(cfg.trajectory, world, cfg.interpolation)
    start, end = traj.start_ns, traj.end_ns
    span_s = (end - start) / 1e9
    if cfg.duration is not None:
        if not (cfg.duration > 0 and np.isfinite(cfg.duration)):
            raise UserError(None, "--duration", cfg.duration, "expected seconds > 0")
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
    return Inputs(world, spec, traj, start, end)


class _StopFlag:
    """Turns SIGINT/SIGTERM into a flag checked between samples."""

    def __init__(self) -> None:
        self.signal: str | None = None
        self._old: dict[int, object] = {}

    def __enter__(self) -> _StopFlag:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(ValueError):  # not the main thread: leave signals alone
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, _frame) -> None:
        self.signal = signal.Signals(signum).name

    def __exit__(self, *exc) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)


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


class SensorRecorder:
    """One sensor's truth and published samples as messages on its topic and its truth topic."""

    def __init__(self, name: str, spec: Spec, world: World, bag: BagRecorder, gt_dir: Path):
        self.name = name
        self.spec = spec
        self.s = spec.sensors[name]
        self.optical = f"{name}_optical_frame"
        self.topic = spec.topic(name)
        self.frame = spec.frame(name)
        self.base = spec.base_frame
        self.bag = bag
        self.origin = world.origin
        self.gt = TumWriter(gt_dir / f"{name}.tum")
        self.mount = Pose.from_xyz_rpy(self.s.mount.xyz, self.s.mount.rpy)
        self.prev: dict[str, OdomTruth] = {}
        self.captures = 0
        self.published = 0

    KINDS: ClassVar[dict] = {
        LidarSpec: messages.POINTCLOUD2,
        ImuSpec: messages.IMU,
        GnssSpec: messages.NAVSATFIX,
        OdomSpec: messages.ODOMETRY,
    }

    def topics(self) -> list[tuple[str, str]]:
        """Every (topic, type) this sensor writes, published first, then truth."""
        pub, truth = self.spec.data_topics(self.name)
        if isinstance(self.s, CameraSpec):
            img = messages.COMPRESSED if self.s.encoding == "jpeg" else messages.IMAGE
            out = [
                (pub, img),
                (f"{self.topic}/camera_info", messages.CAMERA_INFO),
                (truth, messages.IMAGE),
            ]
            if self.s.depth:
                out.append((f"/truth{self.topic}/depth", messages.IMAGE))
            return out
        kind = self.KINDS[type(self.s)]
        return [(pub, kind), (truth, kind)]

    def record(self, t_ns: int, truth, published, xyz, quat) -> None:
        self.captures += 1
        self.gt.write(t_ns, xyz, quat)
        for topic, kind, msg in self._truth_msgs(truth, t_ns):
            self.bag.push(topic, kind, msg, t_ns)
        if published.sample is not None:
            self.published += 1
            for topic, kind, msg in self._published_msgs(published.sample, t_ns):
                self.bag.push(topic, kind, msg, published.publish_ns)

    def _truth_msgs(self, truth, t_ns: int):
        topics = self.topics()
        if isinstance(truth, CameraTruth):
            yield topics[2][0], messages.IMAGE, messages.image_rgb8(truth.image, t_ns, self.optical)
            if truth.depth is not None:
                yield (
                    topics[3][0],
                    messages.IMAGE,
                    messages.image_depth(truth.depth, t_ns, self.optical),
                )
            return
        yield topics[1][0], topics[1][1], self._msg(truth, t_ns, "truth")

    def _published_msgs(self, sample, t_ns: int):
        topics = self.topics()
        if isinstance(sample, CameraTruth):
            s = self.s
            if sample.encoded is not None:
                yield (
                    topics[0][0],
                    messages.COMPRESSED,
                    messages.compressed(sample.encoded, t_ns, self.optical),
                )
            else:
                yield (
                    topics[0][0],
                    messages.IMAGE,
                    messages.image_rgb8(sample.image, t_ns, self.optical),
                )
            info = messages.camera_info(s.k(), s.width, s.height, t_ns, self.optical)
            yield topics[1][0], messages.CAMERA_INFO, info
            return
        yield topics[0][0], topics[0][1], self._msg(sample, t_ns, "pub")

    def _msg(self, sample, t_ns: int, which: str):
        s = self.s
        if isinstance(sample, LidarTruth):
            return messages.cloud(sample, t_ns, self.frame)
        if isinstance(sample, ImuTruth):
            av = np.square(s.noise.accel.sigma)
            gv = np.square(s.noise.gyro.sigma)
            return messages.imu(sample, t_ns, self.frame, av, gv, with_orientation=which == "truth")
        if isinstance(sample, GnssTruth):
            o = self.origin
            lla = pymap3d.enu2geodetic(*sample.enu, o.lat, o.lon, o.alt)
            return messages.navsat(lla, t_ns, self.frame, np.square(s.noise.position.sigma))
        if isinstance(sample, OdomTruth):
            prev = self.prev.get(which)
            twist = np.zeros(3) if prev is None else se2_increment(prev, sample) * s.rate_hz
            self.prev[which] = sample
            var = np.square(s.noise.increment.sigma) * s.rate_hz
            return messages.odometry(sample, twist, t_ns, "odom", self.base, var)
        raise TypeError(type(sample).__name__)

    def close(self) -> None:
        self.gt.close()


def run(cfg: RunConfig, progress: bool | None = None) -> RunResult:
    inp = load_inputs(cfg)
    if cfg.noise not in ("pipeline", "engine"):
        raise UserError(None, "--noise", cfg.noise, "expected pipeline or engine")
    backend: SensorBackend = get_backend(cfg.backend, cfg.emulate)
    if cfg.noise == "engine":
        if not backend.supports_engine_noise:
            raise UserError(
                None,
                "--noise",
                "engine",
                f"the {cfg.backend} backend has no noise models of its own; only --backend "
                "gazebo supports --noise engine (use --noise pipeline)",
            )
        backend.use_engine_noise(cfg.seed)
    backend.open(inp.world, inp.spec)  # BackendUnavailable surfaces before anything is written
    try:
        prepare_out(cfg.out, cfg.force)
        backend.run_dir = cfg.out  # engines keep their logs in the run folder
        pool = None
        if (
            cfg.jobs > 0
            and backend.prefetch
            and any(isinstance(s, LidarSpec | CameraSpec) for s in inp.spec.sensors.values())
        ):
            from simconform.prefetch import CapturePool

            pool = CapturePool(
                cfg.jobs,
                cfg.backend,
                cfg.world,
                cfg.spec,
                cfg.trajectory,
                cfg.interpolation,
                cfg.emulate,
            )
        try:
            return _record(cfg, inp, backend, progress, pool, backend.engine_noise_plan())
        finally:
            if pool is not None:
                pool.close()
    finally:
        backend.close()


def _manifest(cfg: RunConfig, inp: Inputs, engine_plan: dict) -> dict:
    extra = {}
    if cfg.noise == "engine":  # per sensor: what the engine applied, what simconform applied
        extra["noise_stages"] = engine_plan
    return {
        "simconform": __version__,
        "git_commit": git_commit(),
        "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "backend": cfg.backend,
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
        "start_ns": inp.start_ns,
        "end_ns": inp.end_ns,
        "tf_rate_hz": TF_RATE_HZ,
        "spec_content": inp.spec.model_dump(mode="json"),
        "world_content": inp.world.model_dump(mode="json"),
        "complete": False,
        "stopped_by": None,
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
    out.mkdir(parents=True)
    (out / "gt").mkdir()
    engine_plan = engine_plan or {}
    manifest = _manifest(cfg, inp, engine_plan)
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
        _Feed(
            backend,
            n,
            spec.sensors[n].rate_hz,
            inp,
            rec.mount,
            pool if isinstance(spec.sensors[n], LidarSpec | CameraSpec) else None,
        )
        for n, rec in zip(names, recorders)
    ]
    tf_feed = _Feed(None, "tf", TF_RATE_HZ, inp, Pose.identity())
    result = RunResult(out=out, complete=False)
    bar = progress_bar(len(times), progress)
    try:
        with _StopFlag() as stop:
            for i, (t, w) in enumerate(zip(times.tolist(), who.tolist())):
                if stop.signal:
                    result.stopped_by = stop.signal
                    break
                if w < 0:
                    _, xyz, q = tf_feed.next(t)
                    tf = messages.transforms([(t, "odom", spec.base_frame, xyz, q)])
                    bag.push("/tf", messages.TFMESSAGE, tf, t)
                    base_gt.write(t, xyz, q)
                else:
                    truth, xyz, q = feeds[w].next(t)
                    published = pipelines[w].process(truth, t)
                    recorders[w].record(t, truth, published, xyz, q)
                bag.advance(t)
                if bar is not None and i % 200 == 0:
                    bar.update(i)
            else:
                result.complete = True
    finally:
        bag.close()
        base_gt.close()
        for rec in recorders:
            rec.close()
        if bar is not None:
            bar.close()
        result.captures = {r.name: r.captures for r in recorders}
        result.published = {r.name: r.published for r in recorders}
        manifest.update(
            complete=result.complete,
            stopped_by=result.stopped_by,
            captures=result.captures,
            published=result.published,
        )
        write_json_atomic(out / "run.json", manifest)
    return result


class _Feed:
    """One sensor's captures in order: truth from the backend in batches of about one second of
    simulation time (so backends can vectorise), and the sensor's ground-truth pose. With a
    CapturePool, the next batches are rendered ahead in worker processes."""

    AHEAD = 3  # batches in flight per sensor

    def __init__(
        self, backend, name: str, rate_hz: float, inp: Inputs, mount: Pose, pool=None
    ) -> None:
        self.backend, self.name, self.traj, self.pool = backend, name, inp.trajectory, pool
        times = capture_times(rate_hz, inp.start_ns, inp.end_ns)
        step = max(1, int(rate_hz))
        self.chunks = [times[i : i + step] for i in range(0, len(times), step)]
        self.mount = mount
        self.next_chunk = 0
        self.pending: collections.deque = collections.deque()
        self.times = np.zeros(0, dtype=np.int64)
        self.buffer: list = []
        self.j = 0

    def _request(self) -> None:
        while self.next_chunk < len(self.chunks) and len(self.pending) < (
            self.AHEAD if self.pool else 1
        ):
            chunk = self.chunks[self.next_chunk]
            self.next_chunk += 1
            if self.backend is None:
                work = [None] * len(chunk)
            elif self.pool is not None:
                work = self.pool.submit(self.name, chunk)
            else:
                work = self.backend.capture_batch(self.name, chunk, self.traj)
            self.pending.append((chunk, work))

    def next(self, t_ns: int):
        if self.j >= len(self.buffer):
            self._request()
            chunk, work = self.pending.popleft()
            self.buffer = work if isinstance(work, list) else work.result()
            poses = self.traj.pose_at(chunk).compose(self.mount)
            self.times, self.buf_xyz, self.buf_q = chunk, poses.t, poses.quat()
            self.j = 0
            self._request()
        if int(self.times[self.j]) != t_ns:
            raise RuntimeError(f"{self.name}: capture schedule out of step at {t_ns} ns")
        j = self.j
        self.j += 1
        return self.buffer[j], self.buf_xyz[j], self.buf_q[j]
