"""The one error pipeline every backend's truth goes through: noise (-> clamp -> round ->
encode, camera) -> dropout -> latency.

With `engine_noise` (`simconform run --noise engine`) the noise stage is skipped: the sample
published is the engine's own noisy output (`truth.engine`, already clamped and rounded by the
engine for a camera), and only encode, dropout and latency are simconform's. The noise stage's
generator is still made (and left unused), so the other stages draw exactly as without it."""

from __future__ import annotations

from dataclasses import dataclass

from simconform.adapters.base import TruthSample
from simconform.pipeline.dropout import DropoutStage
from simconform.pipeline.encode import EncodeStage
from simconform.pipeline.latency import LatencyStage
from simconform.pipeline.noise import make_noise
from simconform.pipeline.rng import sensor_generators
from simconform.spec import CameraSpec


@dataclass
class Published:
    sample: TruthSample | None  # None when the whole sample was dropped
    capture_ns: int
    publish_ns: int


class SensorPipeline:
    def __init__(self, name: str, spec, seed: int, engine_noise: bool = False) -> None:
        rngs = sensor_generators(seed, name)
        self.name = name
        self.engine_noise = engine_noise
        self.noise = make_noise(spec, rngs["noise"])
        self.dropout = DropoutStage(spec.dropout, rngs["dropout"])
        self.latency = LatencyStage(spec.latency, rngs["latency"])
        self.encode = EncodeStage(spec) if isinstance(spec, CameraSpec) else None

    def process(self, truth: TruthSample, capture_ns: int) -> Published:
        if self.engine_noise:
            if truth.engine is None:
                raise RuntimeError(f"{self.name}: the backend returned no engine-noise sample")
            noisy = truth.engine
        else:
            noisy = self.noise.apply(truth)
        if self.encode is not None:
            noisy = self.encode.apply(noisy)
        kept = self.dropout.apply(noisy)
        return Published(kept, capture_ns, capture_ns + self.latency.draw_ns())
