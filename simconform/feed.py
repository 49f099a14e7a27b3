"""Captures in schedule order, from the backend or its worker pool, stoppable by a signal.

Each sensor's truth comes in batches (so backends can vectorise) and, with a CapturePool,
rendered ahead in worker processes, which also add the capture's noise and encode it
(pipeline/chain.py FrameStage). SIGINT and SIGTERM become a flag the capture loop checks
between samples and while it waits for a worker, so a worker that never answers cannot make a
run ignore them.
"""

from __future__ import annotations

import collections
import contextlib
import signal
from concurrent.futures import TimeoutError as FuturesTimeout
from typing import Protocol

import numpy as np

from simconform.budget import AHEAD, batch_size
from simconform.frames import Pose
from simconform.pipeline.schedule import capture_times
from simconform.spec import Spec
from simconform.trajectory import Trajectory


class RunSpan(Protocol):
    """What a feed needs of the run's inputs (simconform.run.Inputs)."""

    spec: Spec
    trajectory: Trajectory
    start_ns: int
    end_ns: int


class Stopped(Exception):
    """SIGINT/SIGTERM arrived while waiting for a capture worker."""


def wait_for(work, stop: StopFlag | None):
    """A worker's result, or Stopped as soon as a signal is seen: a worker that never answers
    cannot make the run ignore SIGTERM."""
    while True:
        try:
            return work.result(timeout=0.25)
        except FuturesTimeout:
            if stop is not None and stop.signal:
                raise Stopped from None


class StopFlag:
    """Turns SIGINT/SIGTERM into a flag checked between samples."""

    def __init__(self) -> None:
        self.signal: str | None = None
        self._old: dict[int, object] = {}

    def __enter__(self) -> StopFlag:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(ValueError):  # not the main thread: leave signals alone
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, _frame) -> None:
        self.signal = signal.Signals(signum).name

    def __exit__(self, *exc) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)


class Feed:
    """One sensor's captures in order: truth from the backend in batches of about one second of
    simulation time (so backends can vectorise; a batch of heavy truth holds at most
    budget.BATCH_BYTES), and the sensor's ground-truth pose. With a
    CapturePool, the next batches are rendered ahead in worker processes."""

    def __init__(
        self, backend, name: str, rate_hz: float, inp: RunSpan, mount: Pose, pool=None
    ) -> None:
        self.backend, self.name, self.traj, self.pool = backend, name, inp.trajectory, pool
        times = capture_times(rate_hz, inp.start_ns, inp.end_ns)
        step = (
            max(1, int(rate_hz)) if backend is None else batch_size(inp.spec.sensors[name], rate_hz)
        )
        self.firsts = list(range(0, len(times), step))  # capture index of each chunk's first
        self.chunks = [times[i : i + step] for i in self.firsts]
        self.mount = mount
        self.next_chunk = 0
        self.pending: collections.deque = collections.deque()
        self.times = np.zeros(0, dtype=np.int64)
        self.buffer: list = []
        self.j = 0

    def _request(self) -> None:
        while self.next_chunk < len(self.chunks) and len(self.pending) < (
            AHEAD if self.pool else 1
        ):
            chunk, first = self.chunks[self.next_chunk], self.firsts[self.next_chunk]
            self.next_chunk += 1
            if self.backend is None:
                work = [(None, None)] * len(chunk)
            elif self.pool is not None:  # (truth, noisy) pairs
                work = self.pool.submit(self.name, chunk, first)
            else:
                truths = self.backend.capture_batch(self.name, chunk, self.traj)
                work = [(t, None) for t in truths]  # noise: the run's SensorPipeline
            self.pending.append((chunk, work))

    def next(self, t_ns: int, stop: StopFlag | None = None):
        """(truth, noisy or None, sensor position, quaternion) of the capture at t_ns."""
        if self.j >= len(self.buffer):
            self._request()
            chunk, work = self.pending.popleft()
            self.buffer = work if isinstance(work, list) else wait_for(work, stop)
            poses = self.traj.pose_at(chunk).compose(self.mount)
            self.times, self.buf_xyz, self.buf_q = chunk, poses.t, poses.quat()
            self.j = 0
            self._request()
        if int(self.times[self.j]) != t_ns:
            raise RuntimeError(f"{self.name}: capture schedule out of step at {t_ns} ns")
        j = self.j
        self.j += 1
        truth, noisy = self.buffer[j]
        return truth, noisy, self.buf_xyz[j], self.buf_q[j]
