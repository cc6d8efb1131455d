"""Errors users can act on. Each carries a message (what went wrong, where) and a hint (how to
fix it); the CLI's error boundary prints them as one line and exits with `exit_code`."""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path


class CwError(Exception):
    exit_code = 1

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __reduce__(self):
        # keeps the hint when the error crosses a process boundary (parallel replays)
        return self.__class__, (self.message, self.hint)

    def one_line(self) -> str:
        message = " ".join(self.message.split())  # one line, whatever a library put in it
        if len(message) > 400:
            message = message[:400] + "…"
        return f"{message} ({self.hint})" if self.hint else message


class UsageError(CwError):
    """A flag, name or file the user gave is wrong."""

    exit_code = 2


class ModelError(CwError):
    """An ONNX model that cw cannot read or compile."""

    exit_code = 3


class BundleError(CwError):
    """A bundle that is missing, incomplete, corrupted or for another target."""

    exit_code = 4


class DeviceError(CwError):
    """No such device, or the device cannot run this."""

    exit_code = 5


class OutputExistsError(UsageError):
    pass


class WorkersMissing(CwError):
    """Fewer workers joined the controller than were started, in the time allowed."""


class HostError(CwError):
    """The machine refused: its disk is full, a path is not writable, too many files are open.
    Not a bug of cw's, and not fixed by changing the command alone."""

    exit_code = 6

    # errno → how to fix it; other OS errors stay internal errors, to be reported
    HINTS = {
        errno.ENOSPC: "free some space there, or {elsewhere}",
        errno.EDQUOT: "free some of your quota, or {elsewhere}",
        errno.EACCES: "check that path's permissions, or {elsewhere}",
        errno.EPERM: "check that path's permissions, or {elsewhere}",
        errno.EROFS: "{elsewhere}",
        errno.EMFILE: "raise the open-files limit (ulimit -n) or use fewer workers or copies",
        errno.ENFILE: "the system's open-files table is full: close other programs or raise "
                      "fs.file-max",
    }

    @classmethod
    def of(cls, error: OSError, writing=None, option: str | None = None) -> HostError | None:
        """`error` as a HostError, naming the file it names, else `writing` (what was being
        written: a write() that fails names no file), its hint naming the `option` that
        chooses where; None for other OS errors."""
        hint = cls.HINTS.get(error.errno)
        if hint is None:
            return None
        hint = hint.format(elsewhere="write elsewhere" + (f" ({option})" if option else ""))
        reason = (error.strerror or str(error)).lower()
        if error.filename and not _stands_in_for(error.filename, writing):
            return cls(f"{reason}: {error.filename}", hint)
        return cls(f"{reason}" + (f" writing {writing}" if writing else ""), hint)


def _stands_in_for(filename, writing) -> bool:
    """Whether `filename` is (inside) a temporary that cw's atomic writers make beside an
    output, `.NAME.xxxx`: the user asked for `writing`, and the temporary is no name of theirs."""
    if writing is None:
        return False
    out, path = Path(writing), Path(os.fsdecode(filename))
    return any(p.parent == out.parent and p.name.startswith(f".{out.name}.")
               for p in (path, *path.parents))


@contextlib.contextmanager
def writing(path, option: str | None = None):
    """The OS refusing to write `path` (a full disk, no permission) as a HostError that names
    it, and `option`, the one that chose it; other errors pass unchanged."""
    try:
        yield
    except OSError as e:
        host = HostError.of(e, path, option)
        if host is None:
            raise
        raise host from e


def cannot_write(error: OSError, where, option: str, what: str = "directory") -> CwError:
    """An output (`what`: its folder, or a file) that cannot be made: the machine refusing
    (exit 6), or a path that cannot be one (under a file, say: exit 2)."""
    host = HostError.of(error, where, option)
    if host is not None:  # named by the folder chosen, not a temporary one inside it
        return HostError(f"cannot write to {where}: {(error.strerror or '').lower()}", host.hint)
    reason = error.strerror
    if error.errno in (errno.EEXIST, errno.ENOTDIR):  # "File exists" says it backwards
        path = Path(where)
        blocker = next((p for p in (path, *path.parents) if p.exists() and not p.is_dir()), None)
        if blocker is not None:
            reason = f"{'it' if blocker == path else blocker} is a file, not a folder"
    return UsageError(f"cannot write to {where}: {reason}",
                      f"choose a writable output {what} with {option}")


@contextlib.contextmanager
def creating(folder, option: str):
    """Any OS error making `folder` (or a file in it) as one error line: `cannot_write`."""
    try:
        yield
    except OSError as e:
        raise cannot_write(e, folder, option) from None
