"""Worker processes that die with their parent, and temporary folders that do not outlive them.

- `die_with_parent(owner)`, in a worker's initializer (the capture pool, the campaign's local
  pool): on Linux, prctl(PR_SET_PDEATHSIG, SIGKILL) makes the kernel kill the worker the moment
  the process that started it exits, however it exits (SIGKILL included) and whatever the
  worker is doing (a long capture in C code too). That parent is not always the owner: a
  forkserver worker's parent is the fork server, which stays up as long as any worker it
  forked does (each holds its "alive" pipe). So a watchdog thread also polls the owner's pid
  (and the parent pid, which changes when the parent dies) every POLL_S; when either is gone
  it removes the worker's scratch folders and kills the worker.
- `worker_context()`, `become_worker(owner)`: the start method of a run's worker pools (a fork
  server) and the set-up each worker makes first (dies with its owner, leaves Ctrl-C to it,
  BLAS on one thread); `start_fork_server(preload)` starts that server ahead of its first
  pool (simconform/launch.py); `usable_cpus()`.
- `end_pool(pool, kill)`: shut a ProcessPoolExecutor down; with `kill` (its owner stopped or
  failed) end its workers first, so none busy with (or stuck in) a task outlives the owner.
- `watch_process(pid)`: the same watchdog for a process that is not our parent (a Ray task
  watching its driver, when both run on one host).
- `scratch_dir(prefix)`: a temporary folder named after this host and pid. A process killed
  with SIGKILL cannot remove its own; the next scratch_dir of the same prefix on this host
  removes those whose process is gone, so none is left behind for long.
- `pdeathsig_preexec`: for subprocess.Popen(preexec_fn=...): an engine's server started by a
  run dies with the run.
- `INTERRUPTED`: the line a Ctrl-C ends with, here so that the launcher can print it before
  the CLI's modules have loaded.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing as mp
import os
import re
import shutil
import signal
import socket
import sys
import tempfile
import threading
from pathlib import Path

INTERRUPTED = "simconform: interrupted (Ctrl-C)"

PR_SET_PDEATHSIG = 1
POLL_S = 0.5

_scratch: set[str] = set()  # this process's scratch folders, removed by the watchdog


def _prctl_pdeathsig(sig: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def die_with_parent(owner: int | None = None) -> None:
    """Make this worker exit as soon as the process that owns it does (see the module doc).

    `owner`: the pid of the run or driver the worker serves. When it is our parent (a spawned
    pool worker), the kernel's parent-death signal kills us at once; when it is not (a
    forkserver worker: its parent is the fork server, which itself lives until every worker
    it forked has exited), the watchdog polls it. Either way a parent that changes (we were
    re-parented: our parent died) kills us too. A parent that died before this ran is caught
    by the first check."""
    _prctl_pdeathsig(signal.SIGKILL)
    ppid = os.getppid()
    if owner is not None and not alive(owner):
        _die()
    _start_watchdog(lambda: os.getppid() != ppid or (owner is not None and not alive(owner)))


def watch_process(pid: int) -> threading.Event:
    """Kill this process (after removing its scratch folders) once `pid` is gone; set the
    returned event to stop watching."""
    return _start_watchdog(lambda: not alive(pid))


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, dead but not yet reaped, counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no /proc: kill(0) is all we know
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def _start_watchdog(gone) -> threading.Event:
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(POLL_S):
            if gone():
                _die()

    threading.Thread(target=watch, name="simconform-lifeline", daemon=True).start()
    return stop


def _die() -> None:
    for path in list(_scratch):
        shutil.rmtree(path, ignore_errors=True)
    os.kill(os.getpid(), signal.SIGKILL)


def pdeathsig_preexec() -> None:
    """preexec_fn for a server subprocess: it gets SIGKILL when the process that started it
    exits (Linux; elsewhere nothing)."""
    _prctl_pdeathsig(signal.SIGKILL)


# ------------------------------------------------------------------ scratch folders


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9]", "_", socket.gethostname())[:40] or "host"


def scratch_dir(prefix: str, root: str | Path | None = None) -> Path:
    """mkdtemp named <prefix><host>-<pid>-..., after removing this host's leftovers of the
    same prefix whose process is gone. Remove it with `remove_scratch`."""
    base = Path(root or tempfile.gettempdir())
    host = _host()
    pattern = re.compile(re.escape(prefix) + re.escape(host) + r"-(\d+)-")
    with contextlib.suppress(OSError):
        for p in base.iterdir():
            m = pattern.match(p.name)
            if m and int(m.group(1)) != os.getpid() and not alive(int(m.group(1))):
                shutil.rmtree(p, ignore_errors=True)
    path = Path(tempfile.mkdtemp(prefix=f"{prefix}{host}-{os.getpid()}-", dir=base))
    _scratch.add(str(path))
    return path


def remove_scratch(path: str | Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
    _scratch.discard(str(path))


@contextlib.contextmanager
def scratch(prefix: str, root: str | Path | None = None):
    """A scratch_dir for the duration of a with-block."""
    path = scratch_dir(prefix, root)
    try:
        yield path
    finally:
        remove_scratch(path)


def worker_context(preload: tuple[str, ...] = ()):
    """A fork server where there is one, never a fork of this process (which may hold engine
    state a fork copies but cannot use: simconform.prefetch), else spawn.

    `preload`: modules the fork server imports once, before its first fork, so that every
    worker starts with them loaded instead of importing them itself (2 s of CPU a worker on
    the 2-core host, 2026-12-06: numpy, scipy, numba, rosbags, and the `simconform` command's
    own modules, which a worker imports again as its main module). Only modules that hold no
    engine state at import. The first pool of a process sets the list: its server then serves
    every later pool of the process (verify's camera worker after a run's capture pool)."""
    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    if preload:
        ctx.set_forkserver_preload([*COMMON_PRELOAD, *preload])
    return ctx


COMMON_PRELOAD = (
    "simconform.cli",
    "simconform.verify.reading",
    "simconform.verify.camera",
    "simconform.verify.sums",
    "simconform.verify.lidar_sweep",
    "simconform.pipeline.image_noise",
)
"""What any pool's worker imports: the command (each worker runs the main module again, and
for `simconform` that imports the CLI) and verify's reading with its compiled kernels, which
a run's verification needs after its capture pool (verify's own process imports the kernels
only if it reads: verify/sums.py)."""
CAPTURE_PRELOAD = (
    "simconform.prefetch",
    "simconform.pipeline.chain",
    "simconform.jitwarm",
    "simconform.trajectory",
    "trimesh",
    "simconform.actors",
    "simconform.bvhworld",
)
"""A run's capture workers (simconform/prefetch.py); numba's target readied once in the
server (simconform/jitwarm.py); what each worker's initializer loads: the trajectory (with
scipy.interpolate, 0.3 s a worker), for a world with meshes trimesh (with scipy.ndimage and
scipy.sparse.csgraph, 0.09 s), and the scene the reference backend opens (simconform.actors,
simconform.raycast, simconform.bvhcast, simconform.bvhworld: 18 ms), once in the server
instead of in every worker."""


def capture_preload(backend: str, entry: str) -> tuple[str, ...]:
    """What the fork server imports for a run's capture workers: CAPTURE_PRELOAD and, for the
    reference backend, its module (`entry`, "module:attribute"). MuJoCo's and Gazebo's modules
    are left to each worker: an engine is never loaded where a fork could copy it."""
    return (*CAPTURE_PRELOAD, entry.split(":")[0]) if backend == "reference" else CAPTURE_PRELOAD


VERIFY_PRELOAD = ("simconform.verify.parallel", "simconform.jitwarm")
"""verify's camera reader (verify/parallel.py)."""


def start_fork_server(preload: tuple[str, ...]) -> None:
    """Start worker_context(preload)'s fork server now instead of at its first pool's first
    worker, so that it imports its modules while this process does other work
    (simconform/launch.py)."""
    if worker_context(preload).get_start_method() == "forkserver":
        from multiprocessing import forkserver

        # Started with Ctrl-C ignored (kept across exec; Python then installs no
        # KeyboardInterrupt handler): the server imports its preload before it ignores SIGINT
        # itself, so a Ctrl-C in the command's first second printed a traceback from there.
        # The command's own handler is back a few milliseconds later.
        old = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            forkserver.ensure_running()
        finally:
            signal.signal(signal.SIGINT, old)


def usable_cpus() -> int:
    """The CPUs this process may use: its affinity mask where the system has one (not cgroup
    CPU quotas), else the machine's count."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def become_worker(owner: int | None) -> None:
    """A pool worker's first steps: die with `owner`, leave Ctrl-C to it, BLAS on one thread
    for the worker's life (simconform.run.run says why)."""
    from threadpoolctl import threadpool_limits

    die_with_parent(owner)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threadpool_limits(limits=1, user_api="blas")


def end_pool(pool, kill: bool = False) -> None:
    """Wait for a ProcessPoolExecutor's workers; with `kill`, end them first."""
    if kill:
        # ProcessPoolExecutor has no public way to end its workers before Python 3.14
        procs = list((getattr(pool, "_processes", None) or {}).values())
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.join(timeout=10)
        # A worker killed while it was sending a result leaves the pool's reader thread
        # waiting for bytes that never come: this process holds the pipe's other end, so
        # no EOF arrives and shutdown() waits forever (a run stopped by a full disk hung
        # this way, now and then). Closing our end makes the reader see EOF; the pool then
        # winds down as broken.
        writer = getattr(getattr(pool, "_result_queue", None), "_writer", None)
        if writer is not None:
            writer.close()
    pool.shutdown(wait=True, cancel_futures=True)
