"""The resource estimate of a run: memory and disk, per sensor, before anything is captured.

This is a model, not a measurement. Its terms are bytes per lidar ray or camera pixel (or per
sample for the small sensors) times the counts the spec and the run length give, for each place
the run keeps data:

- the backend's static tables (a lidar's ray directions, a camera's pixel rays);
- truth rendered ahead: the capture loop holds the batch being consumed and the next one (with
  `--jobs`, the batches in flight per sensor, plus each worker's own copy while it pickles one);
- the peak of rendering one capture (the reference backend casts every ray of a sweep at once);
- serialized messages waiting in the bag writer's queue for their publish time (latency);
- the verifier's accumulators, which stop growing with the run (verify/streaming.py): a lidar's
  range errors up to its two reservoirs, a series' rows up to its reservoir, and the truth of
  dropped samples, each held for its latency plus the pairing's slack (verify/pairing.py);
- the bag on disk: messages at their serialized size, clouds and truth images at the share
  MCAP's zstd chunks keep of them (ZSTD_CLOUD, ZSTD_IMAGE: scene-dependent, so the disk
  estimate is the least exact part), the gt/*.tum lines and the report.

Recording and verifying run one after the other, so the memory estimate is the larger of the
two phases: recording with every worker of the capture pool, verifying with the worker
processes that read a long camera run's bag beside the one that writes its report (its
cameras in one, the other sensors in the other, or with `--jobs 1` everything in one:
`verify_readers`, verify/parallel.py). The constants were
measured with tracemalloc, peak RSS and summed PSS on the reference backend (`python
bench/budget.py --demo`; docs/resources.md); tests/test_output_safety.py checks a real run's
peak RSS against this estimate.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from simconform.bag.cloud import LAYOUTS
from simconform.errors import UserError
from simconform.lifeline import usable_cpus
from simconform.pipeline.schedule import expected_count
from simconform.spec import CameraSpec, LidarSpec, Spec

MiB = 1 << 20

# the Python process itself (numpy, scipy, numba, rosbags, matplotlib for the plots): peak RSS
# of a 1 s run of one IMU with its report (294 MiB measured 2026-12-06), and the PSS of a
# capture worker beyond its batches (the demo's workers: 255 MiB with 73 MiB of batches)
BASE_PROCESS = 300 * MiB
BASE_WORKER = 185 * MiB

# a lidar, bytes per ray
LIDAR_STATIC = 24  # directions (float64 x 3); --emulate gazebo adds its texel rays
LIDAR_STATIC_EMULATED = 25
LIDAR_TRUTH = 64  # LidarTruth: points and directions (float64 x 3), range, intensity, t
LIDAR_CAST = 160  # the peak of casting one sweep (BVH cast), measured 158 with its result
LIDAR_PIPELINE = 66  # the published copy and the noise temporaries
LIDAR_ENCODE = 73  # the peak of building and serializing one cloud
LIDAR_ERROR = 8 * 3  # verifier: one float64 per kept error, its concatenation, a temporary
LIDAR_DECODED = 12  # verifier: a decoded cloud (float32 x 3)
# errors the lidar's accumulators keep at most: two reservoirs (all rays, and without the edge
# outliers) of verify.robust.SAMPLE each (tests/test_verify_parallel.py holds them equal)
LIDAR_KEPT = 2 * 200_000

# a camera, bytes per pixel
CAMERA_STATIC = 24  # pixel rays (float64 x 3)
CAMERA_OPEN = 64  # the peak of building them
CAMERA_TRUTH = 3  # rgb8, plus 4 for the float32 depth image
CAMERA_DEPTH = 4
CAMERA_RENDER = 45  # the peak of rendering one frame (bands of rays)
CAMERA_PIPELINE = 27  # noise and encoding temporaries
CAMERA_JPEG = 0.25  # a JPEG frame, bytes per pixel (the demo world's measure 0.17)
# verifier, per pixel of one frame: the pair's int16 and float64 errors (40), the report's
# frame figure (70: matplotlib resamples each image as float RGBA), and heap the recording
# leaves that the verifier does not reuse (a 2 s 1280 x 960 camera run: 632 MiB peak)
CAMERA_VERIFY = 270

# the small sensors (IMU, GNSS, odometry) and the schedule, bytes per sample
SMALL_MESSAGE = {"imu": 330, "gnss": 130, "odom": 720}
SMALL_VERIFY = 600  # stamps, truth and published rows
SERIES_KEPT = 1 << 17  # rows a series keeps at most (verify.streaming.SERIES_SAMPLE)
HOLD_S = 11.0  # a truth waits this long past its latency for its copy (verify/pairing.py's
# HOLD_SLACK_NS, plus HOLD_CHECK_NS between the looks for old truths)
SCHEDULE_EVENT = 150  # the capture schedule: times and sensor of every event, as lists
TF_MESSAGE = 120
TUM_LINE = 120  # one gt/*.tum line
BAG_RECORD = 48  # per message: MCAP record and index entry (sqlite3: row and index)
REPORT = MiB // 2  # run.json and report.md, .html, .json, junit.xml
REPORT_SENSOR = MiB // 2  # its plots, per sensor
# MCAP's zstd chunks: the share of its size a cloud or a truth image keeps. Scene-dependent:
# on the demo world clouds keep 0.12-0.24 when many rays miss (NaN), 0.31 for a dense 64-ring
# lidar (a published cloud's noisy float32 does not compress); truth images keep 0.04-0.17
# (flat colours, smooth depth). These are the upper ends; sqlite3 stores messages as they are.
ZSTD_CLOUD = 0.4
ZSTD_IMAGE = 0.2

# verify reads the bag in two worker processes (the cameras; the rest) when the cameras hold
# this much truth (rgb8 frames) and the machine has 2+ CPUs (verify/parallel.py)
OFFLOAD_BYTES = 256 * MiB

TF_RATE_HZ = 50.0
BATCH_BYTES = 64 * MiB  # a batch of heavy truth (lidar, camera) holds at most this much
AHEAD = 3  # batches in flight per heavy sensor with --jobs (simconform.feed.Feed)


def batch_size(s, rate_hz: float) -> int:
    """Captures per render batch: about one second of simulation time, but never more than
    BATCH_BYTES of truth (a sweep of a large lidar is a batch of its own)."""
    per = truth_bytes(s)
    step = max(1, int(rate_hz))
    if per > 0:
        step = max(1, min(step, BATCH_BYTES // per))
    return step


def rays(s) -> int:
    if isinstance(s, LidarSpec):
        return len(s.rings.elevations()) * s.columns
    if isinstance(s, CameraSpec):
        return s.width * s.height
    return 0


def truth_bytes(s) -> int:
    """Bytes of one rendered truth sample (0 for the small sensors)."""
    if isinstance(s, LidarSpec):
        return LIDAR_TRUTH * rays(s)
    if isinstance(s, CameraSpec):
        return (CAMERA_TRUTH + (CAMERA_DEPTH if s.depth else 0)) * rays(s)
    return 0


def offloaded(spec: Spec, captures: dict[str, int]) -> tuple[str, ...]:
    """The cameras verify judges in a worker process ((): everything in one), given each
    sensor's capture count: only beside other sensors, on 2+ CPUs, and when their truth frames
    are worth the worker's start (about 2 s of imports)."""
    if usable_cpus() < 2:
        return ()
    cams = tuple(n for n, s in spec.sensors.items() if isinstance(s, CameraSpec))
    if not cams or len(cams) == len(spec.sensors):
        return ()
    size = sum(captures.get(n, 0) * 3 * rays(spec.sensors[n]) for n in cams)
    return cams if size >= OFFLOAD_BYTES else ()


def verify_readers(spec: Spec, captures: dict[str, int], jobs: int | None = None) -> int:
    """The worker processes verify reads the bag in: 0 (this process reads it), 1 (one reads
    every sensor) or 2 (`offloaded`'s cameras in one, the other sensors in the other).
    `jobs`: at most that many (`--jobs`: 0 keeps verifying in-process, as recording); None:
    as many as help."""
    if not offloaded(spec, captures):
        return 0
    return 2 if jobs is None else min(jobs, 2)


@dataclass
class SensorEstimate:
    name: str
    type: str
    size: str  # "16 x 360 rays", "640 x 480 px", ""
    captures: int
    record_bytes: int  # held while recording (static + in flight + waiting messages)
    peak_bytes: int  # the extra peak of producing one capture (render, noise, encode)
    verify_bytes: int
    worker_bytes: int  # per capture worker, beyond BASE_WORKER
    disk_bytes: int


@dataclass
class Estimate:
    """A model of the run's memory and disk use (see the module doc)."""

    sensors: list[SensorEstimate]
    workers: int
    memory_bytes: int
    record_bytes: int
    verify_bytes: int
    disk_bytes: int
    notes: list[str] = field(default_factory=list)


def estimate(
    spec: Spec,
    start_ns: int,
    end_ns: int,
    workers: int = 0,
    storage: str = "mcap",
    emulate: str | None = None,
    jobs: int | None = None,
) -> Estimate:
    """Memory and disk of recording and verifying `spec` over [start_ns, end_ns).

    `workers`: capture worker processes (0: heavy sensors render in this process); `jobs`:
    the run's `--jobs`, which bounds verify's readers (`verify_readers`)."""
    rows = [
        _sensor(n, s, start_ns, end_ns, workers, storage, emulate) for n, s in spec.sensors.items()
    ]
    tf = expected_count(TF_RATE_HZ, start_ns, end_ns)
    events = tf + sum(r.captures for r in rows)
    record = BASE_PROCESS + events * SCHEDULE_EVENT + sum(r.record_bytes for r in rows)
    record += max((r.peak_bytes for r in rows), default=0)
    verify = BASE_PROCESS + sum(r.verify_bytes for r in rows)
    readers = verify_readers(spec, {r.name: r.captures for r in rows}, jobs)
    verify += readers * BASE_WORKER  # the accumulators move to the readers; their processes add
    worker = BASE_WORKER + sum(r.worker_bytes for r in rows) if workers else 0
    memory = max(record + workers * worker, verify)
    disk = sum(r.disk_bytes for r in rows) + tf * (TF_MESSAGE + BAG_RECORD + TUM_LINE)
    disk += REPORT + REPORT_SENSOR * len(rows)
    notes = []
    if workers:
        plural = "es" if workers > 1 else ""
        notes.append(f"{workers} capture worker process{plural}, about {_fmt(worker)} each")
    if readers == 2:
        judging = ", ".join(offloaded(spec, {r.name: r.captures for r in rows}))
        notes.append(f"verify reads {judging} and the other sensors in two worker processes")
    elif readers:
        notes.append("verify reads every sensor in one worker process")
    return Estimate(rows, workers, int(memory), int(record), int(verify), int(disk), notes)


def _sensor(name, s, start_ns, end_ns, workers, storage, emulate) -> SensorEstimate:
    n = expected_count(s.rate_hz, start_ns, end_ns)
    latency_s = latency_max_s(s)
    waiting = min(n, math.ceil(latency_s * s.rate_hz) + 1)  # published, not yet written
    published = n * (1 - s.dropout.sample)
    dropped = n - published
    px = rays(s)
    mcap = storage == "mcap"
    tum = n * TUM_LINE
    if isinstance(s, LidarSpec | CameraSpec):
        batch = batch_size(s, s.rate_hz)
        held = (AHEAD + 1 if workers else 2) * batch * truth_bytes(s)
    if isinstance(s, LidarSpec):
        static = (LIDAR_STATIC + (LIDAR_STATIC_EMULATED if emulate else 0)) * px
        message = LAYOUTS[s.point_time][1] * px + 300  # the preset's point_step
        peak = (LIDAR_PIPELINE + LIDAR_ENCODE) * px + (0 if workers else LIDAR_CAST * px)
        points = published * px * (1 - s.dropout.point)  # every ray a return: an upper bound
        kept = min(points, LIDAR_KEPT)
        verify = LIDAR_ERROR * kept + LIDAR_DECODED * px * (held_dropped(s, dropped) + 3)
        worker = static + 2 * batch * truth_bytes(s) + LIDAR_CAST * px
        disk = (n + published) * (message * (ZSTD_CLOUD if mcap else 1) + BAG_RECORD) + tum
        size = f"{len(s.rings.elevations())} x {s.columns} rays"
        return SensorEstimate(
            name, "lidar", size, n, static + held + waiting * message, peak, int(verify),
            worker, int(disk),
        )  # fmt: skip
    if isinstance(s, CameraSpec):
        static = CAMERA_STATIC * px
        truth_msg = (3 + (CAMERA_DEPTH if s.depth else 0)) * px + 600
        pub_msg = (CAMERA_JPEG if s.encoding == "jpeg" else 3) * px + 300
        peak = max(CAMERA_OPEN, CAMERA_PIPELINE + (0 if workers else CAMERA_RENDER)) * px
        verify = CAMERA_VERIFY * px + 3 * px * (held_dropped(s, dropped) + 6)
        worker = static + 2 * batch * truth_bytes(s) + CAMERA_RENDER * px
        zstd = ZSTD_IMAGE if mcap else 1.0
        disk = n * (truth_msg * zstd + BAG_RECORD) + published * (
            pub_msg * (zstd if s.encoding == "raw" else 1.0) + 400 + 2 * BAG_RECORD
        )
        size = f"{s.width} x {s.height} px"
        return SensorEstimate(
            name, "camera", size, n, static + held + waiting * pub_msg, int(peak), int(verify),
            worker, int(disk + tum),
        )  # fmt: skip
    msg = SMALL_MESSAGE.get(s.type, 500)
    disk = (n + published) * (msg + BAG_RECORD) + tum
    verify = SMALL_VERIFY * min(n, SERIES_KEPT)
    return SensorEstimate(name, s.type, "", n, waiting * msg, 0, verify, 0, int(disk))


def latency_max_s(s) -> float:
    """A sensor's largest latency: fixed plus the truncated jitter's bound (seconds)."""
    return (s.latency.fixed_ms + s.latency.jitter_ms * s.latency.jitter_truncation) / 1e3


def held_dropped(s, dropped: float) -> int:
    """Truths of dropped samples the verifier holds at once: those dropped within one hold
    window (latency + HOLD_S), the binomial mean plus four standard deviations."""
    latency_s = latency_max_s(s)
    mean = s.rate_hz * (latency_s + HOLD_S) * s.dropout.sample
    return int(min(dropped, math.ceil(mean + 4 * math.sqrt(mean))))


# ------------------------------------------------------------------ what the machine has


def available_memory() -> int | None:
    """Bytes this process can still take: MemAvailable, or less under a cgroup memory limit."""
    found = []
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            found.append(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    for limit, usage in (
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),  # cgroup v2
        (
            "/sys/fs/cgroup/memory/memory.limit_in_bytes",  # cgroup v1
            "/sys/fs/cgroup/memory/memory.usage_in_bytes",
        ),
    ):
        try:
            cap = int(Path(limit).read_text().strip())
            used = int(Path(usage).read_text().strip())
        except (OSError, ValueError):
            continue  # "max" (no limit) or no such controller
        if cap < 1 << 60:
            found.append(max(0, cap - used))
    return min(found) if found else None


def free_disk(out: Path) -> int | None:
    """Free bytes on the filesystem that would hold `out` (its nearest existing folder)."""
    p = Path(os.path.abspath(out))
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        return shutil.disk_usage(p).free
    except OSError:
        return None


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b)?\s*$", re.IGNORECASE)


def parse_size(text: str, flag: str) -> int:
    """'512M', '4G', '1.5GiB', '2000000' -> bytes (K, M, G, T are powers of 1024)."""
    m = _SIZE.match(str(text))
    if not m or float(m.group(1)) <= 0:
        raise UserError(
            None, flag, text, "expected a size like 512M, 4G or 1.5GiB (K, M, G, T: x 1024)"
        )
    return int(float(m.group(1)) * 1024 ** " kmgt".index((m.group(2) or " ").lower()))


def check(
    est: Estimate,
    out: Path,
    max_memory: int | None = None,
    max_disk: int | None = None,
    source: Path | str | None = None,
) -> list[str]:
    """The budget lines of a plan; raises UserError when the estimate does not fit what the
    machine has (available memory, free disk at `out`) or the caps."""
    mem, disk = available_memory(), free_disk(out)
    lines = []
    for what, need, have, cap, flag in (
        ("memory", est.memory_bytes, mem, max_memory, "--max-memory"),
        ("disk", est.disk_bytes, disk, max_disk, "--max-disk"),
    ):
        limits = []
        if have is not None:
            where = "available" if what == "memory" else f"free at {nearest_folder(out)}"
            limits.append((have, f"the {_fmt(have)} {where}"))
        if cap is not None:
            limits.append((cap, f"{flag} {_fmt(cap)}"))
        known = ", ".join(t for _, t in limits) if limits else "no limit known"
        lines.append(f"{what}: estimate {_fmt(need)}; {known}")
        for limit, text in limits:
            if need > limit:
                fixes = "shorten --duration or lower the sensors' resolution or rate"
                if what == "memory" and est.workers:
                    fixes += ", or use fewer --jobs"
                if what == "disk":
                    fixes += ", or free disk space"
                raise UserError(
                    source,
                    f"{what} estimate",
                    _fmt(need),
                    f"more than {text} (a model, largest parts: {summary(est, what)}); " + fixes,
                )
    return lines


def summary(est: Estimate, what: str) -> str:
    """The largest sensors' share of the estimate, in words."""
    key = (
        (lambda r: max(r.record_bytes + r.peak_bytes, r.verify_bytes))
        if what == "memory"
        else (lambda r: r.disk_bytes)
    )
    top = sorted(est.sensors, key=key, reverse=True)[:2]
    return ", ".join(
        f"{r.name} {r.size + ' ' if r.size else ''}x {r.captures} captures {_fmt(key(r))}"
        for r in top
    )


def nearest_folder(out: Path) -> Path:
    p = Path(os.path.abspath(out))
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def _fmt(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.3g} {unit}"
        n /= 1024
    return f"{n:.3g} TiB"


fmt_bytes = _fmt
