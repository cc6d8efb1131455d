"""summary.json: the headline numbers of a replay, computed from its telemetry rows only (so a
report can be rebuilt from the CSVs alone)."""

from __future__ import annotations

import collections

import numpy as np

from cw.replay.columns import Columns, actions_of, requests_of
from cw.replay.per_model import attainment_spread, per_model
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


def summarize(requests: list[RequestRow] | Columns, actions: list[ActionRow] | Columns, *,
              duration_ns: int,
              runtime: str, scheduler: str, trace: str, seed: int, slo_ns: int,
              extra: dict | None = None, actions_seen: bool = True) -> dict:
    """`actions_seen=False` (a replay against a remote controller, whose action telemetry stays
    there): the figures that come from actions are None, not zero."""
    req, act = requests_of(requests), actions_of(actions)
    n = len(req)
    ok = req.equals("status", "OK")
    n_ok = int(np.count_nonzero(ok))
    n_good = int(np.count_nonzero(ok & req["deadline_met"]))
    # any answer after the deadline, whatever it said: the client needed it by then
    late_mask = req["completion_ns"] > req["deadline_ns"]
    late = int(np.count_nonzero(late_mask))
    # what a late answer said tells why it was late: OK (the work overran its prediction),
    # REJECTED or TIMED_OUT (the controller itself answered late: a stalled process)
    late_by_status = collections.Counter(req["status"][late_mask].tolist())
    rejected = int(np.count_nonzero(req.equals("status", "REJECTED")))
    timed_out = int(np.count_nonzero(req.equals("status", "TIMED_OUT")))
    errors = n - n_ok - rejected
    seconds = duration_ns / NS if duration_ns else 0
    infers = act.equals("kind", "infer") & act.equals("status", "OK")
    overshoot_ns = (req["completion_ns"] - req["deadline_ns"])[late_mask]
    # EXEC end -> result at the controller: what a completion margin must cover, split at the
    # worker's send to tell a slow worker from a slow way back (0: the worker did not stamp it)
    ends, sent = act["end_ns"][infers], act["result_sent_ns"][infers]
    stamped = sent > 0
    answer_delay = {"total": percentiles_ms(act["result_ns"][infers] - ends),
                    "in_worker": percentiles_ms((sent - ends)[stamped]),
                    "way_back": percentiles_ms((act["result_ns"][infers] - sent)[stamped])}
    # how late each INFER that ran got going (on the device), and how many began past their
    # latest_ns: a worker decides before it launches, from predicted ends of the EXECs ahead
    starts = act["start_ns"][infers]
    start_delay = percentiles_ms(starts - act["earliest_ns"][infers])
    started_after_latest = int(np.count_nonzero(starts > act["latest_ns"][infers]))
    summary = {
        "requests": n,
        "completed_in_slo": n_good,
        "rejected": rejected,
        "late": late,
        "late_by_status": dict(sorted(late_by_status.items())),
        "late_overshoot_ms": percentiles_ms(overshoot_ns),
        "errors": errors,
        "timed_out": timed_out,  # among the errors: no result by the deadline, answered at it
        "goodput_rps": round(n_good / seconds, 3) if seconds else 0.0,
        "offered_rps": round(n / seconds, 3) if seconds else 0.0,
        "throughput_rps": round(n_ok / seconds, 3) if seconds else 0.0,
        "slo_attainment": round(n_good / n, 6) if n else 0.0,
        "slo_ms": slo_ns / 1e6,
        # the spread over models: a policy can meet the SLO overall and starve the rare models
        "model_attainment": attainment_spread(per_model(req)),
        "latency_ms": percentiles_ms(req["latency_ns"][ok]),
        "mean_batch_size": round(float(np.mean(act["batch_size"][infers])), 3)
        if infers.any() else 0.0,
        "cold_starts": int(np.count_nonzero(req["cold_start"])),
        "loads": int(np.count_nonzero(act.equals("kind", "load") & act.equals("status", "OK"))),
        "actions_too_late": int(np.count_nonzero(act.equals("status", "TOO_LATE"))),
        "answer_delay_ms": answer_delay,
        "exec_start_delay_ms": start_delay,
        "started_after_latest": started_after_latest,
        "duration_s": seconds,
        "runtime": runtime,
        "simulated": runtime == "simulated",
        "scheduler": scheduler,
        "trace": trace,
        "seed": seed,
    }
    if not actions_seen:
        summary.update(mean_batch_size=None, cold_starts=None, loads=None, actions_too_late=None,
                       answer_delay_ms=None, exec_start_delay_ms=None, started_after_latest=None)
    summary.update(extra or {})
    return summary
