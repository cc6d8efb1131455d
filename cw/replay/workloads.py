"""Synthetic workloads beside the traces: open-loop Poisson, closed-loop clients, and the
Clockwork paper's experiments as presets.

- `poisson`: one Poisson process at `rate` r/s, each request for a model drawn uniformly.
- `closed`: `concurrency` clients per model, each sending its next request as soon as the
  previous one is answered (plus a client↔controller round trip); the offered load follows
  the system's speed, as in the paper's Fig. 5.
- `fig6` (Clockwork §6.2): model 0 is the Minor workload, a steady 200 r/s; the others are the
  Major workload, 1,000 r/s spread evenly over the models active so far, one more model
  activated every second (3,600 of them after an hour).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cw.errors import UsageError
from cw.replay.arrivals import NS_PER_S, Arrivals, check_request_count

WORKLOADS = ("trace", "poisson", "closed", "fig6")


@dataclass(frozen=True)
class ClosedLoop:
    models: list[str]
    concurrency: int            # clients per model
    duration_ns: int
    think_ns: int = 0           # pause between an answer and the client's next request
    rate_scale: float = 1.0     # (for summaries: closed loops are not scaled)

    @property
    def count(self) -> int:
        return self.concurrency * len(self.models)  # requests in flight at any time

    def __post_init__(self):
        if self.concurrency < 1:
            raise UsageError(f"--concurrency {self.concurrency} must be ≥ 1")
        if self.think_ns < 0:
            raise UsageError("the think time must not be negative")


@dataclass(frozen=True)
class Preset:
    """Replay settings that reproduce one of the paper's experiments (ReplayConfig fields)."""
    description: str
    settings: dict


PRESETS = {
    "fig5": Preset("Clockwork Fig. 5: 15 copies of resnet50 on one GPU, 16 closed-loop clients "
                   "each", {"models": "resnet50", "copies": 15, "workload": "closed",
                            "concurrency": 16, "workers": 1, "gpus_per_worker": 1,
                            # A rejected client asks again a round trip later: at a 10 ms SLO
                            # that is over a million requests (and telemetry rows) a second.
                            "duration_s": 30.0}),
    "fig6": Preset("Clockwork Fig. 6: 3,601 copies of resnet50 on one GPU; one at 200 r/s, "
                   "1,000 r/s over the others, one more model activated per second",
                   {"models": "resnet50", "copies": 3601, "workload": "fig6", "workers": 1,
                    "gpus_per_worker": 1, "slo_ns": 100_000_000}),
}


def preset(name: str) -> Preset:
    try:
        return PRESETS[name]
    except KeyError:
        raise UsageError(f"unknown --preset '{name}'",
                         f"choose one of {', '.join(sorted(PRESETS))}") from None


def checked_duration_ns(duration_s: float) -> int:
    if duration_s <= 0:
        raise UsageError("--duration must be positive", "e.g. --duration 10m")
    return int(duration_s * NS_PER_S)


def poisson(models: list[str], rate_rps: float, duration_s: float, seed: int = 0,
            rate_named: str | None = None) -> Arrivals:
    if rate_rps <= 0:
        raise UsageError(f"--rate {rate_rps:g} must be positive", "e.g. --rate 1000")
    if not models:
        raise UsageError("no models to send requests to")
    duration_ns = checked_duration_ns(duration_s)
    check_request_count(rate_rps * duration_s,
                        f"{rate_named or f'--rate {rate_rps:g}'} for {duration_s:g}s",
                        "give a lower --rate or shorten --duration")
    rng = np.random.default_rng(seed)
    n = int(rng.poisson(rate_rps * duration_s))
    times = np.sort((rng.random(n) * duration_ns).astype(np.int64))
    return Arrivals(times, rng.integers(0, len(models), n), list(models), duration_ns, 1.0, {})


def fig6(models: list[str], duration_s: float, seed: int = 0, minor_rps: float = 200.0,
         major_rps: float = 1000.0, activate_every_s: float = 1.0) -> Arrivals:
    if len(models) < 2:
        raise UsageError("the fig6 workload needs at least 2 models (1 minor + major ones)",
                         "raise --copies")
    duration_ns = checked_duration_ns(duration_s)
    check_request_count((minor_rps + major_rps) * duration_s, f"--duration {duration_s:g}s",
                        "shorten --duration")
    rng = np.random.default_rng(seed)
    minor_n = int(rng.poisson(minor_rps * duration_s))
    minor_t = rng.random(minor_n) * duration_s
    seconds = int(np.ceil(duration_s / activate_every_s))
    per_slot = rng.poisson(major_rps * activate_every_s, seconds)
    slot = np.repeat(np.arange(seconds), per_slot)
    major_t = (slot + rng.random(slot.size)) * activate_every_s
    active = np.minimum(slot + 1, len(models) - 1)  # models 1..active are on in this slot
    major_m = 1 + (rng.random(slot.size) * active).astype(np.int64)
    t = np.concatenate([minor_t, major_t])
    m = np.concatenate([np.zeros(minor_n, dtype=np.int64), major_m])
    keep = t < duration_s
    order = np.argsort(t[keep], kind="stable")
    return Arrivals((t[keep][order] * NS_PER_S).astype(np.int64), m[keep][order], list(models),
                    duration_ns, 1.0, {})
