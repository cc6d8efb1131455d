"""Telemetry rows: one per request and one per action. Columns are defined here, once, and
documented in docs/telemetry.md; the live controller, the simulator and the reports share them.
All times are integer nanoseconds on the controller's clock (virtual time in a simulation).

Rows hold only numbers and strings, so they are not tracked by Python's cycle collector
(`gc=False`): a long run keeps millions of them, and scanning them would pause the controller."""

from __future__ import annotations

import csv
import io
import logging
import os
import threading
from pathlib import Path

import msgspec


class RequestRow(msgspec.Struct, frozen=True, gc=False):
    request_id: int        # the controller's id for the request
    model: str             # model instance id
    n: int                 # samples in the request
    arrival_ns: int        # when the controller received it
    deadline_ns: int       # arrival + SLO
    slo_ns: int            # latency objective it was given
    completion_ns: int     # when the controller sent the response
    latency_ns: int        # completion - arrival
    status: str            # RequestStatus name
    deadline_met: bool     # status OK and completion ≤ deadline
    batch_size: int        # compiled batch size it ran in (0 if it did not run)
    worker: int            # -1 if it did not run
    gpu: int               # device index on that worker
    action_id: int         # the INFER that served it, -1 if none
    cold_start: bool       # no GPU held the model when it arrived, and it was served
    simulated: bool        # served by a simulated worker


class ActionRow(msgspec.Struct, frozen=True, gc=False):
    action_id: int         # unique per controller run
    kind: str              # load, unload or infer
    status: str            # Status name, or LOST when its worker left before answering
    worker: int            # worker id given at registration
    gpu: int               # device index on that worker
    model: str             # model instance id
    batch_size: int        # compiled batch size (INFER), else 0
    requests: int          # requests carried (INFER)
    sent_ns: int           # when the controller sent it
    earliest_ns: int       # window the worker had to start it in
    latest_ns: int         # (both on the controller clock)
    expected_ns: int       # predicted duration
    expected_end_ns: int   # earliest + expected
    start_ns: int          # measured start of the main phase (EXEC or weights copy), 0 if none
    end_ns: int            # measured end of the main phase
    measured_ns: int       # device-measured duration of the main phase
    prediction_error_ns: int   # measured - expected
    completion_error_ns: int   # end - expected_end
    result_sent_ns: int    # when the worker sent the result (controller clock), 0 if unstamped
    result_ns: int         # when the result reached the controller
    simulated: bool        # executed by a simulated worker


REQUEST_COLUMNS = list(RequestRow.__struct_fields__)
# Columns that files written by an older cw lack; they read back as this value ("unknown").
ADDED_COLUMNS = {"result_sent_ns": "0"}
ACTION_COLUMNS = list(ActionRow.__struct_fields__)

_TEXT_FIELDS = {kind: [f for f in row.__struct_fields__ if row.__annotations__[f] == "str"]
                for kind, row in (("requests", RequestRow), ("actions", ActionRow))}
_ROW_FORMAT = {"requests": ",".join(["%s"] * len(REQUEST_COLUMNS)) + "\r\n",
               "actions": ",".join(["%s"] * len(ACTION_COLUMNS)) + "\r\n"}
_QUOTE_CHARS = frozenset(',"\r\n')
# a file's buffer goes to the OS when it reaches this, or on flush_files
_DRAIN_BYTES = 64 << 10

log = logging.getLogger("cw.telemetry")


class _CsvFile:
    """One telemetry CSV, written through a byte buffer of its own with `os.write`, which says
    how many bytes reached the file: when the disk fills mid-write the rest stays buffered, and
    a retry goes on from the byte it stopped at, so no row is written twice or lost in a
    buffered file object's state."""

    def __init__(self, path: Path, header: list[str]):
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self.buffer = bytearray()
        self.written_bytes = 0
        self.row_end_bytes = 0  # where the last whole row written ends (what a cut file keeps)
        sink = io.StringIO()
        csv.writer(sink).writerow(header)
        self.append(sink.getvalue())

    def append(self, text: str) -> None:
        self.buffer += text.encode()

    def unwritten_rows(self) -> int:
        """Rows not (wholly) in the file: each ends its line (names needing a newline quoted
        inside would count twice)."""
        return self.buffer.count(b"\n") - (self.row_end_bytes == 0 and len(self.buffer) > 0)

    def drain(self) -> None:
        """Write the buffer out; raises the OSError that stops it, with what went cut off."""
        while self.buffer:
            n = os.write(self.fd, self.buffer)
            end = self.buffer.rfind(b"\n", 0, n)
            if end >= 0:
                self.row_end_bytes = self.written_bytes + end + 1
            self.written_bytes += n
            del self.buffer[:n]

    def close(self, keep_cut_row: bool = True) -> None:
        if self.fd < 0:  # once only: the number may be another file's by now (transport.py)
            return
        try:
            if not keep_cut_row and self.written_bytes != self.row_end_bytes:
                os.ftruncate(self.fd, self.row_end_bytes)  # frees space: works on a full disk
        finally:
            fd, self.fd = self.fd, -1
            os.close(fd)


class TelemetryLog:
    """Keeps rows in memory (for summaries) and, with a directory, appends them to CSV files
    `requests.csv` and `actions.csv`. Rows reach the files in batches of `write_batch` as they
    come, on `flush` and on `close`. A serving loop passes `write_batch=None` and calls
    `write_some` every iteration instead: formatting a row takes ~3 µs, so a batch of thousands
    at once would hold the loop up for milliseconds, longer than the deadlines it guards.

    A write that fails (a full disk, say) raises its OSError, unless `hold_on_error`: then a
    server logs it once and goes on serving while the log holds unwritten rows in memory (up to
    `max_held_bytes`, then counts the rows it drops) and retries on each `flush_files`."""

    def __init__(self, directory: str | Path | None = None, keep: bool = True,
                 write_batch: int | None = 4096, hold_on_error: bool = False,
                 max_held_bytes: int = 64 << 20):
        self.keep = keep
        self.write_batch = write_batch
        self.hold_on_error = hold_on_error
        self.max_held_bytes = max_held_bytes
        self.directory = None if directory is None else Path(directory)
        self.requests: list[RequestRow] = []
        self.actions: list[ActionRow] = []
        self.write_error: OSError | None = None  # the failure being held through, if any
        self.dropped_rows = 0                    # rows dropped since it began
        self.last_write_error: OSError | None = None  # kept after writing resumes
        self.lost_rows = 0  # rows that never reached the files: dropped, or left at close
        self._lock = threading.Lock()
        self._files: dict[str, _CsvFile] = {}
        self._unwritten: dict[str, list] = {"requests": [], "actions": []}
        if self.directory is not None:
            self.directory.mkdir(parents=True, exist_ok=True)
            for name, cols in (("requests", REQUEST_COLUMNS), ("actions", ACTION_COLUMNS)):
                self._files[name] = _CsvFile(self.directory / f"{name}.csv", cols)

    def request(self, row: RequestRow) -> None:
        self._record("requests", self.requests, row)

    def action(self, row: ActionRow) -> None:
        self._record("actions", self.actions, row)

    def extend(self, kind: str, rows: list, text: str | None = None) -> None:
        """Rows of one kind ("requests" or "actions") at once, in order. `text`, where given, is
        those rows as this log would write them to CSV (the compiled simulator formats its own)."""
        if self.keep:
            (self.requests if kind == "requests" else self.actions).extend(rows)
        if not self._files:
            return
        if text is not None:
            with self._lock:
                self._write(kind)  # rows that came before these
                self._append(kind, text)
            return
        pending = self._unwritten[kind]
        pending.extend(rows)
        if self.write_batch is not None and len(pending) >= self.write_batch:
            with self._lock:
                self._write(kind)

    def _record(self, kind: str, kept: list, row) -> None:
        # No lock on this per-request path: _write takes it, and cuts what it writes from the
        # front of the list, so a row appended meanwhile is never lost.
        if self.keep:
            kept.append(row)
        if self._files:
            pending = self._unwritten[kind]
            pending.append(row)
            if self.write_batch is not None and len(pending) >= self.write_batch:
                with self._lock:
                    self._write(kind)

    def pending_rows(self) -> int:
        """Rows kept for the files and not formatted for them yet."""
        return len(self._unwritten["requests"]) + len(self._unwritten["actions"])

    def held_bytes(self) -> int:
        """Bytes formatted for the files and not written to them yet."""
        return sum(len(f.buffer) for f in self._files.values())

    def write_some(self, max_rows: int) -> int:
        """Write up to `max_rows` of the oldest unwritten rows, half of them for each file
        where both have rows waiting; returns how many were written."""
        if not self._files:
            return 0
        with self._lock:
            requests = min(len(self._unwritten["requests"]),
                           max(max_rows // 2, max_rows - len(self._unwritten["actions"])))
            written = self._write("requests", requests)
            return written + self._write("actions", max_rows - written)

    def _write(self, kind: str, limit: int | None = None) -> int:
        # Called under the lock. Appends take no lock (they are on every request's path): the
        # rows written are cut from the front of the list, so a row appended meanwhile by
        # another thread stays for the next write instead of being lost.
        rows = self._unwritten[kind]
        n = len(rows) if limit is None else min(len(rows), limit)
        if not n or kind not in self._files:
            return 0
        if self.write_error is not None and self.held_bytes() >= self.max_held_bytes:
            self.dropped_rows += n
            self.lost_rows += n
        else:
            batch = rows[:n]
            astuple = msgspec.structs.astuple
            texts = set().union(*({getattr(r, f) for r in batch} for f in _TEXT_FIELDS[kind]))
            if any(_QUOTE_CHARS.intersection(t) for t in texts):
                sink = io.StringIO()
                csv.writer(sink).writerows([astuple(r) for r in batch])
                text = sink.getvalue()
            else:
                # Numbers and plain names need no quoting: one format per row is ~2.5x faster
                # than the csv writer and gives the same bytes.
                fmt = _ROW_FORMAT[kind]
                text = "".join([fmt % astuple(r) for r in batch])
            self._append(kind, text)
        del rows[:n]
        return n

    def _append(self, kind: str, text: str) -> None:
        file = self._files[kind]
        file.append(text)
        # while failing, retries wait for flush_files: a syscall per row would slow the loop
        if len(file.buffer) >= _DRAIN_BYTES and self.write_error is None:
            self._drain()

    def _drain(self) -> None:
        try:
            for file in self._files.values():
                file.drain()
        except OSError as e:
            if not self.hold_on_error:
                raise
            if self.write_error is None:
                log.error("cannot write telemetry to %s (%s); serving goes on, and the rows "
                          "wait in memory (up to %d MiB) until it can", self.directory,
                          (e.strerror or str(e)).lower(), self.max_held_bytes >> 20)
            self.write_error = self.last_write_error = e
            return
        if self.write_error is not None:
            dropped = f"; {self.dropped_rows} rows were dropped meanwhile" \
                if self.dropped_rows else ", nothing was lost"
            log.warning("telemetry reaches %s again%s", self.directory, dropped)
            self.write_error = None
            self.dropped_rows = 0

    def failure(self) -> str | None:
        """Why rows were lost ("no space left on device"), if any were."""
        error = self.last_write_error
        return None if error is None else (error.strerror or str(error)).lower()

    def flush_files(self) -> None:
        """Hand what was formatted so far to the OS (readers of the files see it)."""
        with self._lock:
            self._drain()

    def flush(self) -> None:
        with self._lock:
            for kind in self._unwritten:
                self._write(kind)
            self._drain()

    def close(self) -> None:
        """Write what is left and close the files. Where that fails on a log that holds on
        errors, the files keep the rows written so far (no cut last row) and one line says
        how many could not be written."""
        with self._lock:
            try:
                for kind in self._unwritten:
                    self._write(kind)
                self._drain()
                if self.write_error is not None:
                    self.lost_rows += sum(f.unwritten_rows() for f in self._files.values())
                    log.error("%d telemetry rows could not be written to %s (%s)",
                              self.lost_rows, self.directory, self.failure())
            finally:
                files, self._files = self._files, {}
                for file in files.values():
                    try:
                        file.close(keep_cut_row=self.write_error is None)
                    except OSError:
                        if not self.hold_on_error:
                            raise


def _parse_bool(text: str) -> bool:
    if text in ("True", "true", "1"):
        return True
    if text in ("False", "false", "0"):
        return False
    raise ValueError(f"not a boolean: {text!r}")


def read_header(path: str | Path, reader, row_type) -> list[str]:
    """The header row of a telemetry CSV, checked to hold `row_type`'s columns."""
    from cw.errors import UsageError

    header = next(reader, None)
    if header is None:
        raise UsageError(f"{path} is empty", "it should start with a header row")
    missing = [c for c in row_type.__struct_fields__ if c not in header and c not in ADDED_COLUMNS]
    if missing:
        raise UsageError(f"{path} lacks columns {', '.join(missing)}",
                         "give a file written by cw (columns: docs/telemetry.md)")
    return header


def row_parser(header: list[str], row_type):
    """`lambda rec: Row(int(rec[0]), rec[1], ...)` for a file with this header: one generated
    function per file, as a replay of an hour has millions of rows and a loop over the fields
    per row took 1.4x as long. It holds only column indices and the converters above."""
    annotations = row_type.__annotations__
    names = {"int": "int", "str": "", "bool": "_bool", "float": "float"}
    args = ", ".join(f"{names[str(annotations[c])]}(rec[{header.index(c)}])" if c in header
                     else f"{names[str(annotations[c])]}({ADDED_COLUMNS[c]!r})"
                     for c in row_type.__struct_fields__)
    return eval(f"lambda rec: _Row({args})",  # noqa: S307
                {"_Row": row_type, "_bool": _parse_bool, "int": int, "float": float})


def bad_row(path, line_no: int, error: Exception | str):
    from cw.errors import UsageError

    return UsageError(f"{path}:{line_no}: bad telemetry row ({error})",
                      "the file was edited or cut short; re-run the replay")


def read_csv(path: str | Path, row_type):
    """Rows of a telemetry CSV as structs (types converted back from text). Columns are matched
    by name, so files with extra columns or another order still read. (Reports read columns
    instead: cw/replay/columns.py `read_columns`.)"""
    rows = []
    with open(path, newline="") as f:
        reader = csv.reader(f)
        build = row_parser(read_header(path, reader, row_type), row_type)
        for line_no, rec in enumerate(reader, start=2):
            try:
                rows.append(build(rec))
            except (ValueError, IndexError) as e:
                raise bad_row(path, line_no, e) from None
    return rows
