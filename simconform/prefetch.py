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

import multiprocessing as mp
import os
import signal
from concurrent.futures import Future, ProcessPoolExecutor

import numpy as np
from threadpoolctl import threadpool_limits

_backend = None
_trajectory = None
_frames: dict = {}  # sensor -> FrameStage (a pool made with a seed)


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
) -> None:
    from simconform.lifeline import die_with_parent

    die_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threadpool_limits(limits=1, user_api="blas")  # for this worker's life (simconform.run.run)
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


def _capture(sensor: str, times: np.ndarray, first: int | None = None) -> list:
    """Truth per time; with `first` (capture index of times[0]), (truth, noisy) pairs."""
    truths = _backend.capture_batch(sensor, times, _trajectory)
    if first is None:
        return truths
    stage = _frames[sensor]
    return [(t, stage.apply(t, first + j)) for j, t in enumerate(truths)]


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

        method = "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"
        self.pool = ProcessPoolExecutor(
            max_workers=jobs,
            mp_context=mp.get_context(method),
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
            ),
        )

    def submit(self, sensor: str, times: np.ndarray, first: int | None = None) -> Future:
        """Render `times`; with `first` (a pool made with a seed), (truth, noisy) pairs."""
        return self.pool.submit(_capture, sensor, times, first)

    def close(self, kill: bool = False) -> None:
        """Wait for the workers; with `kill` (the run stopped or failed) end them first, so a
        worker busy with (or stuck in) a capture never outlives its run."""
        from simconform.lifeline import end_pool

        end_pool(self.pool, kill)
