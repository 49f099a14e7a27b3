"""Capture heavy sensors (lidar sweeps, camera frames) ahead of time in worker processes.

Truth is a pure function of (sensor, time, world, trajectory), and a heavy sensor's noise and
encoding a pure function of (seed, sensor, capture index, truth) (simconform/pipeline/chain.py
FrameStage), so the workers render, add noise and encode in parallel and the bag is the same
for every `--jobs`: the main process still runs the sequential stages (dropout, latency, the
light sensors) and writes every message in order. Workers ignore SIGINT, so Ctrl-C reaches
only the main process, which then stops at the next sample and closes the bag. Workers die
with the run (simconform.lifeline): a run killed with SIGKILL leaves no worker rendering on.

Workers are started by a fork server, never forked from this process: by the time the pool
starts, the backend here holds engine state that a fork copies but cannot use (MuJoCo's OSMesa
GL context hung every forked worker, and the run with it, with the default `--jobs`). Each
worker loads the inputs and opens its own backend from the registry entry it is given, so a
backend registered at run time works too.
"""

from __future__ import annotations

import os
from concurrent.futures import Future, ProcessPoolExecutor

import numpy as np

from simconform import slots
from simconform.lifeline import become_worker, capture_preload, end_pool, worker_context

_backend = None
_trajectory = None
_frames: dict = {}  # sensor -> FrameStage (a pool made with a seed)
_ring: tuple[str | None, int] = (None, 0)  # the run's result segment (simconform.slots)


def _init(
    parent: int | None,
    backend: str,
    entry: str,
    world: str,
    spec: str,
    trajectory: str,
    interpolation: str,
    emulate,
    epoch_s: int = 0,
    seed: int | None = None,
    engine_noise: tuple[str, ...] = (),
    ring: tuple[str | None, int] = (None, 0),
) -> None:
    become_worker(parent)
    global _ring
    _ring = ring
    slots.attach(ring[0])
    global _backend, _trajectory
    from simconform.registry import BACKENDS, get_backend

    BACKENDS.setdefault(backend, entry)
    from simconform.spec import load_spec
    from simconform.trajectory import load_trajectory
    from simconform.world import load_world

    w = load_world(world)
    # on the run's clock (simconform.run.load_inputs)
    _trajectory = load_trajectory(trajectory, w, interpolation).shifted(epoch_s)
    _backend = get_backend(backend, emulate)
    sensors = load_spec(spec)
    _backend.open(w, sensors)
    if seed is not None:
        from simconform.pipeline.chain import FrameStage, is_heavy

        for name, s in sensors.sensors.items():
            if is_heavy(s):
                _frames[name] = FrameStage(name, s, seed, name in engine_noise)


def _capture(sensor: str, times: np.ndarray, first: int | None = None, slot: int | None = None):
    """Truth per time; with `first` (capture index of times[0]), (truth, noisy) pairs; with
    `slot`, sent back through that slot of the run's segment."""
    truths = _backend.capture_batch(sensor, times, _trajectory)
    if first is not None:
        stage = _frames[sensor]
        truths = [(t, stage.apply(t, first + j)) for j, t in enumerate(truths)]
    name, size = _ring
    return truths if slot is None or name is None else slots.Slotted(truths, name, slot, size)


class CapturePool:
    def __init__(
        self,
        jobs: int,
        backend: str,
        world,
        spec,
        trajectory,
        interpolation: str,
        emulate=None,
        epoch_s: int = 0,
        seed: int | None = None,
        engine_noise: tuple[str, ...] = (),
    ) -> None:
        from simconform.registry import BACKENDS

        self.ring = _ring_for(spec)
        self.pool = ProcessPoolExecutor(
            max_workers=jobs,
            mp_context=worker_context(capture_preload(backend, BACKENDS[backend])),
            initializer=_init,
            initargs=(
                os.getpid(),  # the workers' owner: they exit when this run does
                backend,
                BACKENDS[backend],
                str(world),
                str(spec),
                str(trajectory),
                interpolation,
                emulate,
                epoch_s,
                seed,
                tuple(engine_noise),
                (self.ring.name, self.ring.size),
            ),
        )

    def submit(self, sensor: str, times: np.ndarray, first: int | None = None) -> Future:
        """Render `times`; with `first` (a pool made with a seed), (truth, noisy) pairs."""
        slot = self.ring.take()
        work = self.pool.submit(_capture, sensor, times, first, slot)
        if slot is not None:  # the result is copied out before the future is done
            work.add_done_callback(lambda _: self.ring.give(slot))
        return work

    def close(self, kill: bool = False) -> None:
        """Wait for the workers; with `kill` (the run stopped or failed) end them first, so a
        worker busy with (or stuck in) a capture never outlives its run."""
        end_pool(self.pool, kill)
        self.ring.close()


def _ring_for(spec) -> slots.Ring:
    """A slot per batch a run can have in flight (budget.AHEAD per heavy sensor), each room
    for a batch's truth and its noisy copy."""
    from simconform.budget import AHEAD, batch_size, truth_bytes
    from simconform.pipeline.chain import is_heavy
    from simconform.spec import load_spec

    heavy = [s for s in load_spec(spec).sensors.values() if is_heavy(s)]
    if not heavy:
        return slots.Ring(0, 0)
    size = max(2 * batch_size(s, s.rate_hz) * truth_bytes(s) for s in heavy) + (1 << 20)
    return slots.Ring(AHEAD * len(heavy), size)
