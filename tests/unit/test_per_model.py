"""How each model fared (cw/replay/per_model.py): per-model counts, p99 and the spread of
attainment, from rows in memory and from a CSV read back as columns alike."""

import numpy as np

from cw.replay.columns import read_columns
from cw.replay.per_model import attainment_spread, most_missed, per_model
from cw.replay.summary import summarize
from cw.serve.telemetry import RequestRow, TelemetryLog

MS = 1_000_000


def row(i, model, status, latency_ms, slo_ms=10, cold=False):
    arrival = i * MS
    done = arrival + int(latency_ms * MS)
    return RequestRow(i, model, 1, arrival, arrival + slo_ms * MS, slo_ms * MS, done,
                      done - arrival, status, status == "OK" and latency_ms <= slo_ms, 1, 1, 0,
                      i, cold, True)


def sample_rows():
    rows = [row(0, "a", "OK", 5, cold=True), row(1, "a", "REJECTED", 0.1),
            row(2, "a", "OK", 12), row(3, "b", "TIMED_OUT", 10), row(4, "c", "OK", 2),
            row(5, "c", "OK", 3, cold=True)]
    # d: 200 answers, 1..200 ms, for a p99 that is not simply the maximum
    rows += [row(10 + k, "d", "OK", k + 1, slo_ms=150) for k in range(200)]
    return rows


def by_model(figures):
    return {f.model: f for f in figures}


def test_counts_per_model():
    got = by_model(per_model(sample_rows()))
    assert sorted(got) == ["a", "b", "c", "d"]
    a, b, c, d = (got[m] for m in "abcd")
    assert (a.requests, a.in_slo, a.rejected, a.late, a.errors, a.cold_starts) == (3, 1, 1, 1, 0, 1)
    assert a.missed == 2 and a.attainment == 1 / 3
    assert a.p99_ms == 12.0  # over its OK answers only: the rejection's 0.1 ms is not one
    assert (b.requests, b.in_slo, b.errors, b.late, b.p99_ms) == (1, 0, 1, 0, None)
    assert (c.in_slo, c.missed, c.cold_starts, c.p99_ms) == (2, 0, 1, 3.0)
    want = np.percentile(np.arange(1, 201, dtype=float), 99, method="higher")
    assert d.p99_ms == want and d.p99_ms < 200
    assert (d.in_slo, d.late) == (150, 50)


def test_the_spread_and_the_models_that_missed_most():
    figures = per_model(sample_rows())
    spread = attainment_spread(figures)
    assert spread == {"models": 4, "min": 0.0, "p10": 0.0, "p50": round(1 / 3, 6)}
    # d missed 50, a 2, b 1; c missed none and is not listed
    assert [f.model for f in most_missed(figures)] == ["d", "a", "b"]
    assert [f.model for f in most_missed(figures, count=1)] == ["d"]
    assert attainment_spread([]) == {"models": 0, "min": None, "p10": None, "p50": None}
    assert per_model([]) == []


def test_read_back_from_csv_the_same_figures(tmp_path):
    rows = sample_rows()
    log = TelemetryLog(tmp_path)
    for r in rows:
        log.request(r)
    log.close()
    columns = read_columns(tmp_path / "requests.csv", RequestRow, chunk_rows=7)
    assert by_model(per_model(columns)) == by_model(per_model(rows))


def test_the_summary_carries_the_spread():
    s = summarize(sample_rows(), [], duration_ns=1_000 * MS, runtime="simulated",
                  scheduler="fifo", trace="t", seed=0, slo_ns=10 * MS)
    assert s["model_attainment"] == attainment_spread(per_model(sample_rows()))
    figures = per_model(sample_rows())
    assert sum(f.in_slo for f in figures) == s["completed_in_slo"]
    assert sum(f.requests for f in figures) == s["requests"]
