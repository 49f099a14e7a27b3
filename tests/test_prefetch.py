"""The capture pool: workers render what the run asks, and a stopped run always gets its
workers back, whatever state they were killed in."""

from __future__ import annotations

import os
import struct
import threading
import time
from pathlib import Path

import numpy as np

from simconform.prefetch import CapturePool

ROOT = Path(__file__).resolve().parents[1]


def _pool() -> CapturePool:
    return CapturePool(
        1,
        "reference",
        ROOT / "worlds" / "demo.yaml",
        ROOT / "sensors_spec" / "rover_core.yaml",
        ROOT / "worlds" / "demo.tum",
        "spline",
    )


def _closes_within(pool: CapturePool, seconds: float) -> bool:
    done = threading.Event()

    def close() -> None:
        pool.close(kill=True)
        done.set()

    threading.Thread(target=close, daemon=True).start()
    return done.wait(seconds)


def test_pool_captures_what_the_backend_captures() -> None:
    pool = _pool()
    try:
        times = np.array([0, 100_000_000], dtype=np.int64)
        scans = pool.submit("lidar", times).result(timeout=120)
        assert len(scans) == 2 and all(np.isfinite(s.ranges).any() for s in scans)
    finally:
        pool.close()


def test_kill_returns_when_a_worker_died_halfway_through_sending_a_result() -> None:
    """The state a SIGKILLed worker leaves behind when it dies mid-send: the pool's reader has a
    message header and waits for the rest. close(kill=True) must still return (it hung a run
    stopped by a file size limit in CI)."""
    pool = _pool()
    pool.submit("lidar", np.array([0], dtype=np.int64)).result(timeout=120)  # workers are up
    writer = pool.pool._result_queue._writer
    os.write(writer.fileno(), struct.pack("!i", 1 << 20) + b"\0" * 64)  # a header, then silence
    time.sleep(0.5)  # the reader is now inside recv(), waiting for the other 1 MiB
    assert _closes_within(pool, 60), "close(kill=True) hung on a half-sent result"


def test_the_fork_server_preloads_what_a_workers_initializer_imports() -> None:
    """The capture workers fork from a server that imported `capture_preload`: what a worker's
    initializer loads (the demo's world with its mesh, its trajectory, the reference backend
    opened on the demo's spec, the camera's frame stage) must already be there, or every
    worker imports it again (scipy.interpolate 0.3 s, trimesh 0.09 s each, which the CLI's
    imports had brought into the server by accident until 2c1be42; the scene's modules,
    18 ms, until the CLI stopped importing `compare`'s)."""
    import subprocess
    import sys

    code = (
        "import importlib, sys\n"
        "from simconform.lifeline import COMMON_PRELOAD, capture_preload\n"
        "from simconform.registry import BACKENDS\n"
        "for m in COMMON_PRELOAD + capture_preload('reference', BACKENDS['reference']):\n"
        "    importlib.import_module(m)\n"
        "before = set(sys.modules)\n"
        "from simconform.demo import DEMO_SPEC, DEMO_TRAJECTORY, DEMO_WORLD\n"
        "from simconform.pipeline.chain import FrameStage, is_heavy\n"
        "from simconform.registry import get_backend\n"
        "from simconform.spec import load_spec\n"
        "from simconform.trajectory import load_trajectory\n"
        "from simconform.world import load_world\n"
        "world, spec = load_world(DEMO_WORLD), load_spec(DEMO_SPEC)\n"
        "load_trajectory(DEMO_TRAJECTORY, world, 'spline')\n"
        "get_backend('reference', None).open(world, spec)\n"
        "[FrameStage(n, s, 1, False) for n, s in spec.sensors.items() if is_heavy(s)]\n"
        "print(' '.join(sorted(set(sys.modules) - before)))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    late = r.stdout.split()
    heavy = [
        m
        for m in late
        if m.split(".")[0] in ("scipy", "trimesh", "numba", "matplotlib", "simconform")
    ]
    assert not heavy, f"imported in every worker after its fork: {heavy}"
