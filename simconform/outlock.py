"""The lock on an output folder: DIR/.simconform/lock, held with flock by its one writer.

flock is exclusive and non-blocking here: a second writer is refused at once (UserError, exit
2) with the holder's pid, command, host and start time, which the holder writes into the file.
The kernel drops the lock when the holder exits, however it exits. A process re-entering its
own lock (run, then verify writing the report) just counts; `session()` keeps every lock taken
inside it until the session ends, so a command holds its folder from first write to last.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import socket
import sys
from pathlib import Path

from simconform.errors import UserError

BOOK = ".simconform"
LOCK = "lock"

_held: dict[str, list] = {}  # realpath -> [fd, depth]
_pins: list[set[str]] = []  # open session() scopes: locks released when the scope ends


@contextlib.contextmanager
def session():
    """Locks taken inside stay held until the session ends: a command that writes a folder in
    steps (`simconform run`: record, then verify) keeps it for the whole command."""
    pinned: set[str] = set()
    _pins.append(pinned)
    try:
        yield
    finally:
        _pins.remove(pinned)
        for key in pinned:
            _release(key)


def lock(out: Path, option: str = "--out") -> int:
    """Take DIR/.simconform/lock (re-entrant within this process); UserError naming the holder
    when another process has it, under `option`: how the user named the folder (`--out`, or
    `DIR` for commands that add to an existing run)."""
    key = os.path.realpath(out)
    if key in _held:
        _held[key][1] += 1
        return _held[key][0]
    path = out / BOOK / LOCK
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise _busy(out, option, holder) from None
        # the file may have been replaced between open and flock: lock the one on disk
        try:
            same = os.stat(path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    info = {
        "pid": os.getpid(),
        "command": " ".join(["simconform", *sys.argv[1:]])[:300]
        if _is_cli()
        else " ".join(sys.argv)[:300],
        "host": socket.gethostname(),
        "since": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(info) + "\n").encode(), 0)
    _held[key] = [fd, 1]
    return fd


def refuse_if_busy(out: Path, option: str = "--out") -> None:
    """UserError naming the holder when another process writes `out`; writes nothing (the lock
    file is only opened to read). The checks on what a folder holds come after this one: a
    writer's half-written files (run.json.tmp) are not the user's."""
    if os.path.realpath(out) in _held:
        return
    try:
        fd = os.open(out / BOOK / LOCK, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return  # no lock file (never written, or not simconform's): nobody holds it
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        raise _busy(out, option, _holder(fd)) from None
    except OSError:
        return
    finally:
        os.close(fd)  # also drops the shared lock taken just to look


def _busy(out: Path, option: str, holder: str) -> UserError:
    then = " or choose another --out" if option == "--out" else ", then run it again"
    return UserError(
        None, option, str(out), f"is being written by {holder}; wait for it to finish{then}"
    )


def _is_cli() -> bool:
    return bool(sys.argv) and (
        Path(sys.argv[0]).name == "simconform" or sys.argv[0].endswith("simconform/cli/__main__.py")
    )


def _holder(fd: int) -> str:
    try:
        info = json.loads(os.pread(fd, 4096, 0).decode() or "{}")
        return f"pid {info['pid']} ({info['command']}) on {info['host']} since {info['since']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "another simconform process"


def unlock(out: Path) -> None:
    key = os.path.realpath(out)
    if key not in _held:
        return
    _held[key][1] -= 1
    if _held[key][1] > 0:
        return
    if _pins:
        _held[key][1] = 1  # kept until the session ends
        _pins[-1].add(key)
        return
    _release(key)


def _release(key: str) -> None:
    entry = _held.pop(key, None)
    if entry is not None:
        with contextlib.suppress(OSError):
            os.ftruncate(entry[0], 0)
        os.close(entry[0])  # closing the last descriptor drops the flock
