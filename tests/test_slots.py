"""Capture results through shared memory (simconform.slots): the objects that arrive are the
ones sent, whatever fits in the slot, and a run's segment is gone when its pool closes."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from simconform import slots
from simconform.prefetch import CapturePool
from simconform.registry import get_backend
from simconform.spec import load_spec
from simconform.trajectory import load_trajectory
from simconform.world import load_world

ROOT = Path(__file__).resolve().parents[1]


def _roundtrip(value, ring: slots.Ring):
    """Pickle as a worker does (into a slot of `ring`), unpickle as the run does."""
    slot = ring.take()
    assert slot is not None
    slots.attach(ring.name)  # in one process: the worker's mapping is the host's
    data = pickle.dumps(slots.Slotted(value, ring.name, slot, ring.size), protocol=5)
    return pickle.loads(data), len(data)


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 300_000), min_size=1, max_size=6),
    dtype=st.sampled_from(["uint8", "float32", "float64"]),
    slot_kb=st.sampled_from([64, 256, 2048]),
)
def test_arrays_arrive_equal_whether_they_fit_or_not(sizes, dtype, slot_kb) -> None:
    ring = slots.Ring(2, slot_kb << 10)
    try:
        rng = np.random.default_rng(len(sizes))
        value = [(rng.random(n).astype(dtype), b"jpeg" * 3, {"n": n}) for n in sizes]
        value.append(np.arange(24.0).reshape(2, 3, 4)[:, ::2])  # not contiguous: in band
        got, _ = _roundtrip(value, ring)
        for (a, tag, meta), (b, tag2, meta2) in zip(value[:-1], got[:-1]):
            assert a.dtype == b.dtype and np.array_equal(a, b) and b.flags.writeable
            assert tag == tag2 and meta == meta2
        assert np.array_equal(value[-1], got[-1])
    finally:
        ring.close()


def test_large_arrays_leave_the_pipe() -> None:
    ring = slots.Ring(1, 8 << 20)
    try:
        frame = np.full((480, 640, 3), 7, np.uint8)
        got, sent = _roundtrip([frame, frame.copy()], ring)
        assert sent < 4096 and all(np.array_equal(g, frame) for g in got)
    finally:
        ring.close()


def test_a_large_rest_leaves_the_pipe_too() -> None:
    """Bytes that pickle keeps in band (a batch's JPEG frames) go in the slot when it has room;
    without room the same objects come through the pipe."""
    jpegs = [bytes([j]) * (53 << 10) for j in range(10)]
    value = [(np.full(100 << 10, j, np.uint8), jpeg) for j, jpeg in enumerate(jpegs)]
    for size, through_pipe in ((2 << 20), False), ((1 << 20) + (200 << 10), True):
        ring = slots.Ring(1, size)
        try:
            got, sent = _roundtrip(value, ring)
            assert (sent > 500_000) is through_pipe
            for (a, ja), (b, jb) in zip(value, got):
                assert np.array_equal(a, b) and ja == jb
        finally:
            ring.close()


def test_no_room_means_the_pipe() -> None:
    """A segment /dev/shm cannot hold is not made: the pool then sends results as before."""
    free = os.statvfs("/dev/shm")
    ring = slots.Ring(4, free.f_bavail * free.f_frsize)
    assert ring.name is None and ring.take() is None
    ring.close()


def test_pool_returns_what_the_backend_renders_and_cleans_up() -> None:
    """Camera frames and lidar sweeps through the slots equal the backend's own, in-process."""
    world, spec = ROOT / "worlds" / "demo.yaml", ROOT / "sensors_spec" / "rover.yaml"
    traj_path = ROOT / "worlds" / "demo.tum"
    pool = CapturePool(1, "reference", world, spec, traj_path, "spline")
    name = pool.ring.name
    assert name is not None and Path("/dev/shm", name.lstrip("/")).exists()
    times = np.arange(5, dtype=np.int64) * 100_000_000
    try:
        cams = pool.submit("camera", times).result(timeout=120)
        sweeps = pool.submit("lidar", times).result(timeout=120)
    finally:
        pool.close()
    assert not Path("/dev/shm", name.lstrip("/")).exists()
    w = load_world(world)
    backend = get_backend("reference")
    backend.open(w, load_spec(spec))
    traj = load_trajectory(traj_path, w, "spline")
    for got, want in zip(cams, backend.capture_batch("camera", times, traj)):
        assert np.array_equal(got.image, want.image)
        assert np.array_equal(got.depth, want.depth, equal_nan=True)
    for got, want in zip(sweeps, backend.capture_batch("lidar", times, traj)):
        assert np.array_equal(got.ranges, want.ranges, equal_nan=True)
        assert np.array_equal(got.points, want.points, equal_nan=True)
