"""Per-sensor random streams that do not depend on the other sensors or on Python's hash().

Each sensor gets SeedSequence([seed, stable_id(name)]), spawned into one child per pipeline
stage, so adding a sensor or a stage never changes another stream's draws. A heavy sensor's
capture k draws its noise from that stage child's own child k (`frame_generator`), so any
process can draw any capture's noise without drawing the ones before it.
"""

from __future__ import annotations

import hashlib

import numpy as np

STAGES = ("noise", "dropout", "latency")


def stable_id(name: str) -> int:
    """64-bit id from the sensor name, identical on every machine and Python run."""
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "little")


def sensor_generators(seed: int, name: str) -> dict[str, np.random.Generator]:
    children = np.random.SeedSequence([seed, stable_id(name)]).spawn(len(STAGES))
    return {stage: np.random.Generator(np.random.PCG64(ss)) for stage, ss in zip(STAGES, children)}


def frame_generator(seed: int, name: str, stage: int, k: int) -> np.random.Generator:
    """Capture k's generator: what `sensor_generators`' SeedSequence child `stage` would give
    as its child k (spawn key (stage, k))."""
    ss = np.random.SeedSequence([seed, stable_id(name)], spawn_key=(stage, k))
    return np.random.Generator(np.random.PCG64(ss))
