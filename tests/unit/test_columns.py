"""Telemetry columns: built from rows, or from the compiled simulator's int64 tables, they
must say the same thing (the summary and report take either)."""

import numpy as np

from cw.replay.columns import Columns, requests_of, split_table
from cw.serve.telemetry import RequestRow

NAMES = ["m0", "m,1"]
STATUS = ["OK", "REJECTED", "TIMED_OUT"]


def _rows():
    return [RequestRow(i, NAMES[i % 2], 1, 10 * i, 10 * i + 100, 100, 10 * i + 5 * (i % 3),
                       5 * (i % 3), STATUS[i % 3], i % 3 == 0, 1 if i % 3 == 0 else 0, 1, 0, i,
                       i % 4 == 0, True)
            for i in range(50)]


def _table(rows):
    def code(field, value):
        return {"model": NAMES, "status": STATUS}[field].index(value)

    fields = RequestRow.__struct_fields__
    return np.array([[code(f, getattr(r, f)) if f in ("model", "status") else int(getattr(r, f))
                      for f in fields] for r in rows], dtype=np.int64)


def test_rows_and_tables_give_the_same_columns():
    rows = _rows()
    a = requests_of(rows)
    table = _table(rows)  # in uneven chunks, as the simulator hands them over
    chunks = [split_table(t, RequestRow) for t in (table[:7], table[7:8], table[8:])]
    b = Columns(RequestRow, len(rows), chunks=chunks, codes={"model": NAMES, "status": STATUS})
    assert requests_of(b) is b and len(a) == len(b) == 50
    for name in RequestRow.__struct_fields__:
        assert a[name].tolist() == b[name].tolist() == [getattr(r, name) for r in rows], name
        assert a[name].dtype == b[name].dtype
    for value in STATUS + ["ERROR"]:
        assert a.equals("status", value).tolist() == b.equals("status", value).tolist() \
            == [r.status == value for r in rows]
    assert a["deadline_met"].dtype == bool and a["latency_ns"].dtype == np.int64


def test_empty():
    a = requests_of([])
    assert len(a) == 0 and a["latency_ns"].size == 0 and a.equals("status", "OK").size == 0
    b = Columns(RequestRow, 0, chunks=[], codes={"model": [], "status": []})
    assert b["model"].size == 0 and b["deadline_met"].dtype == bool
    assert b.equals("status", "OK").size == 0


def test_chunks_are_kept_narrow_where_the_values_fit():
    table = _table(_rows())
    chunk = split_table(table, RequestRow)
    assert chunk["batch_size"].dtype == chunk["model"].dtype == np.int32
    assert chunk["deadline_met"].dtype == bool and chunk["arrival_ns"].dtype == np.int64
    assert sum(c.nbytes for c in chunk.values()) < 0.65 * table.nbytes
    table[3, RequestRow.__struct_fields__.index("worker")] = 2**40  # no such worker, but kept
    wide = split_table(table, RequestRow)
    assert wide["worker"].dtype == np.int64 and wide["worker"][3] == 2**40
    assert Columns(RequestRow, len(table), chunks=[chunk, wide],
                   codes={"model": NAMES, "status": STATUS})["worker"][53] == 2**40
