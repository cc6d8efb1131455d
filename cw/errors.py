"""Errors users can act on. Each carries a message (what went wrong, where) and a hint (how to
fix it); the CLI's error boundary prints them as one line and exits with `exit_code`."""

from __future__ import annotations


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
