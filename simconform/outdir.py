"""Output folders: one writer at a time, and never delete what simconform did not write.

Every folder simconform writes (a run, a replayed run, a comparison, a campaign) holds its
bookkeeping in DIR/.simconform/:

- `lock`: held with flock (exclusive, non-blocking) for as long as a command writes DIR, and
  naming its holder (pid, command, host, start time). A second writer is refused, exit 2, with
  that name; the kernel drops the lock when its holder exits, however it ends (SIGKILL too).
- `outputs.json`: what simconform wrote in DIR, written *before* it is written: files, and
  folders it created itself ("bag/", everything in which is its own). When the writer is done
  (`Claim.seal`) each such folder entry becomes the exact list of files in it.

`--force` deletes exactly those paths and refuses a folder holding anything else (a user's
notes, a symlink, an empty folder of theirs), naming what it found. A folder written before
outputs.json existed is recognised by its layout (LEGACY). Symbolic links are never followed:
`--out` itself must not be one, and one inside DIR is never simconform's.

The lock itself is simconform/outlock.py; which paths are ours, simconform/ownership.py.

Write errors that are about the place rather than the input (a read-only folder, a full disk,
a file size limit) become one UserError (exit 2) with `io_error`; the callers keep what they
wrote and leave run.json saying the run is incomplete.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import uuid
from pathlib import Path

from simconform.errors import UserError
from simconform.outlock import BOOK, LOCK, lock, session, unlock
from simconform.ownership import OUTPUTS, check_target, covers, foreign_paths, owned_paths

__all__ = [
    "BOOK",
    "check_into",
    "check_target",
    "claim",
    "io_error",
    "remove_owned",
    "session",
    "update",
]

# ------------------------------------------------------------------ claiming a folder


class Claim:
    """A locked output folder: declare paths before writing them, seal when done."""

    def __init__(self, out: Path, kind: str, created: list[Path], option: str = "--out") -> None:
        self.out, self.kind, self._created, self.option = out, kind, created, option
        self.paths: list[str] = sorted(owned_paths(out, kind))
        self._fresh: set[str] = set()  # folders declared by this writer
        self._foreign: set[str] = set()  # what was not ours when an update() began

    def declare(self, *rels: str) -> None:
        """Record paths about to be written ("x/" for a folder this writer creates)."""
        new = [r for r in rels if r not in self.paths]
        self._fresh.update(r for r in rels if r.endswith("/"))
        if new:
            self.paths += new
            self._save()

    def record(self, paths) -> None:
        """Record files that were written (absolute or relative to the folder)."""
        rels = []
        for p in paths:
            p = Path(p)
            rels.append((p.relative_to(self.out) if p.is_absolute() else p).as_posix())
        self.declare(*rels)

    def seal(self) -> None:
        """Each folder this writer created becomes the exact list of files it holds."""
        paths = []
        for rel in self.paths:
            folder = self.out / rel.rstrip("/")
            if rel in self._fresh and folder.is_dir() and not folder.is_symlink():
                files = [
                    (Path(r) / f).relative_to(self.out).as_posix()
                    for r, _, fs in os.walk(folder, followlinks=False)
                    for f in fs
                ]
                files = [f for f in files if f not in self._foreign]
                paths += sorted(files) or [rel]
            else:
                paths.append(rel)
        self.paths = list(dict.fromkeys(paths))
        self._fresh.clear()
        self._save()

    def building(self) -> Path:
        """A folder inside DIR/.simconform/ to build the outputs in before moving them into DIR
        (`adopt`); a killed writer's is removed by the next claim, so none is left behind."""
        tmp = self.out / BOOK / f"building-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
        return tmp

    def adopt(self, tmp: Path, last: str | None = None, into: str = "") -> None:
        """Move everything in `tmp` into DIR, or its subfolder `into` (`last` at the end, so
        that the folder looks finished only once it is), replacing our own files of the same
        name by renames: an interrupted writer leaves the old outputs whole, not half replaced.

        A symbolic link where a file goes is refused, never written through."""
        names = sorted(p.name for p in tmp.iterdir())
        if last in names:
            names.remove(last)
            names.append(last)
        dest = self.out / into if into else self.out
        check_into(self.out, into, self.option)
        for n in names:  # a folder of ours is replaced only in DIR itself, which claim checked
            there = dest / n
            if there.is_symlink() or (there.is_dir() and (into or not (tmp / n).is_dir())):
                what = "a symbolic link" if there.is_symlink() else "a folder"
                raise UserError(
                    None,
                    self.option,
                    str(self.out),
                    f"{(Path(into) / n).as_posix()} is {what}; simconform writes only into its "
                    "own files: move it away",
                )
        prefix = into + "/" if into else ""
        self.declare(*[prefix + n + ("/" if (tmp / n).is_dir() else "") for n in names])
        dest.mkdir(exist_ok=True)
        for name in names:
            if (dest / name).is_dir():
                shutil.rmtree(dest / name)
            os.replace(tmp / name, dest / name)
        tmp.rmdir()

    @contextlib.contextmanager
    def staged(self, last: str, into: str = "", replace: bool = True):
        """Yield a folder to build the outputs in; once the body ends without an error, our old
        outputs go (`replace`, for --force), the new ones are renamed in (`adopt`, `last` at
        the end) and the manifest is sealed.

        The old outputs stay whole until the new ones are built, and an interrupted writer
        leaves no staging folder behind (a killed one's is swept by the next claim)."""
        tmp = self.building()
        try:
            yield tmp
            if replace:
                self.clear()
            self.adopt(tmp, last, into)
            self.seal()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def clear(self) -> None:
        """Delete every path the manifest lists (after check_target found nothing else)."""
        owned = set(self.paths)
        for root, dirs, files in os.walk(self.out, topdown=False, followlinks=False):
            rel_root = Path(root).relative_to(self.out)
            if rel_root.parts[:1] == (BOOK,):
                continue
            for name in files:
                rel = (rel_root / name).as_posix()
                if covers(owned, rel):
                    os.unlink(os.path.join(root, name))
            for name in dirs:
                rel = (rel_root / name).as_posix()
                full = os.path.join(root, name)
                if rel != BOOK and not os.path.islink(full):
                    with contextlib.suppress(OSError):  # not empty: something not ours
                        os.rmdir(full)
        _sweep_building(self.out)
        self.paths = []
        self._save()

    def _save(self) -> None:
        write_json_atomic(
            self.out / BOOK / OUTPUTS,
            {"kind": self.kind, "paths": self.paths},
            fsync=False,
        )


def check_into(out: Path, into: str, option: str = "DIR") -> None:
    """Refuse a subfolder `into` of DIR (report/, localization/) that is a symbolic link or a
    file: what goes in it would be written through the link, outside DIR, or fail half way."""
    sub = out / into
    if into and (sub.is_symlink() or (sub.exists() and not sub.is_dir())):
        what = f"a symbolic link (to {os.readlink(sub)})" if sub.is_symlink() else "a file"
        raise UserError(
            None, option, str(out), f"holds {into} as {what}, not a folder; move it away"
        )


def _make_locked(out: Path, option: str = "--out"):
    """Create `out` if needed and lock it; on a refusal, remove what was created."""
    created = _make(out, option)
    try:
        _lock(out, option)
    except BaseException:
        _undo(created)
        raise
    return created


@contextlib.contextmanager
def claim(out: Path, kind: str, force: bool = False, clear: bool = True):
    """Lock `out` for writing a `kind` folder (run, compare, campaign) and yield a Claim.

    The same rules as check_target; with `force` our own old outputs are deleted (at once, or
    by the caller with Claim.clear() when `clear` is False: keep the old run until the new one
    is built). On a refusal nothing is left behind. A campaign is never cleared: it resumes."""
    out = Path(out)
    check_target(out, kind, force)
    created = _make_locked(out)
    try:
        c = Claim(out, kind, created)
        # under the lock: the folder may have changed since the first look
        state = check_target(out, kind, force)
        if not (out / BOOK / OUTPUTS).exists():
            c._save()
        if state == "replace" and clear:
            c.clear()
        else:
            _sweep_building(out)
    except BaseException:
        unlock(out)
        _undo(created)
        raise
    try:
        yield c
    finally:
        unlock(out)


@contextlib.contextmanager
def update(out: Path, kind: str = "run"):
    """Lock an existing folder of ours to add to it (verify rewriting DIR/report/)."""
    out = Path(out)
    if out.is_symlink():
        check_target(out, kind, False)
    created = _make_locked(out, "DIR")  # verify/localize take DIR, not --out
    try:
        _sweep_building(out)  # a killed verify's staged report (under the lock: none is live)
        c = Claim(out, kind, created, "DIR")
        c._foreign = set(foreign_paths(out, kind))
        if not (out / BOOK / OUTPUTS).exists():
            c._save()
        yield c
    finally:
        unlock(out)


def _lock(out: Path, option: str) -> None:
    try:
        lock(out, option)
    except OSError as exc:
        raise io_error(out, exc, option=option) or UserError(
            None, option, str(out), f"cannot take its lock ({exc.strerror}: {exc.filename})"
        ) from None


def _sweep_building(out: Path) -> None:
    """Remove what killed writers left in DIR/.simconform/building-* (never this process's)."""
    for stale in (out / BOOK).glob("building-*"):
        if stale.name.split("-")[1] != str(os.getpid()):
            shutil.rmtree(stale, ignore_errors=True)


def _make(out: Path, option: str = "--out") -> list[Path]:
    """Create out/.simconform (and out and its parents); return what was created."""
    created = []
    for p in reversed([out / BOOK, out, *out.parents]):
        if p.exists():
            continue
        try:
            p.mkdir()
        except FileExistsError:
            continue
        except OSError as exc:  # not only a full or read-only disk: /proc refuses with ENOENT
            _undo(created)
            raise io_error(out, exc, option=option) or UserError(
                None,
                option,
                str(out),
                f"cannot create {p} ({exc.strerror}); choose another {option}",
            ) from None
        created.append(p)
    if (out / BOOK).is_symlink() or not (out / BOOK).is_dir():
        _undo(created)
        raise UserError(None, option, str(out), f"{BOOK} there is not simconform's folder")
    return created


def _undo(created: list[Path]) -> None:
    for p in reversed(created):
        if p.name == BOOK:
            for f in (LOCK, OUTPUTS):
                with contextlib.suppress(OSError):
                    (p / f).unlink()
        with contextlib.suppress(OSError):
            p.rmdir()


# ------------------------------------------------------------------ writing


_PLACE_ERRORS = {
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is used up",
    errno.EFBIG: "a file reached the size limit (ulimit -f)",
    errno.EROFS: "a read-only file system",
    errno.EACCES: "no write permission",
    errno.EPERM: "no write permission",
}


def io_error(
    out: Path, exc: BaseException, what: str = "", option: str = "--out"
) -> UserError | None:
    """The UserError for a write failure that is about the place (full disk, read-only, ...),
    or None for any other error; `option` is how the user named the folder (--out or DIR)."""
    if not isinstance(exc, OSError) or exc.errno not in _PLACE_ERRORS:
        return None
    where = f" writing {exc.filename}" if getattr(exc, "filename", None) else ""
    then = "choose another --out" if option == "--out" else "make room there, then run it again"
    return UserError(
        None,
        option,
        str(out),
        f"{_PLACE_ERRORS[exc.errno]} ({os.strerror(exc.errno)}{where}){what}; free space or {then}",
    )


def write_json_atomic(path: Path, data: dict, fsync: bool = True) -> None:
    """Replace `path` with `data` whole or not at all (a crash never leaves half a file)."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    try:
        with open(tmp, "w") as fh:
            fh.write(json.dumps(data, indent=2, sort_keys=False) + "\n")
            if fsync:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def removable(out: Path, kind: str = "run") -> None:
    """Refuse (UserError) to remove `out` unless all it holds is simconform's own."""
    if out.exists() or out.is_symlink():
        check_target(out, kind, force=True)


def remove_owned(out: Path, kind: str = "run") -> None:
    """Delete a folder of ours (a campaign cell run again): its listed files under its lock,
    then the folder itself if nothing else is left; refuse one holding anything else."""
    out = Path(out)
    if not (out.exists() or out.is_symlink()):
        return
    with claim(out, kind, force=True):
        pass  # claim() cleared it under the lock
    for f in (LOCK, OUTPUTS):
        with contextlib.suppress(OSError):
            (out / BOOK / f).unlink()
    for p in (out / BOOK, out):
        with contextlib.suppress(OSError):
            p.rmdir()
