"""summary.json: the headline numbers of a replay, computed from its telemetry rows only (so a
report can be rebuilt from the CSVs alone)."""

from __future__ import annotations

import numpy as np

from cw.serve.telemetry import ActionRow, RequestRow

NS = 1_000_000_000


def percentiles_ms(latencies_ns) -> dict:
    if len(latencies_ns) == 0:
        return {"p50": None, "p99": None, "p999": None, "p9999": None, "max": None}
    a = np.asarray(latencies_ns, dtype=np.float64) / 1e6
    q = np.percentile(a, [50, 99, 99.9, 99.99], method="higher")
    return {"p50": round(float(q[0]), 4), "p99": round(float(q[1]), 4),
            "p999": round(float(q[2]), 4), "p9999": round(float(q[3]), 4),
            "max": round(float(a.max()), 4)}


def summarize(requests: list[RequestRow], actions: list[ActionRow], *, duration_ns: int,
              runtime: str, scheduler: str, trace: str, seed: int, slo_ns: int,
              extra: dict | None = None, actions_seen: bool = True) -> dict:
    """`actions_seen=False` (a replay against a remote controller, whose action telemetry stays
    there): the figures that come from actions are None, not zero."""
    n = len(requests)
    ok = [r for r in requests if r.status == "OK"]
    good = [r for r in ok if r.deadline_met]
    # any answer after the deadline, whatever it said: the client needed it by then
    late_rows = [r for r in requests if r.completion_ns > r.deadline_ns]
    late = len(late_rows)
    # what a late answer said tells why it was late: OK (the work overran its prediction),
    # REJECTED or TIMED_OUT (the controller itself answered late: a stalled process)
    late_by_status: dict[str, int] = {}
    for r in late_rows:
        late_by_status[r.status] = late_by_status.get(r.status, 0) + 1
    rejected = sum(r.status == "REJECTED" for r in requests)
    timed_out = sum(r.status == "TIMED_OUT" for r in requests)
    errors = n - len(ok) - rejected
    seconds = duration_ns / NS if duration_ns else 0
    infers = [a for a in actions if a.kind == "infer" and a.status == "OK"]
    summary = {
        "requests": n,
        "completed_in_slo": len(good),
        "rejected": rejected,
        "late": late,
        "late_by_status": dict(sorted(late_by_status.items())),
        "late_overshoot_ms": percentiles_ms([r.completion_ns - r.deadline_ns
                                             for r in late_rows]),
        "errors": errors,
        "timed_out": timed_out,  # among the errors: no result by the deadline, answered at it
        "goodput_rps": round(len(good) / seconds, 3) if seconds else 0.0,
        "offered_rps": round(n / seconds, 3) if seconds else 0.0,
        "throughput_rps": round(len(ok) / seconds, 3) if seconds else 0.0,
        "slo_attainment": round(len(good) / n, 6) if n else 0.0,
        "slo_ms": slo_ns / 1e6,
        "latency_ms": percentiles_ms([r.latency_ns for r in ok]),
        "mean_batch_size": round(float(np.mean([a.batch_size for a in infers])), 3)
        if infers else 0.0,
        "cold_starts": sum(r.cold_start for r in requests),
        "loads": sum(a.kind == "load" and a.status == "OK" for a in actions),
        "actions_too_late": sum(a.status == "TOO_LATE" for a in actions),
        "duration_s": seconds,
        "runtime": runtime,
        "simulated": runtime == "simulated",
        "scheduler": scheduler,
        "trace": trace,
        "seed": seed,
    }
    if not actions_seen:
        summary.update(mean_batch_size=None, cold_starts=None, loads=None, actions_too_late=None)
    summary.update(extra or {})
    return summary
