"""`read_columns`, the reports' CSV reader: the same columns as `read_csv`'s rows give, and the
same error lines, without a row object."""

import csv

import msgspec
import numpy as np
import pytest

from cw.errors import UsageError
from cw.replay.columns import Columns, read_columns
from cw.serve.telemetry import ACTION_COLUMNS, REQUEST_COLUMNS, ActionRow, RequestRow, \
    TelemetryLog, read_csv
from tests.unit.test_telemetry import action_row, request_row


def assert_same_columns(path, row_type, chunk_rows=7):
    """Every column, and the text masks a report takes, equal to those of `read_csv`'s rows
    (chunks of 7 rows: the codes of text columns must carry across chunks)."""
    got = read_columns(path, row_type, chunk_rows=chunk_rows)
    rows = read_csv(path, row_type)
    want = Columns.of_rows(rows, row_type)
    assert len(got) == len(rows)
    for name in row_type.__struct_fields__:
        assert got[name].dtype == want[name].dtype, name
        assert np.array_equal(got[name], want[name]), name
    for name in ("model", "status"):
        for value in {getattr(r, name) for r in rows} | {"absent"}:
            assert np.array_equal(got.equals(name, value), want.equals(name, value))
    return rows


def test_columns_equal_the_rows_of_read_csv(tmp_path):
    statuses = ("OK", "REJECTED", "TIMED_OUT")
    requests = [request_row(i, model=f"m#{i % 5}", status=statuses[i % 3]) for i in range(50)]
    requests.append(request_row(50, model='odd,"name"'))  # quoted by the csv module
    log = TelemetryLog(tmp_path)
    for r in requests:
        log.request(r)
    for i in range(20):
        log.action(action_row(i))
    log.close()
    assert assert_same_columns(tmp_path / "requests.csv", RequestRow) == requests
    assert_same_columns(tmp_path / "actions.csv", ActionRow)
    (tmp_path / "empty.csv").write_text(",".join(REQUEST_COLUMNS) + "\r\n")
    assert len(read_columns(tmp_path / "empty.csv", RequestRow)) == 0
    (tmp_path / "nothing.csv").write_text("")
    with pytest.raises(UsageError, match="nothing.csv is empty"):
        read_columns(tmp_path / "nothing.csv", RequestRow)


def test_older_files_and_other_column_orders_read_as_read_csv_reads_them(tmp_path):
    old_columns = [c for c in ACTION_COLUMNS if c != "result_sent_ns"]
    with open(tmp_path / "old.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(old_columns)
        w.writerows([getattr(action_row(i), c) for c in old_columns] for i in range(10))
    assert read_columns(tmp_path / "old.csv", ActionRow)["result_sent_ns"].tolist() == [0] * 10
    assert_same_columns(tmp_path / "old.csv", ActionRow)
    columns = list(reversed(REQUEST_COLUMNS)) + ["note"]  # as a spreadsheet might save it
    with open(tmp_path / "turned.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(columns)
        for i in range(10):
            values = dict(zip(REQUEST_COLUMNS, msgspec.structs.astuple(request_row(i))))
            w.writerow([values.get(c, "free, text") for c in columns])
    assert assert_same_columns(tmp_path / "turned.csv", RequestRow) == \
        [request_row(i) for i in range(10)]


@pytest.mark.parametrize("damage,reason", [
    (lambda line: line.replace("True", "maybe", 1), "not a boolean: 'maybe'"),
    (lambda line: line.replace(",1,", ",1.5,", 1), "invalid literal for int"),
    (lambda line: line.rsplit(",", 1)[0], "index out of range"),
    (lambda line: "", "index out of range"),
    (lambda line: line.replace(",1,", f",{2**70},", 1), "beyond 64 bits"),
])
def test_a_bad_row_is_named_by_its_line(tmp_path, damage, reason):
    log = TelemetryLog(tmp_path)
    for i in range(30):
        log.request(request_row(i))
    log.close()
    lines = (tmp_path / "requests.csv").read_text().splitlines()
    lines[17] = damage(lines[17])  # line 18 of the file, in the third chunk of 7
    (tmp_path / "bad.csv").write_text("\n".join(lines) + "\n")
    with pytest.raises(UsageError, match=r"bad\.csv:18: bad telemetry row") as e:
        read_columns(tmp_path / "bad.csv", RequestRow, chunk_rows=7)
    assert reason in str(e.value)
    if "64 bits" not in reason:  # read_csv takes a Python int of any size
        with pytest.raises(UsageError, match=r"bad\.csv:18: bad telemetry row"):
            read_csv(tmp_path / "bad.csv", RequestRow)
