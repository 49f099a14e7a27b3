"""What a capture worker's result costs the run's process to receive: pipe against shared memory.

A worker returns a batch of ten demo camera frames per task, as the capture pool's workers do:
each a 640 x 480 rgb8 truth with its float32 depth, and its noisy copy (the pixels and a
53 KB JPEG, the demo's mean): 30 MB a batch. The same worker (simconform.lifeline's
start method and set-up, simconform.slots as simconform.prefetch uses it) sends BATCHES
batches back through the executor's result pipe, then through slots of a shared-memory
segment; this process's CPU time and the wall are printed per way and as a ratio. The worker
only fills arrays, so what differs is the transfer.

    python bench/transfer.py [--frames 2000] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from simconform import slots
from simconform.adapters.base import CameraTruth
from simconform.lifeline import become_worker, end_pool, worker_context

SHAPE = (480, 640, 3)  # the demo camera's frame
JPEG = 53 << 10  # the demo's JPEG frames' mean size
PER_BATCH = 10  # captures per task: one second of the 10 Hz camera
_ring: tuple[str | None, int] = (None, 0)


def _init(parent: int, ring: tuple[str | None, int]) -> None:
    become_worker(parent)
    global _ring
    _ring = ring
    slots.attach(ring[0])


def _batch(first: int, slot: int | None):
    """Ten (truth, noisy) frame pairs, as the capture pool returns them."""
    frames = [
        (
            CameraTruth(np.full(SHAPE, (first + j) % 251, np.uint8), np.ones(SHAPE[:2], "f4")),
            CameraTruth(np.full(SHAPE, j, np.uint8), None, bytes([j]) * JPEG),
        )
        for j in range(PER_BATCH)
    ]
    name, size = _ring
    return frames if slot is None or name is None else slots.Slotted(frames, name, slot, size)


def measure(frames: int, shared: bool) -> dict:
    size = 2 * PER_BATCH * int(np.prod(SHAPE)) * 7 // 3 + (1 << 20)  # as prefetch sizes it
    ring = slots.Ring(3, size) if shared else slots.Ring(0, 0)
    if shared and ring.name is None:
        raise SystemExit("/dev/shm has no room for the segment here")
    pool = ProcessPoolExecutor(
        max_workers=1,
        mp_context=worker_context(),
        initializer=_init,
        initargs=(os.getpid(), (ring.name, ring.size)),
    )
    try:
        pool.submit(_batch, 0, None).result()  # started and warm
        cpu, wall = time.process_time(), time.perf_counter()
        pending: list = []
        for first in range(0, frames, PER_BATCH):
            slot = ring.take()
            work = pool.submit(_batch, first, slot)
            if slot is not None:
                work.add_done_callback(lambda _, s=slot: ring.give(s))
            pending.append((first, work))
            if len(pending) >= 3:  # budget.AHEAD batches in flight, as the run keeps
                _check(*pending.pop(0))
        for first, work in pending:
            _check(first, work)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    finally:
        end_pool(pool, False)
        ring.close()
    return {"cpu_s": round(cpu, 2), "wall_s": round(wall, 2)}


def _check(first: int, work) -> None:
    got = work.result()
    assert len(got) == PER_BATCH and got[0][0].image[0, 0, 0] == first % 251
    assert len(got[-1][1].encoded) == JPEG


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=2000, help="camera frames (the demo: 2000)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    pipe = measure(args.frames, shared=False)
    shm = measure(args.frames, shared=True)
    out = {
        "frames": args.frames,
        "pipe": pipe,
        "shared_memory": shm,
        "receiver_cpu_ratio": round(pipe["cpu_s"] / max(shm["cpu_s"], 1e-9), 2),
    }
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(
        f"{args.frames} frames (+ noisy copies) received by the run's process: "
        f"pipe {pipe['cpu_s']} CPU-s, {pipe['wall_s']} s wall; shared memory "
        f"{shm['cpu_s']} CPU-s, {shm['wall_s']} s wall; the pipe costs "
        f"{out['receiver_cpu_ratio']}x the CPU"
    )


if __name__ == "__main__":
    main()
