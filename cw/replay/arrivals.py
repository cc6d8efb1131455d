"""From a trace to request arrivals: window, rate scaling, function→model mapping, and the
arrival process inside each minute. Everything is seeded and reproducible.

- Functions are sorted by total volume (descending) and mapped to model instances in contiguous
  blocks (function i → model M·i/F, as Clockwork's replay does) or striped (i mod M).
- Inside each minute with c invocations (after scaling by s): `poisson` draws a Poisson number of
  arrivals with mean s·c at uniform times (a Poisson process at that minute's rate, Clockwork);
  `exact` makes exactly round(s·c) arrivals at uniform times (InVitro; fractional parts rounded
  stochastically); `gamma:CV` makes gamma-distributed gaps with mean 60/(s·c) and the given
  coefficient of variation (CV = 1 is Poisson, larger is burstier).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cw.errors import UsageError
from cw.memory import check_memory
from cw.replay.traces import Trace, TraceError

NS_PER_S = 1_000_000_000
# Memory a run needs per request: the arrival arrays while they are drawn and sorted (~60 B)
# plus the telemetry columns kept for the report (78 B, cw/replay/columns.py), rounded up.
BYTES_PER_REQUEST = 160


@dataclass(frozen=True)
class Arrivals:
    times_ns: np.ndarray   # sorted, from 0
    model_index: np.ndarray  # into `models`
    models: list[str]
    duration_ns: int
    rate_scale: float
    function_of_model: dict[str, list[str]]

    @property
    def count(self) -> int:
        return int(self.times_ns.size)

    @property
    def offered_rps(self) -> float:
        return self.count / (self.duration_ns / NS_PER_S) if self.duration_ns else 0.0


def parse_arrivals(spec: str) -> tuple[str, float]:
    if spec in ("poisson", "exact"):
        return spec, 1.0
    if spec.startswith("gamma:"):
        try:
            cv = float(spec.split(":", 1)[1])
            if cv <= 0:
                raise ValueError
        except ValueError:
            raise UsageError(f"invalid --arrivals '{spec}'", "write gamma:CV with CV > 0, "
                             "e.g. gamma:2") from None
        return "gamma", cv
    raise UsageError(f"unknown --arrivals '{spec}'", "use poisson, exact or gamma:CV")


def check_request_count(expected: float, asked: str, hint: str) -> None:
    check_memory(expected, BYTES_PER_REQUEST, asked, "requests", hint)


def map_functions(order: list[int], models: list[str], how: str,
                  fewer_models: str | None = None) -> list[int]:
    """For each function (in volume order) the index of its model. `fewer_models`: how to use
    fewer models, where the default hint (--models, --copies) does not apply."""
    f, m = len(order), len(models)
    if m > f:
        raise UsageError(f"{m:,} models but only {f:,} function{'s' * (f != 1)} in the trace",
                         f"{fewer_models or 'use fewer models (or --copies)'}, or a trace with "
                         "more functions")
    if how == "contiguous":
        return [m * i // f for i in range(f)]
    if how == "stripe":
        return [i % m for i in range(f)]
    raise UsageError(f"unknown --map '{how}'", "use contiguous or stripe")


def generate(trace: Trace, models: list[str], *, duration_s: float, start_minute: int = 0,
             rate_scale: float | None = None, target_rate: float | None = None,
             arrivals: str = "poisson", mapping: str = "contiguous", seed: int = 0,
             rate_named: str | None = None, fewer_models: str | None = None) -> Arrivals:
    """`rate_named` says where the rate came from, for errors (default: the flag's value);
    `fewer_models` how to use fewer models (map_functions)."""
    counts = trace.per_minute()
    minutes = int(np.ceil(duration_s / 60))
    if duration_s <= 0:
        raise UsageError("--duration must be positive", "e.g. --duration 10m")
    if start_minute < 0 or start_minute + minutes > counts.shape[1]:
        raise TraceError(f"--start-minute {start_minute} with --duration {duration_s:g}s needs "
                         f"minutes {start_minute}..{start_minute + minutes - 1}; the trace "
                         f"{trace.name} has {counts.shape[1]}",
                         "shorten --duration or move --start-minute")
    window = counts[:, start_minute:start_minute + minutes].astype(np.float64)
    total = window.sum()
    if total == 0:
        raise TraceError(f"the trace {trace.name} has no invocations in the chosen window",
                         "choose another --start-minute")
    if rate_scale is not None and target_rate is not None:
        raise UsageError("give --rate-scale or --target-rate, not both")
    if target_rate is not None:
        scale = target_rate / (total / (minutes * 60))
    else:
        scale = 1.0 if rate_scale is None else rate_scale
    if not scale > 0:
        raise UsageError("the rate scale must be positive")
    asked = rate_named or (f"--target-rate {target_rate:g}" if target_rate is not None
                           else f"--rate-scale {scale:g}")
    check_request_count(total * scale, f"{asked} over {minutes} trace minute(s)",
                        "give a lower --target-rate or --rate-scale, or shorten --duration")
    order = list(np.argsort(-counts.sum(axis=1), kind="stable"))
    model_of = map_functions(order, models, mapping, fewer_models)
    rng = np.random.default_rng(seed)
    process, cv = parse_arrivals(arrivals)
    lam = window * scale
    f_idx, m_idx = np.nonzero(lam)
    rates = lam[f_idx, m_idx]
    if process == "poisson":
        n = rng.poisson(rates)
    elif process == "exact":
        n = np.floor(rates).astype(np.int64) + (rng.random(rates.size) < rates % 1)
    if process in ("poisson", "exact"):
        fn = np.repeat(f_idx, n)
        t = (np.repeat(m_idx, n) + rng.random(int(n.sum()))) * 60.0
    else:
        fn, t = _gamma(rng, f_idx, m_idx, rates, cv)
    # function -> model (functions are ranked by volume)
    rank = np.empty(len(order), dtype=np.int64)
    rank[np.array(order)] = np.arange(len(order))
    model_index = np.array(model_of, dtype=np.int64)[rank[fn]]
    times_ns = (t * NS_PER_S).astype(np.int64)
    keep = times_ns < int(duration_s * NS_PER_S)
    sort = np.argsort(times_ns[keep], kind="stable")
    fmap: dict[str, list[str]] = {}
    for i, f in enumerate(order):
        fmap.setdefault(models[model_of[i]], []).append(trace.functions[f])
    return Arrivals(times_ns[keep][sort], model_index[keep][sort], list(models),
                    int(duration_s * NS_PER_S), scale, fmap)


def _gamma(rng, f_idx, m_idx, rates, cv):
    """Gamma renewal process inside each minute: shape 1/CV², mean gap 60/rate seconds."""
    shape = 1.0 / cv**2
    fns, times = [], []
    for f, m, r in zip(f_idx, m_idx, rates):
        mean_gap = 60.0 / r
        t = rng.gamma(shape, mean_gap / shape)  # (not stationary at the start; documented)
        while t < 60.0:
            fns.append(f)
            times.append(m * 60.0 + t)
            t += rng.gamma(shape, mean_gap / shape)
    return np.array(fns, dtype=np.int64), np.array(times, dtype=np.float64)
