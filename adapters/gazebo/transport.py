"""A paused gz-sim 8 server driven over gz-transport 13: start it, step it, and collect sensor
messages as wire bytes keyed by (topic, sim-time stamp). The vehicle is moved inside the server
by simconform's Python system (driver_system.py); this side only steps the world.

Service used (the world's control service):

- /world/<name>/control  gz.msgs.WorldControl {pause: true, multi_step: n} -> gz.msgs.Boolean

gz.transport13's Python Node: subscribe(msg_class, topic, callback(msg)) and
request(service, request, request_class, response_class, timeout_ms) -> (ok, response).
Messages are kept serialized (`SerializeToString`) so `decode.py` handles them the same way as
in the tests. Each session gets its own GZ_PARTITION, so parallel runs never see each other.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import shutil
import subprocess
import threading
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

from simconform.adapters.base import EngineError
from simconform.lifeline import pdeathsig_preexec

# gz.math7 and sdformat14 are imported inside the server: by the drive system and by gz-sim's
# PythonSystemLoader, which loads it
REQUIRED_MODULES = ("gz.sim8", "gz.transport13", "gz.msgs10", "gz.math7", "sdformat14")

INSTALL_HINT = (
    "install Gazebo Harmonic (gz-sim 8) with its Python bindings; on Ubuntu 24.04: add the OSRF "
    "apt repository (sudo curl https://packages.osrfoundation.org/gazebo.gpg --output "
    '/usr/share/keyrings/pkgs-osrf-archive-keyring.gpg; echo "deb [arch=$(dpkg '
    "--print-architecture) signed-by=/usr/share/keyrings/pkgs-osrf-archive-keyring.gpg] "
    'https://packages.osrfoundation.org/gazebo/ubuntu-stable $(lsb_release -cs) main" | sudo '
    "tee /etc/apt/sources.list.d/gazebo-stable.list), then `sudo apt-get update && sudo apt-get "
    "install gz-harmonic python3-gz-transport13 python3-gz-msgs10 python3-gz-sim8 "
    "python3-gz-math7 python3-sdformat14`, and run "
    "simconform with the system Python 3.12 (or a venv made with --system-site-packages) so "
    "that `import gz.transport13` works; see docs/gazebo.md"
)


def missing_pieces() -> list[str]:
    """What of Gazebo Harmonic is not installed here (empty when everything is)."""
    missing = []
    for mod in REQUIRED_MODULES:
        try:
            found = importlib.util.find_spec(mod) is not None
        except (ImportError, ValueError):  # parent package `gz` absent
            found = False
        if not found:
            missing.append(f"Python module {mod}")
    if shutil.which("gz") is None:
        missing.append("the `gz` executable")
    return missing


def unavailable_message() -> str | None:
    """One paragraph naming what is missing and how to install it, or None if nothing is."""
    missing = missing_pieces()
    if not missing:
        return None
    return f"--backend gazebo needs Gazebo Harmonic, but {', '.join(missing)} not found: " + (
        INSTALL_HINT + "."
    )


def gz_sim_version() -> str | None:
    """`gz sim --versions` (e.g. "gz-sim 8.14.0"), or None when it does not answer."""
    exe = shutil.which("gz")
    if exe is None:
        return None
    try:
        out = subprocess.run(
            [exe, "sim", "--versions"], capture_output=True, text=True, timeout=30, check=False
        ).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"gz-sim {out[0]}" if out else None


class GzSession:
    """One headless, paused `gz sim` server on `sdf_path` and a transport node talking to it."""

    def __init__(
        self,
        sdf_path: Path,
        world: str,
        env: dict[str, str] | None = None,
        timeout_s: float = 60.0,
        seed: int | None = None,
        log_path: Path | None = None,
    ) -> None:
        """`env`: extra environment for the server (the driver's table and plugin path);
        `seed`: `gz sim --seed` (1 .. 2^31 - 1; gz-sim's ServerConfig::SetSeed calls
        gz::math::Rand::Seed, the generator of every gz-sensors noise model); `log_path`: where
        the server's output goes (default: next to the SDF)."""
        self.world = world
        self.timeout_s = timeout_s
        self.msgs = importlib.import_module("gz.msgs10")
        from gz.msgs10.boolean_pb2 import Boolean
        from gz.msgs10.world_control_pb2 import WorldControl
        from gz.transport13 import Node

        self._Boolean, self._WorldControl = Boolean, WorldControl
        self.partition = f"simconform_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        os.environ["GZ_PARTITION"] = self.partition  # the node below reads it when created
        env = dict(os.environ, **(env or {}), GZ_PARTITION=self.partition)
        # a log next to the SDF lives in the backend's temporary folder, removed when it closes:
        # errors then quote its end instead of naming a file that will be gone (_see_log)
        self.log_kept = log_path is not None
        log_path = log_path or sdf_path.with_suffix(".log")
        self.log = open(log_path, "wb")  # noqa: SIM115 - closed in close()
        # -s server only, no -r: start paused, the backend steps it; --headless-rendering: EGL
        self.proc = subprocess.Popen(
            ["gz", "sim", "-s", "--headless-rendering", "-v", "2"]
            + ([] if seed is None else ["--seed", str(int(seed))])
            + [str(sdf_path)],
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            cwd=sdf_path.parent,
            preexec_fn=pdeathsig_preexec,  # the server dies with the run, even a killed one
            # a session of its own: a terminal's Ctrl-C (sent to the whole foreground process
            # group) reaches the run, which stops at the next instant and closes the server;
            # in the run's group the server died at once and the run waited 30 s for it
            start_new_session=True,
        )
        self.node = Node()
        self._lock = threading.Condition()
        self._inbox: dict[str, dict[int, bytes]] = defaultdict(dict)
        try:
            self._wait_ready()
        except BaseException:
            self.close()  # no server left running; the log stays for the message to name
            raise

    def _see_log(self) -> str:
        if self.log_kept:
            return f"see {self.log.name}"
        try:
            self.log.flush()
            tail = Path(self.log.name).read_bytes()[-600:].decode(errors="replace")
        except OSError:
            tail = ""
        return "its log (not kept) ended: " + (" ".join(tail.split())[-300:] or "(empty)")

    # ------------------------------------------------------------------ services

    def _request(self, service: str, req: Any, req_type: Any, timeout_ms: int = 5000) -> bool:
        ok, resp = self.node.request(service, req, req_type, self._Boolean, timeout_ms)
        return bool(ok and resp.data)

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.timeout_s
        req = self._WorldControl(pause=True)
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise EngineError(f"gz sim exited with {self.proc.returncode}; {self._see_log()}")
            if self._request(f"/world/{self.world}/control", req, self._WorldControl, 1000):
                return
            time.sleep(0.2)
        raise EngineError(f"gz sim did not answer within {self.timeout_s:g} s; {self._see_log()}")

    def step(self, n: int, proof: tuple[str, int] | None = None) -> None:
        """Ask the paused world to run n physics iterations and pause again.

        The service answers when the request is queued, not when the iterations are done:
        callers wait for a message stamped with the target time (`wait_stamp`) before they
        write the drive table's next rows or read what the step produced.

        gz.transport13's Python `request` blocks holding the GIL, while a subscription
        callback needs the GIL on the one reception thread that also delivers the service's
        answer: a message arriving during a request delays the answer past the timeout
        although the server got the request and runs it. So a request that seems refused is
        checked against `proof`, a (topic, stamp) the steps must produce, before it fails."""
        if n <= 0:
            return
        req = self._WorldControl(pause=True, multi_step=int(n))
        if self._request(f"/world/{self.world}/control", req, self._WorldControl):
            return
        self._check_alive(f"asked to step {n} iterations")
        if proof is not None:
            try:
                self.wait_stamp(*proof)
                return  # it ran: only the answer was lost
            except EngineError:
                pass
        raise EngineError(f"/world/{self.world}/control refused multi_step {n}; {self._see_log()}")

    # ------------------------------------------------------------------ topics

    def subscribe(self, topic: str, msg_class: Any) -> None:
        """Keep every message on `topic` as (stamp ns -> wire bytes)."""
        from simconform.adapters.gazebo.decode import message_stamp_ns

        def callback(msg: Any) -> None:
            raw = msg.SerializeToString()
            with self._lock:
                self._inbox[topic][message_stamp_ns(raw)] = raw
                self._lock.notify_all()

        if not self.node.subscribe(msg_class, topic, callback):
            raise EngineError(f"could not subscribe to {topic}")

    def wait_stamp(self, topic: str, stamp_ns: int, timeout_s: float = 30.0) -> None:
        """Block until a message stamped `stamp_ns` has arrived on `topic` (kept)."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while stamp_ns not in self._inbox[topic]:
                self._check_alive(f"waiting for {topic} at {stamp_ns} ns")
                left = deadline - time.monotonic()
                if left <= 0:
                    have = sorted(self._inbox[topic])[-3:]
                    raise EngineError(
                        f"no message stamped {stamp_ns} ns on {topic} within {timeout_s:g} s "
                        f"(latest stamps {have}); {self._see_log()}"
                    )
                self._lock.wait(min(left, 0.5))  # a server that dies sends nothing to wake us

    def _check_alive(self, doing: str) -> None:
        if self.proc.poll() is not None:
            code = self.proc.returncode
            how = f"signal {-code}" if code < 0 else f"exit code {code}"
            raise EngineError(f"gz sim ended ({how}) while {doing}; {self._see_log()}")

    def wait_for(self, topic: str, stamp_ns: int, timeout_s: float = 30.0) -> bytes:
        """The message stamped `stamp_ns` on `topic`; older ones on that topic are dropped."""
        self.wait_stamp(topic, stamp_ns, timeout_s)
        with self._lock:
            box = self._inbox[topic]
            raw = box.pop(stamp_ns)
            for old in [s for s in box if s < stamp_ns]:
                del box[old]
            return raw

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
