"""Telemetry CSVs: the fast writer gives the csv module's bytes, quotes when it must, and the
rows read back as written."""

import csv
import io

import msgspec

from cw.serve.metrics import LATENCY_BUCKETS_MS, Metrics
from cw.serve.telemetry import ACTION_COLUMNS, REQUEST_COLUMNS, ActionRow, RequestRow, \
    TelemetryLog, read_csv


def request_row(i, model="resnet50#3", status="OK"):
    return RequestRow(i, model, 1, 10**12 + i, 10**12 + 10**8, 10**8, 10**12 + 5 * 10**6,
                      5 * 10**6 - i, status, i % 2 == 0, 4, 1, 0, 7 * i, i % 3 == 0, True)


def action_row(i):
    return ActionRow(i, "infer", "TOO_LATE", 2, 1, "m", 8, 3, 10**12, 10**12 + 1, 10**12 + 2,
                     -5, 10**12 + 7, 0, 0, 123, -128, 0, 10**12 + 9, False)


def csv_bytes(columns, rows):
    buf = io.StringIO(newline="")
    w = csv.writer(buf)
    w.writerow(columns)
    w.writerows(msgspec.structs.astuple(r) for r in rows)
    return buf.getvalue().encode()


def test_csv_files_equal_the_csv_modules_and_read_back(tmp_path):
    requests = [request_row(i) for i in range(5000)]  # more than one batch
    actions = [action_row(i) for i in range(10)]
    log = TelemetryLog(tmp_path)
    for r in requests:
        log.request(r)
    for a in actions:
        log.action(a)
    log.close()
    assert (tmp_path / "requests.csv").read_bytes() == csv_bytes(REQUEST_COLUMNS, requests)
    assert (tmp_path / "actions.csv").read_bytes() == csv_bytes(ACTION_COLUMNS, actions)
    assert read_csv(tmp_path / "requests.csv", RequestRow) == requests
    assert read_csv(tmp_path / "actions.csv", ActionRow) == actions


def test_names_that_need_quoting_are_quoted(tmp_path):
    rows = [request_row(1), request_row(2, model='odd,"name"'), request_row(3)]
    log = TelemetryLog(tmp_path)
    for r in rows:
        log.request(r)
    log.close()
    assert (tmp_path / "requests.csv").read_bytes() == csv_bytes(REQUEST_COLUMNS, rows)
    assert read_csv(tmp_path / "requests.csv", RequestRow) == rows


def test_latency_buckets_are_inclusive_upper_bounds():
    m = Metrics()
    for ms in LATENCY_BUCKETS_MS:
        m.request("OK", ms * 1_000_000, True)        # exactly on a bound: that bucket
    m.request("OK", LATENCY_BUCKETS_MS[0] * 1_000_000 + 1, True)  # just above: the next
    m.request("OK", 10**12, False)                   # beyond the last: the overflow bucket
    assert m.latency_buckets[0] == 1
    assert m.latency_buckets[1] == 2
    assert m.latency_buckets[2:-1] == [1] * (len(LATENCY_BUCKETS_MS) - 2)
    assert m.latency_buckets[-1] == 1


def test_columns_are_read_by_name_and_bad_rows_name_their_line(tmp_path):
    import pytest

    from cw.errors import UsageError

    rows = [request_row(i) for i in range(3)]
    # another order and a column cw does not know, as a spreadsheet might save it
    columns = list(reversed(REQUEST_COLUMNS)) + ["note"]
    with open(tmp_path / "r.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(columns)
        for r in rows:
            values = dict(zip(REQUEST_COLUMNS, msgspec.structs.astuple(r)))
            w.writerow([values.get(c, "x") for c in columns])
    assert read_csv(tmp_path / "r.csv", RequestRow) == rows
    text = (tmp_path / "r.csv").read_text().splitlines()
    text[2] = text[2].replace("True", "maybe", 1)
    (tmp_path / "bad.csv").write_text("\n".join(text) + "\n")
    with pytest.raises(UsageError, match=r"bad\.csv:3: bad telemetry row"):
        read_csv(tmp_path / "bad.csv", RequestRow)
    (tmp_path / "short.csv").write_text(",".join(REQUEST_COLUMNS[:-1]) + "\n")
    with pytest.raises(UsageError, match="lacks columns simulated"):
        read_csv(tmp_path / "short.csv", RequestRow)
