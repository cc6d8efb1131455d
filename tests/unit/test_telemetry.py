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
                     -5, 10**12 + 7, 0, 0, 123, -128, 0, 10**12 + 8, 10**12 + 9, False)


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


def test_files_of_an_older_cw_read_back_without_the_columns_added_since(tmp_path):
    rows = [action_row(i) for i in range(3)]
    old_columns = [c for c in ACTION_COLUMNS if c != "result_sent_ns"]
    with open(tmp_path / "actions.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(old_columns)
        w.writerows([getattr(r, c) for c in old_columns] for r in rows)
    back = read_csv(tmp_path / "actions.csv", ActionRow)
    assert back == [msgspec.structs.replace(r, result_sent_ns=0) for r in rows]
    assert back[0].result_ns == rows[0].result_ns  # matched by name, not position


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
    assert m.latency.counts[0] == 1
    assert m.latency.counts[1] == 2
    assert m.latency.counts[2:-1] == [1] * (len(LATENCY_BUCKETS_MS) - 2)
    assert m.latency.counts[-1] == 1


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


def test_a_serving_loop_writes_a_few_rows_at_a_time(tmp_path):
    """write_batch=None: nothing reaches the files until the owner asks; write_some writes the
    oldest rows, shared between the two files, and the files end up whole."""
    log = TelemetryLog(tmp_path, keep=False, write_batch=None)
    requests = [request_row(i) for i in range(5000)]
    actions = [action_row(i) for i in range(3)]
    for r in requests:
        log.request(r)
    for a in actions:
        log.action(a)
    log.flush_files()
    assert log.pending_rows() == 5003
    assert (tmp_path / "requests.csv").read_text().splitlines() == [",".join(REQUEST_COLUMNS)]
    assert log.write_some(10) == 10  # 7 requests and all 3 actions: halves, the rest to one
    assert log.pending_rows() == 4993
    log.flush_files()
    written = read_csv(tmp_path / "requests.csv", RequestRow)
    assert written == requests[:7]
    assert read_csv(tmp_path / "actions.csv", ActionRow) == actions
    assert log.write_some(64) == 64  # no actions wait: all 64 to requests
    log.flush_files()
    assert read_csv(tmp_path / "requests.csv", RequestRow) == requests[:71]
    log.close()
    assert read_csv(tmp_path / "requests.csv", RequestRow) == requests


def test_loop_busy_histogram_renders_for_prometheus():
    m = Metrics()
    for ns in (50_000, 300_000, 1_000_000, 7_000_000, 200_000_000):
        m.loop_busy.observe(ns)
    text = m.render()
    assert 'cw_controller_loop_busy_seconds_bucket{le="0.0001"} 1' in text
    assert 'cw_controller_loop_busy_seconds_bucket{le="0.001"} 3' in text  # inclusive bound
    assert 'cw_controller_loop_busy_seconds_bucket{le="0.01"} 4' in text
    assert 'cw_controller_loop_busy_seconds_bucket{le="+Inf"} 5' in text
    assert "cw_controller_loop_busy_seconds_count 5" in text
    assert "cw_controller_loop_busy_max_seconds 0.200000" in text


def test_an_earlier_serving_runs_files_are_set_aside_not_overwritten(tmp_path):
    import os

    from cw.serve.launch import set_aside_earlier_run

    assert set_aside_earlier_run(tmp_path) is None  # nothing there yet
    names = ("requests.csv", "actions.csv", "stalls.log", "worker-0.log", "worker-1.log")
    for name in names:
        (tmp_path / name).write_text(f"earlier {name}\n")
    (tmp_path / "notes.txt").write_text("the user's own\n")
    os.utime(tmp_path / "requests.csv", (1_700_000_000, 1_700_000_000))
    os.utime(tmp_path / "actions.csv", (1_700_000_000, 1_700_000_000))
    for name in names[2:]:
        os.utime(tmp_path / name, (1_600_000_000, 1_600_000_000))
    first = set_aside_earlier_run(tmp_path)
    assert first.parent == tmp_path and first.name.startswith("earlier-2023")  # newest file's
    assert sorted(p.name for p in first.iterdir()) == sorted(names)
    assert all((first / n).read_text() == f"earlier {n}\n" for n in names)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([first.name, "notes.txt"])
    for name in names[:2]:  # a run at the same second again: a folder of its own
        (tmp_path / name).write_text("again\n")
        os.utime(tmp_path / name, (1_700_000_000, 1_700_000_000))
    second = set_aside_earlier_run(tmp_path)
    assert second.name == first.name + "-2" and (second / "requests.csv").read_text() == "again\n"


def test_what_a_server_served_in_one_line():
    m = Metrics()
    assert m.served_text() == ""
    m.request("OK", 5_000_000, True)
    assert m.served_text() == "1 request: 1 in SLO"
    for status, in_slo in (("OK", True), ("OK", False), ("REJECTED", False),
                           ("REJECTED", False), ("UNKNOWN_MODEL", False)):
        m.request(status, 5_000_000, in_slo)
    assert m.served_text() == ("6 requests: 2 in SLO, 1 OK but late, 2 rejected, "
                               "1 unknown model")
