"""Writing output files (plan `--out`, `export --out-dir`, `profile --out`, the pictures of `explain --svg/--png` and
`backtest --plot`): regular files only, atomically.

- The target must be a regular file or not exist. A character or block device (e.g. /dev/null), a
  named pipe, a socket or a folder is refused with an InputError naming the path and what it is; a
  symbolic link is followed (the file it points to is written, the link stays) and refused the same
  way when it points to one of those.
- Atomic: the text goes to a temp file in the target's folder, is flushed and fsync'ed, then
  `os.replace`s the target, and the folder is fsync'ed. On any failure the temp file is removed and
  the target is left as it was: never a half-written file.
- Mode: a new file gets 0o666 & ~umask (as `open(path, "w")` would); an existing file keeps its
  permission bits.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from pathlib import Path

from baige_plan.errors import InputError

_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISSOCK, "a socket"))


def _kind(mode: int) -> str:
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"


def _cannot(path: Path, e: OSError) -> InputError:
    return InputError(str(path), "", f"cannot write: {e.strerror or e}")


def check_target(path: str | Path) -> tuple[Path, os.stat_result | None]:
    """(the path to write -- symlinks resolved --, its stat or None if it does not exist yet).
    InputError when it exists and is not a regular file."""
    path = Path(path)
    from baige_plan.safe_text import printable
    if printable(str(path)) != str(path):        # an escape sequence in a file name reaches every `ls`
        raise InputError(printable(str(path)), "", "refusing to write: the file name has a control character")
    try:
        st = os.stat(path)                       # follows symlinks
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise _cannot(path, e) from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        what = _kind(st.st_mode)
        if path.is_symlink():
            what = f"a symbolic link to {what} ({os.path.realpath(path)})"
        raise InputError(str(path), "", f"refusing to write: it is {what}, not a regular file")
    return (Path(os.path.realpath(path)) if path.is_symlink() else path), st


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return                                   # a folder we may write but not read: nothing to sync
    try:
        os.fsync(fd)
    except OSError as e:
        if e.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):   # file systems without directory fsync
            raise
    finally:
        os.close(fd)


def write_atomic(path: str | Path, text: str | bytes, *, make_parents: bool = False) -> None:
    """Write `text` (str: UTF-8; bytes, e.g. a PNG: as is) to the regular file `path` atomically (module
    docstring). InputError on a non-regular target, a missing folder (unless `make_parents`) or an OS error;
    nothing is left behind."""
    shown = Path(path)
    target, st = check_target(shown)
    folder = target.parent
    if make_parents:
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise _cannot(shown, e) from None
    if not folder.is_dir():
        raise InputError(str(shown), "", f"folder {str(folder)!r} does not exist")
    data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
    tmp, fd = None, -1
    try:
        for _ in range(100):
            cand = folder / f".{target.name}.{secrets.token_hex(4)}.tmp"
            try:
                fd = os.open(cand, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
            except FileExistsError:
                continue
            tmp = cand
            break
        else:
            raise InputError(str(shown), "", f"cannot create a temp file in {str(folder)!r}")
        if st is not None:
            os.fchmod(fd, stat.S_IMODE(st.st_mode))     # keep an existing file's permission bits
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
        os.close(fd)
        fd = -1
        os.replace(tmp, target)
        tmp = None
        _fsync_dir(folder)
    except OSError as e:
        raise _cannot(shown, e) from None
    finally:
        if fd >= 0:
            os.close(fd)
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
