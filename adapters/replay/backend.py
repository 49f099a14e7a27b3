"""The registry's "replay" backend: a pointer to `simconform replay` for `run --backend replay`."""

from __future__ import annotations

from typing import Any

from simconform.adapters.base import BackendUnavailable, LidarTruth, SensorBackend
from simconform.spec import Spec
from simconform.world import World


class ReplayBackend(SensorBackend):
    """The registry's entry for "replay": its data come from a recorded bag, not from an
    engine driven along a trajectory, so `simconform run --backend replay` points the user to
    `simconform replay` (which this package implements) instead of failing obscurely."""

    name = "replay"
    HINT = (
        "the replay backend verifies a recorded bag: run `simconform replay BAG --map MAP.yaml "
        "--out DIR` (see docs/replay.md)"
    )

    @classmethod
    def unavailable(cls) -> str | None:
        return cls.HINT

    def open(self, world: World, spec: Spec) -> None:
        raise BackendUnavailable(self.HINT)

    def capture(self, sensor: str, t_ns: int, motion: Any) -> LidarTruth:
        raise BackendUnavailable(self.HINT)
