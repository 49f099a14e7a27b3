"""The Ray executor: one Ray task per cell on a local or remote cluster, retried once on a crash.

Ray is optional and imported only when this executor is chosen (`import_ray`). Named
ray_executor so that it can never be mistaken for, or shadow, the `ray` package.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections import Counter, deque
from collections.abc import Iterator
from typing import Any, Literal

from simconform.campaign.cell import Outcome, crashed, timed_cell
from simconform.campaign.plan import Cell, Plan
from simconform.campaign.store import scene_bundle
from simconform.errors import UserError

RAY_INSTALL = "install it with pip install 'simconform[ray]' (or pip install 'ray[default]')"
Transfer = Literal["auto", "archive"]


def import_ray():
    try:
        import ray
    except ImportError:
        raise UserError(None, "--executor", "ray", f"Ray is not installed; {RAY_INSTALL}") from None
    return ray


class RayExecutor:
    """One Ray task per cell; at most `jobs` in flight when jobs is given (see the package doc)."""

    name = "ray"

    def __init__(self, jobs: int | None, address: str | None, transfer: Transfer, plan: Plan):
        self.jobs, self.address, self.transfer, self.plan = jobs, address, transfer, plan
        self.owned = False  # whether this executor started or joined Ray and must shut it down

    def open(self) -> None:
        """Connect (or start Ray) before anything is written, so a bad --address writes nothing."""
        ray = import_ray()
        if ray.is_initialized():  # an embedding program's session is used as it is
            return
        quiet = {"log_to_driver": False, "logging_level": logging.WARNING}
        address = self.address or os.environ.get("RAY_ADDRESS") or "local"
        try:
            if address == "local":  # a new in-process instance even if another one runs
                cpus = self.jobs or os.cpu_count() or 1
                ray.init(address="local", num_cpus=cpus, include_dashboard=False, **quiet)
            else:
                ray.init(address=address, **quiet)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise UserError(
                None,
                "--address",
                address,
                f"could not connect to Ray ({' '.join(str(exc).split())[:160]}); expected "
                "local, auto (a running cluster) or ray://host:port",
            ) from None
        self.owned = True

    def close(self) -> None:
        if self.owned:
            import_ray().shutdown()
            self.owned = False

    def execute(self, cells: list[Cell], token: str | None = None) -> Iterator[Outcome]:
        ray = import_ray()
        names = ("WorkerCrashedError", "NodeDiedError", "OutOfMemoryError", "LocalRayletDiedError")
        crash_types = tuple(getattr(ray.exceptions, n) for n in names if hasattr(ray.exceptions, n))
        inflight: dict[Any, Cell] = {}
        try:
            task = ray.remote(num_cpus=1, max_retries=0)(timed_cell)
            specs = {v.name: ray.put(v.text) for v in self.plan.variants}
            scenes = {s.name: ray.put(scene_bundle(s)) for s in self.plan.scenes}
            todo = deque(cells)
            attempts: Counter[str] = Counter()
            limit = self.jobs or max(1, len(cells))
            driver = (socket.gethostname(), os.getpid())  # a task on this host dies with us
            while todo or inflight:
                while todo and len(inflight) < limit:
                    c = todo.popleft()
                    attempts[c.id] += 1
                    ref = task.remote(
                        c, self.transfer, token, specs[c.variant], scenes[c.scene], driver=driver
                    )
                    inflight[ref] = c
                ready, _ = ray.wait(list(inflight), num_returns=1)
                for ref in ready:
                    cell = inflight.pop(ref)
                    try:
                        res = ray.get(ref)
                    except crash_types as exc:
                        if attempts[cell.id] < 2:
                            todo.appendleft(cell)
                            continue
                        res = crashed(f"the Ray worker died twice ({type(exc).__name__})")
                    except ray.exceptions.RayError as exc:
                        res = {"status": "error", "error": f"{type(exc).__name__}: {exc}"}
                    yield cell, res, attempts[cell.id]
        finally:
            for ref in inflight:
                with contextlib.suppress(Exception):  # best effort on the way out
                    ray.cancel(ref, force=True)
