"""summary.json's figures from telemetry rows (cw/replay/summary.py)."""

from cw.replay.summary import summarize
from cw.serve.telemetry import ActionRow, RequestRow

MS = 1_000_000


def row(i, status, latency_ms, slo_ms=10):
    arrival = i * MS
    done = arrival + int(latency_ms * MS)
    return RequestRow(i, "m", 1, arrival, arrival + slo_ms * MS, slo_ms * MS, done,
                      done - arrival, status, status == "OK" and latency_ms <= slo_ms, 1, 1, 0,
                      i, False, True)


def test_late_answers_are_counted_whatever_they_said_and_broken_down():
    rows = [row(0, "OK", 5), row(1, "OK", 12), row(2, "REJECTED", 0.1), row(3, "REJECTED", 10.5),
            row(4, "TIMED_OUT", 9.5), row(5, "TIMED_OUT", 13), row(6, "OK", 10)]
    s = summarize(rows, [], duration_ns=1_000 * MS, runtime="simulated", scheduler="fifo",
                  trace="t", seed=0, slo_ns=10 * MS)
    assert s["late"] == 3  # 12 ms OK, 10.5 ms REJECTED, 13 ms TIMED_OUT; 10 ms is on time
    assert s["late_by_status"] == {"OK": 1, "REJECTED": 1, "TIMED_OUT": 1}
    assert s["late_overshoot_ms"]["max"] == 3.0 and s["late_overshoot_ms"]["p50"] == 2.0
    assert (s["completed_in_slo"], s["rejected"], s["timed_out"], s["errors"]) == (2, 2, 2, 2)
    assert s["slo_attainment"] == round(2 / 7, 6)
    on_time = summarize([row(0, "OK", 5)], [], duration_ns=MS, runtime="gpu", scheduler="c",
                        trace="t", seed=0, slo_ns=10 * MS)
    assert on_time["late"] == 0 and on_time["late_by_status"] == {}
    assert on_time["late_overshoot_ms"]["max"] is None


def infer_row(i, start_late_ms, window_ms, status="OK"):
    earliest = 10 * i * MS
    start = earliest + int(start_late_ms * MS)
    return ActionRow(i, "infer", status, 1, 0, "m", 1, 1, earliest - 5 * MS, earliest,
                     earliest + int(window_ms * MS), MS, earliest + MS, start, start + MS, MS,
                     0, start - earliest, start + 2 * MS, start + 3 * MS, False)


def test_exec_start_delays_and_starts_past_latest_are_counted_over_infers_that_ran():
    actions = [infer_row(0, 0.05, 1), infer_row(1, 0.5, 0.2), infer_row(2, 2, 1),
               infer_row(3, 9, 1, status="TOO_LATE")]  # refused: never started
    s = summarize([row(0, "OK", 5)], actions, duration_ns=MS, runtime="gpu", scheduler="c",
                  trace="t", seed=0, slo_ns=10 * MS)
    assert s["started_after_latest"] == 2  # 0.5 ms past a 0.2 ms window, 2 ms past 1 ms
    assert s["exec_start_delay_ms"]["max"] == 2.0 and s["exec_start_delay_ms"]["p50"] == 0.5
    remote = summarize([row(0, "OK", 5)], [], duration_ns=MS, runtime="remote", scheduler="c",
                       trace="t", seed=0, slo_ns=10 * MS, actions_seen=False)
    assert remote["started_after_latest"] is None and remote["exec_start_delay_ms"] is None
