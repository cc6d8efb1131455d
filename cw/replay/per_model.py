"""How each model fared in a replay.

A replay's headline numbers can hide a policy that serves the busy models well and starves the
rest: on the Azure trace most models get a few requests a minute, and each of those is a cold
start. These figures, from the request telemetry alone, tell the two apart: the summary's
spread of SLO attainment over models, and the report's table of the models that missed most.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cw.replay.columns import Columns, requests_of


@dataclass(frozen=True)
class ModelFigures:
    """One model's requests, and what became of them."""

    model: str
    requests: int
    in_slo: int
    rejected: int
    late: int          # answered after the deadline, whatever the answer said
    errors: int        # neither OK nor REJECTED (TIMED_OUT among them)
    cold_starts: int
    p99_ms: float | None  # over its OK answers; None without any

    @property
    def missed(self) -> int:
        return self.requests - self.in_slo

    @property
    def attainment(self) -> float:
        return self.in_slo / self.requests


def per_model(requests) -> list[ModelFigures]:
    """A row per model that received at least one request, in no particular order."""
    req: Columns = requests_of(requests)
    if len(req) == 0:
        return []
    codes, names = req.factorize("model")
    m = len(names)

    def count(mask=None) -> np.ndarray:
        return np.bincount(codes if mask is None else codes[mask], minlength=m)

    ok = req.equals("status", "OK")
    rejected = req.equals("status", "REJECTED")
    counts = {"requests": count(), "in_slo": count(ok & req["deadline_met"]),
              "rejected": count(rejected),
              "late": count(req["completion_ns"] > req["deadline_ns"]),
              "errors": count(~ok & ~rejected), "cold_starts": count(req["cold_start"])}
    p99 = _p99_ms(codes[ok], req["latency_ns"][ok], m)
    return [ModelFigures(names[i], *(int(c[i]) for c in counts.values()),
                         None if np.isnan(p99[i]) else round(float(p99[i]), 4))
            for i in np.flatnonzero(counts["requests"])]


def _p99_ms(codes: np.ndarray, latencies_ns: np.ndarray, m: int) -> np.ndarray:
    """Per code, the p99 of its latencies ("higher", as the summary's); NaN where none."""
    out = np.full(m, np.nan)
    if codes.size == 0:
        return out
    order = np.lexsort((latencies_ns, codes))
    sorted_codes, sorted_ns = codes[order], latencies_ns[order]
    present, starts, sizes = np.unique(sorted_codes, return_index=True, return_counts=True)
    picks = starts + np.ceil(0.99 * (sizes - 1)).astype(np.int64)
    out[present] = sorted_ns[picks] / 1e6
    return out


def attainment_spread(rows: list[ModelFigures]) -> dict:
    """summary.json's `model_attainment`: over the models that got requests, the lowest SLO
    attainment, the 10th percentile and the median (None without requests)."""
    if not rows:
        return {"models": 0, "min": None, "p10": None, "p50": None}
    a = np.array([r.attainment for r in rows])
    p10, p50 = np.percentile(a, [10, 50], method="lower")
    return {"models": len(rows), "min": round(float(a.min()), 6),
            "p10": round(float(p10), 6), "p50": round(float(p50), 6)}


def most_missed(rows: list[ModelFigures], count: int = 10) -> list[ModelFigures]:
    """The models that missed the most requests (the lower attainment first among equals):
    where a policy's losses are, rather than the rarest models' one cold start each."""
    worst = sorted((r for r in rows if r.missed), key=lambda r: (-r.missed, r.attainment,
                                                                 r.model))
    return worst[:count]
