"""Whether a command is about to compile numba kernels, so that it can say so first.

The first run after an install (or an upgrade) compiles the kernels it calls, a minute or
more in which no progress line can come (seen: 8 minutes on a loaded host). numba caches each
compiled function under its own index file, `<module>.<function>-<line>.pyXY.nbi`, so a
command that compiled some kernels (`plan`, a lidar-only run) leaves the others uncached:
the check is by function, for the functions this command will call.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from simconform.cli.common import err

# The kernels a command compiles before its first result, by what it runs: measured with an
# empty NUMBA_CACHE_DIR on a one-sensor spec each and on `simconform plan` (2026-12-08; the
# lidar's and camera's largest). "reference ..." only where the reference backend casts rays.
_SERIES = ("simconform.verify.sums.hist_add",)  # every error series but the camera's
KERNELS: dict[str, tuple[str, ...]] = {
    "verify lidar": (
        *_SERIES,
        "simconform.verify.sums.group_sums",
        "simconform.verify.lidar_sweep._sweep",
    ),
    "verify camera": ("simconform.verify.sums.error_sums",),
    "verify imu": _SERIES,
    "verify gnss": _SERIES,
    "verify odom": _SERIES,
    "reference": ("simconform.bvh._build",),
    "reference lidar": (
        "simconform.bvhcast._cast",
        "simconform.bvhcast.cast_planes",
        "simconform.adapters.sweep._column_rotate",
    ),
    "reference camera": ("simconform.bvhcast._cast_tiles", "simconform.adapters.reference._rotate"),
}


def needed(backend: str, kinds: Iterable[str], verify: bool = True) -> list[str]:
    """The kernels a command on `backend` with sensors of `kinds` compiles (KERNELS)."""
    kinds = set(kinds)
    groups = [f"verify {k}" for k in kinds] if verify else []
    if backend == "reference":
        groups += ["reference"] + [f"reference {k}" for k in kinds]
    return [f for g in groups for f in KERNELS.get(g, ())]


# a backend probe's capture (simconform/probe.py: one lidar sweep, one camera frame)
PROBE = needed("reference", ("lidar", "camera"), verify=False)


def say_if_compiling(kernels: Iterable[str]) -> None:
    """A line on stderr before work that will first compile numba kernels (a run, or a probe's
    capture), which would otherwise look like a command hanging or a slow backend."""
    if not kernels_cached(kernels):
        err.print(
            "simconform: compiling the numba kernels first (once after an install: about a "
            "minute on 2 cores, longer on a busy machine; numba caches them for later runs)",
            soft_wrap=True,
        )


def kernels_cached(kernels: Iterable[str]) -> bool:
    """Whether numba's cache holds an up-to-date index for every one of `kernels`
    ("package.module.function").

    numba keeps a module's indexes next to it (its __pycache__), else under NUMBA_CACHE_DIR
    or the user's cache. The check reads an index as numba does, without importing numba
    (this process keeps it out where it can, verify/sums.py)."""
    import importlib.metadata
    import importlib.util
    import os

    try:
        version = importlib.metadata.version("numba")
    except importlib.metadata.PackageNotFoundError:
        return False
    cache = os.environ.get("NUMBA_CACHE_DIR")
    user = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "numba"
    hashed: dict[Path, tuple[bytes, ...]] = {}  # each module's source stamps, read once
    for kernel in kernels:
        module, _, function = kernel.rpartition(".")
        package, _, name = module.rpartition(".")
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            return False
        source = Path(spec.submodule_search_locations[0]) / f"{name}.py"
        pattern = f"{name}.{function}-*.nbi"
        if cache:  # numba then caches there only
            found = list(Path(cache).rglob(pattern))
        else:
            found = list((source.parent / "__pycache__").glob(pattern))
            found += user.rglob(pattern) if user.is_dir() else []
        if source not in hashed:
            hashed[source] = _stamps(source)
        if not _fresh(found, hashed[source], version):
            return False
    return True


def _stamps(source: Path) -> tuple[bytes, ...]:
    """What numba keys an index by: the source's SHA-256 (numba 0.68 here), or its mtime
    (older numba); nothing when the source cannot be read."""
    import hashlib
    import struct

    try:
        return (
            hashlib.sha256(source.read_bytes()).digest(),
            b"G" + struct.pack(">d", source.stat().st_mtime),
        )
    except OSError:
        return ()


def _fresh(indexes: list[Path], stamps: tuple[bytes, ...], version: str) -> bool:
    """Whether one of a function's indexes passes numba's own test (numba.core.caching:
    IndexDataCacheFile._load_index): the numba version that wrote it, then the source's stamp.
    The stamp is looked for in the pickled bytes, not unpickled: the index's other half names
    numba's types, and unpickling it imports numba (0.2 s and the memory this process saves,
    verify/sums.py)."""
    import pickle

    for index in indexes:
        try:
            with open(index, "rb") as fh:
                if pickle.load(fh) != version:
                    continue
                data = fh.read()
        except Exception:  # unreadable, or not an index numba could use either: it recompiles
            continue
        if any(stamp in data for stamp in stamps):
            return True
    return False
