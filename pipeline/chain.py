"""The one error pipeline every backend's truth goes through: noise (-> clamp -> round ->
encode, camera) -> dropout -> latency.

A heavy sensor's (lidar, camera) noise and encoding are `FrameStage`: drawn from a generator
of the capture's own (spawn key: the noise stream's child k for capture k), so they are a pure
function of (seed, sensor, k, truth) and the capture workers apply them next to the render
(simconform/prefetch.py), in any order and in any process, while the bag stays the same for
every `--jobs`. The light sensors' noise (IMU bias walk, odometry drift) has state and runs
in order in the main process, as do every sensor's dropout and latency.

With `engine_noise` (`simconform run --noise engine`) the noise stage is skipped: the sample
published is the engine's own noisy output (`truth.engine`, already clamped and rounded by the
engine for a camera), and only encode, dropout and latency are simconform's. The noise stage's
generator is still made (and left unused), so the other stages draw exactly as without it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simconform.adapters.base import CameraTruth, TruthSample
from simconform.pipeline.dropout import DropoutStage
from simconform.pipeline.encode import EncodeStage
from simconform.pipeline.latency import LatencyStage
from simconform.pipeline.noise import make_noise
from simconform.pipeline.rng import STAGES, frame_generator, sensor_generators
from simconform.spec import CameraSpec, LidarSpec


def engine_sample(name: str, truth: TruthSample) -> TruthSample:
    """The engine's own noisy sample (--noise engine): a backend that gives none is a bug."""
    if truth.engine is None:
        raise RuntimeError(f"{name}: the backend returned no engine-noise sample")
    return truth.engine


@dataclass
class Published:
    sample: TruthSample | None  # None when the whole sample was dropped
    capture_ns: int
    publish_ns: int


def is_heavy(spec) -> bool:
    """Lidar and camera: noise per capture (FrameStage), applied where the capture renders."""
    return isinstance(spec, LidarSpec | CameraSpec)


class FrameStage:
    """Noise and encoding of one heavy capture k from its own generator (see the module doc).

    A JPEG camera's result keeps only the encoded bytes (and no depth): all that is published,
    and all that crosses from a worker process back to the run."""

    def __init__(self, name: str, spec, seed: int, engine_noise: bool = False) -> None:
        self.name, self.seed, self.engine_noise = name, seed, engine_noise
        self.noise = make_noise(spec, np.random.default_rng(0))  # rng replaced per capture
        self.encode = EncodeStage(spec) if isinstance(spec, CameraSpec) else None
        self.jpeg = self.encode is not None and spec.encoding != "raw"

    def apply(self, truth: TruthSample, k: int) -> TruthSample:
        if self.engine_noise:
            noisy = engine_sample(self.name, truth)
        else:
            self.noise.rng = frame_generator(self.seed, self.name, STAGES.index("noise"), k)
            noisy = self.noise.apply(truth)
        if self.encode is not None:
            noisy = self.encode.apply(noisy)
            if self.jpeg:
                noisy = CameraTruth(image=np.empty((0, 0, 3), np.uint8), depth=None,
                                    encoded=noisy.encoded)  # fmt: skip
        return noisy


class SensorPipeline:
    """Every stage of one sensor, in capture order. `process(truth, t)` applies a heavy
    sensor's FrameStage itself (capture k is the k-th call), unless a worker already did
    (`noisy`)."""

    def __init__(self, name: str, spec, seed: int, engine_noise: bool = False) -> None:
        rngs = sensor_generators(seed, name)
        self.name = name
        self.engine_noise = engine_noise
        self.frame = FrameStage(name, spec, seed, engine_noise) if is_heavy(spec) else None
        self.captures = 0
        self.noise = None if self.frame else make_noise(spec, rngs["noise"])
        self.dropout = DropoutStage(spec.dropout, rngs["dropout"])
        self.latency = LatencyStage(spec.latency, rngs["latency"])

    def process(
        self, truth: TruthSample, capture_ns: int, noisy: TruthSample | None = None
    ) -> Published:
        k = self.captures
        self.captures += 1
        if noisy is None and self.frame is not None:
            noisy = self.frame.apply(truth, k)
        elif noisy is None and self.engine_noise:
            noisy = engine_sample(self.name, truth)
        elif noisy is None:
            noisy = self.noise.apply(truth)
        kept = self.dropout.apply(noisy)
        return Published(kept, capture_ns, capture_ns + self.latency.draw_ns())
