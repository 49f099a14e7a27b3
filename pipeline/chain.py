"""The one error pipeline every backend's truth goes through: noise (-> clamp -> round ->
encode, camera) -> dropout -> latency."""

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
    def __init__(self, name: str, spec, seed: int) -> None:
        rngs = sensor_generators(seed, name)
        self.name = name
        self.noise = make_noise(spec, rngs["noise"])
        self.dropout = DropoutStage(spec.dropout, rngs["dropout"])
        self.latency = LatencyStage(spec.latency, rngs["latency"])
        self.encode = EncodeStage(spec) if isinstance(spec, CameraSpec) else None

    def process(self, truth: TruthSample, capture_ns: int) -> Published:
        noisy = self.noise.apply(truth)
        if self.encode is not None:
            noisy = self.encode.apply(noisy)
        kept = self.dropout.apply(noisy)
        return Published(kept, capture_ns, capture_ns + self.latency.draw_ns())
