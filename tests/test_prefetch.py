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
