"""Trace loaders against the real samples, checked independently with the csv module."""

import csv

import numpy as np
import pytest

from cw.replay.traces import MINUTES_PER_DAY, TraceError, bundled_sample, load_file, load_trace
from tests.conftest import SHARED

TRACES = SHARED / "data" / "traces"
SAMPLES_2019 = sorted((TRACES / "azure2019").glob("*.csv")) if TRACES.exists() else []
SAMPLES_2021 = sorted((TRACES / "azure2021").glob("*.csv")) if TRACES.exists() else []


def _independent_2019(path):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    first = 4 if rows[0][0] == "HashOwner" else 3
    return len(rows) - 1, sum(sum(int(v) for v in r[first:]) for r in rows[1:])


@pytest.mark.skipif(not SAMPLES_2019, reason="shared traces not present")
@pytest.mark.parametrize("path", SAMPLES_2019, ids=lambda p: p.name)
def test_2019_samples_load_with_the_files_counts(path):
    trace = load_trace(f"azure:{path}")
    rows, total = _independent_2019(path)
    assert len(trace.functions) == rows
    assert trace.counts.shape == (rows, MINUTES_PER_DAY)
    assert int(trace.counts.sum()) == total
    assert trace.format == ("azure2019" if "official" in path.name else "azure2019-sampled")


@pytest.mark.skipif(not SAMPLES_2021, reason="shared traces not present")
@pytest.mark.parametrize("path", SAMPLES_2021, ids=lambda p: p.name)
def test_2021_samples_arrival_is_end_minus_duration(path):
    trace = load_trace(f"azure:{path}")
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert sum(len(a) for a in trace.arrivals_s) == len(rows)
    assert len(trace.functions) == len({(r["app"], r["func"]) for r in rows})
    expected = sorted(max(0.0, float(r["end_timestamp"]) - float(r["duration"])) for r in rows)
    assert np.allclose(np.sort(np.concatenate(trace.arrivals_s)), expected)
    assert trace.per_minute().sum() == len(rows)


def test_bundled_sample_is_the_1000_function_trace():
    trace = load_trace("azure")
    assert bundled_sample().exists() and len(trace.functions) == 1000
    assert abs(trace.totals().sum() / 86400 - 7.0) < 0.05  # the README's 7.0 r/s mean


def test_several_days_in_sequence(tmp_path):
    src = SAMPLES_2019[0] if SAMPLES_2019 else None
    if src is None:
        pytest.skip("shared traces not present")
    official = TRACES / "azure2019" / "official_schema_1_function.csv"
    for day in (1, 2):
        (tmp_path / f"invocations_per_function_md.anon.d0{day}.csv").write_bytes(
            official.read_bytes())
    trace = load_trace(f"azure:{tmp_path}")
    one = load_file(official)
    assert trace.counts.shape == (1, 2 * MINUTES_PER_DAY)
    assert np.array_equal(trace.counts[0, :MINUTES_PER_DAY], one.counts[0])
    assert np.array_equal(trace.counts[0, MINUTES_PER_DAY:], one.counts[0])


def _write(tmp_path, header, rows, name="t.csv"):
    p = tmp_path / name
    with open(p, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return p


HEADER = ["HashFunction", "HashOwner", "HashApp"] + [f"minute_{i}" for i in range(1, 1441)]


@pytest.mark.parametrize("case,expected", [
    ("missing", "no such trace file"),
    ("unknown", "unknown trace format"),
    ("columns", ":3: 5 columns, expected 1443"),
    ("nonnumeric", ":2: non-numeric count 'x'"),
    ("negative", ":2: negative count"),
    ("empty", "is empty"),
    ("norows", "no functions"),
    ("header", "1444 columns, expected 1443"),
])
def test_bad_traces_name_file_and_line(tmp_path, case, expected):
    good = ["f", "o", "a"] + ["1"] * 1440
    if case == "missing":
        spec = f"azure:{tmp_path / 'nope.csv'}"
    elif case == "unknown":
        spec = f"azure:{_write(tmp_path, ['a', 'b'], [['1', '2']])}"
    elif case == "columns":
        spec = f"azure:{_write(tmp_path, HEADER, [good, ['f', 'o', 'a', '1', '2']])}"
    elif case == "nonnumeric":
        spec = f"azure:{_write(tmp_path, HEADER, [['f', 'o', 'a', 'x'] + ['1'] * 1439])}"
    elif case == "negative":
        spec = f"azure:{_write(tmp_path, HEADER, [['f', 'o', 'a', '-3'] + ['1'] * 1439])}"
    elif case == "empty":
        (tmp_path / "e.csv").write_text("")
        spec = f"azure:{tmp_path / 'e.csv'}"
    elif case == "norows":
        spec = f"azure:{_write(tmp_path, HEADER, [])}"
    else:
        spec = f"azure:{_write(tmp_path, HEADER + ['extra'], [good + ['1']])}"
    with pytest.raises(TraceError) as e:
        load_trace(spec)
    assert expected in e.value.message
    if case not in ("missing", "empty", "norows"):
        assert "t.csv" in e.value.message


def test_a_bare_path_is_read_as_an_azure_trace_and_a_mistyped_name_is_not(tmp_path, monkeypatch):
    good = ["f", "o", "a"] + ["2"] * 1440
    path = _write(tmp_path, HEADER, [good])
    assert load_trace(str(path)).counts.sum() == 2 * 1440
    monkeypatch.chdir(tmp_path)
    assert load_trace("t.csv").counts.sum() == 2 * 1440          # relative, no slash
    with pytest.raises(TraceError, match="no such trace file"):
        load_trace(str(tmp_path / "elsewhere" / "t.csv"))
    with pytest.raises(TraceError, match="unknown trace 'azur'"):
        load_trace("azur")
