"""A serving controller whose --log-dir fills up keeps serving: its telemetry log says so once,
holds rows in memory (bounded, counting what it drops), goes on from the exact byte the disk
cut it at, and leaves files of whole rows. A replay's log raises instead (cw/serve/telemetry.py)."""

import errno
import logging
import os
import subprocess
import sys
import textwrap

import pytest

from cw.serve.loop_errors import LoopErrors
from cw.serve.telemetry import REQUEST_COLUMNS, RequestRow, TelemetryLog, read_csv
from tests.unit.test_telemetry import csv_bytes, request_row


def read_all(fd) -> bytes:
    out = bytearray()
    while True:
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            return bytes(out)
        if not chunk:
            return bytes(out)
        out += chunk


def test_a_write_cut_short_goes_on_from_the_byte_it_stopped_at(tmp_path, caplog):
    log = TelemetryLog(tmp_path, keep=False, write_batch=None, hold_on_error=True)
    log.flush_files()
    header = (tmp_path / "requests.csv").read_bytes()
    # A non-blocking pipe in place of the file: it takes part of a write and then refuses
    # (EAGAIN) until it is read, as a disk refuses until space is freed.
    fd = log._files["requests"].fd
    saved = os.dup(fd)
    r, w = os.pipe()
    os.set_blocking(r, False)
    os.set_blocking(w, False)
    os.dup2(w, fd)
    rows = [request_row(i) for i in range(3000)]
    with caplog.at_level(logging.INFO, logger="cw.telemetry"):
        for row in rows:
            log.request(row)
        while log.pending_rows():
            log.write_some(64)
        assert log.write_error is not None and log.write_error.errno == errno.EAGAIN
        piped = bytearray()
        for _ in range(1000):
            if not log.held_bytes():
                break
            log.flush_files()  # fails again while the pipe is full; logged once
            piped += read_all(r)
        assert log.held_bytes() == 0 and log.write_error is None
        os.dup2(saved, fd)  # the file again: the last rows go there
        more = [request_row(i, model="later") for i in range(3000, 3005)]
        for row in more:
            log.request(row)
        log.close()
    for f in (saved, r, w):
        os.close(f)
    errors = [m.getMessage() for m in caplog.records if m.levelno >= logging.WARNING]
    assert len(errors) == 2, errors
    assert errors[0].startswith(f"cannot write telemetry to {tmp_path} (resource temporarily")
    assert errors[1] == f"telemetry reaches {tmp_path} again, nothing was lost"
    on_disk = (tmp_path / "requests.csv").read_bytes()
    assert on_disk.startswith(header)
    # every byte exactly once, in order: nothing written twice or skipped at the cuts
    assert header + bytes(piped) + on_disk[len(header):] == \
        csv_bytes(REQUEST_COLUMNS, rows + more)
    assert log.lost_rows == 0 and log.failure() == "resource temporarily unavailable"


def test_a_full_disk_keeps_whole_rows_and_counts_what_it_lost(tmp_path):
    """A real file on a real (per-process) size limit: the write is cut mid-row, the log holds
    at most max_held_bytes, and close leaves the file at its last whole row."""
    script = textwrap.dedent("""
        import logging, resource, signal, sys
        from cw.serve.telemetry import TelemetryLog
        from tests.unit.test_telemetry import request_row
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of being killed
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
        log = TelemetryLog(sys.argv[1], keep=False, write_batch=None, hold_on_error=True,
                           max_held_bytes=20_000)
        resource.setrlimit(resource.RLIMIT_FSIZE, (5_000, 5_000))
        for i in range(1000):
            log.request(request_row(i))
            log.write_some(64)
            if i % 50 == 0:
                log.flush_files()
        log.close()
        print(log.lost_rows)
    """)
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True,
                          text=True, timeout=60, cwd=os.getcwd())
    assert done.returncode == 0, done.stderr
    written = read_csv(tmp_path / "requests.csv", RequestRow)  # whole rows only
    size = (tmp_path / "requests.csv").stat().st_size
    assert 4_000 < size <= 5_000 and (tmp_path / "requests.csv").read_bytes().endswith(b"\r\n")
    assert written == [request_row(i) for i in range(len(written))]
    lost = int(done.stdout)
    assert lost == 1000 - len(written)
    lines = done.stderr.splitlines()
    assert [line.split(" (")[0] for line in lines] == [
        f"ERROR cannot write telemetry to {tmp_path}",
        f"ERROR {lost} telemetry rows could not be written to {tmp_path}"], lines
    assert lines[1].endswith("(file too large)")


def test_a_replays_log_raises(tmp_path):
    log = TelemetryLog(tmp_path, keep=False)
    with open("/dev/full", "wb") as full:
        os.dup2(full.fileno(), log._files["requests"].fd)
    for i in range(10):
        log.request(request_row(i))
    with pytest.raises(OSError) as e:
        log.flush()
    assert e.value.errno == errno.ENOSPC
    with pytest.raises(OSError):
        log.close()


def test_a_loop_failing_the_same_way_logs_one_traceback_and_counts_repeats(caplog):
    errors = LoopErrors(logging.getLogger("cw.test"), "test step", report_every_ns=1_000)

    def fail(kind):
        try:
            raise kind("disk full")
        except Exception as e:
            errors.report(e, now)

    with caplog.at_level(logging.INFO, logger="cw.test"):
        now = 0
        for _ in range(500):
            fail(OSError)
        assert [r.exc_info is not None for r in caplog.records] == [True]
        now = 2_000  # past report_every_ns: the repeats so far in one line
        fail(OSError)
        fail(ValueError)  # another kind: its own traceback
        errors.flush()
    lines = [(r.getMessage(), r.exc_info is not None) for r in caplog.records]
    assert lines == [("test step failed", True),
                     ("test step failed 500 more times the same way (traceback above)", False),
                     ("test step failed", True)]


def test_loop_errors_shared_by_threads_keep_one_line_per_kind(caplog):
    import threading

    errors = LoopErrors(logging.getLogger("cw.test"), "worker step")

    def fail(what, detail):
        for _ in range(250):
            try:
                raise RuntimeError("CUDA error")
            except RuntimeError as e:
                errors.report(e, 0, what, detail)

    with caplog.at_level(logging.INFO, logger="cw.test"):
        threads = [threading.Thread(target=fail, args=("INFER", f"m{i}")) for i in range(4)]
        threads.append(threading.Thread(target=fail, args=("LOAD", "m9")))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        errors.flush()
    lines = sorted(r.getMessage() for r in caplog.records)
    # the first INFER failure's model is named; 4 x 250 - 1 more are counted, not logged
    assert len(lines) == 4 and lines[0].startswith("INFER failed (m")
    assert lines[1:] == ["INFER failed 999 more times the same way (traceback above)",
                         "LOAD failed (m9)",
                         "LOAD failed 249 more times the same way (traceback above)"]


def test_closing_twice_leaves_a_file_opened_since_alone(tmp_path):
    """A CSV file closed twice closed its descriptor's number again, by then another file's
    (the transport had that fault: see test_transport). TelemetryLog closes each once."""
    from cw.serve.telemetry import _CsvFile

    csv_file = _CsvFile(tmp_path / "requests.csv", REQUEST_COLUMNS)
    csv_file.drain()
    csv_file.close()
    reused = os.open(tmp_path / "other", os.O_WRONLY | os.O_CREAT)
    try:
        csv_file.close()
        os.write(reused, b"still open")
    finally:
        os.close(reused)
    assert (tmp_path / "other").read_bytes() == b"still open"
    assert (tmp_path / "requests.csv").read_text().startswith(REQUEST_COLUMNS[0])
