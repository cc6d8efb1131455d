"""A policy and its settings in one string, so that variants of a policy can be served and
replayed side by side: `clockwork:ahead=2ms`, `batch-timeout:max-batch=8:delay=5ms`.

The grammar is `POLICY[:KEY=VALUE]...`; several specs are comma-separated. Each policy takes a
few named settings (`SETTINGS`), checked when the spec is read: a typo is an error, never a
silently ignored knob. A setting either replaces a `SchedulerConfig` field or is passed to the
policy's constructor. The spec's text, as given, names the policy in summaries and reports;
`label` is the same text made safe for a directory name.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

from cw.errors import UsageError
from cw.serve.scheduler.base import Scheduler, SchedulerConfig

SCHEDULERS = ("clockwork", "clipper", "batch-timeout", "fifo")


@dataclass(frozen=True)
class Setting:
    field: str           # the SchedulerConfig field or constructor keyword it sets
    kind: str            # duration | count | fraction
    on_config: bool      # True: a SchedulerConfig field; False: a constructor keyword
    default: str         # as a user would write it
    help: str
    low: float = 0       # the least value allowed (durations in ns: 1 means positive)
    high: float = math.inf


SETTINGS: dict[str, dict[str, Setting]] = {
    "clockwork": {
        "ahead": Setting("schedule_ahead_ns", "duration", True, "5ms",
                         "keep each GPU planned this far ahead"),
        "slack": Setting("infer_slack_ns", "duration", True, "3ms",
                         "an INFER's window from earliest to latest start", low=1),
        "loads": Setting("max_loads_in_flight", "count", True, "2",
                         "LOADs in flight per GPU at most", low=1),
        "margin": Setting("completion_margin_ns", "duration", True, "2ms",
                          "the least room left between an INFER's planned end and its "
                          "deadline (0: only the margin learned from answers)"),
        "guard": Setting("answer_guard_ns", "duration", True, "1ms",
                         "answer TIMED_OUT a request whose INFER result is still missing "
                         "this long before its deadline"),
        "window": Setting("estimate_window", "count", True, "10",
                          "estimates: the p99 of this many latest measurements", low=1,
                          high=10_000),
        "way-back": Setting("plan_way_back", "count", True, "0",
                            "1: plan each answer to reach its client by the deadline (the "
                            "way back the client reports comes off it, at most half the SLO); "
                            "2: so where that can be met, else by the deadline itself",
                            high=2),
        "adapt-slack": Setting("adapt_slack", "count", True, "1",
                               "1: widen a worker's INFER windows to twice the latest start it "
                               "lately needed (never below slack); 0: always slack", high=1),
    },
    "batch-timeout": {
        "max-batch": Setting("max_batch", "count", False, "16",
                             "send a batch once this many requests wait", low=1, high=16),
        "delay": Setting("max_queue_delay_ns", "duration", False, "2ms",
                         "... or once the oldest has waited this long"),
    },
    "clipper": {
        "step": Setting("aimd_step", "count", False, "1",
                        "AIMD: add this to the batch size after a batch within the SLO",
                        low=1, high=16),
        "backoff": Setting("backoff", "fraction", False, "0.9",
                           "AIMD: multiply the batch size by this after one beyond it"),
    },
    "fifo": {},
}


@dataclass(frozen=True)
class SchedulerSpec:
    text: str                                    # as given, e.g. "clockwork:ahead=2ms"
    policy: str                                  # one of SCHEDULERS
    settings: tuple[tuple[str, int | float], ...] = ()  # (key, value in ns, count or fraction)

    @property
    def label(self) -> str:
        return spec_label(self.text)

    def config(self, base: SchedulerConfig | None = None) -> SchedulerConfig:
        """`base` with this spec's SchedulerConfig settings applied."""
        table = SETTINGS[self.policy]
        fields = {table[k].field: v for k, v in self.settings if table[k].on_config}
        return replace(base or SchedulerConfig(), **fields)

    def keywords(self) -> dict[str, int | float]:
        """The settings the policy's constructor takes."""
        table = SETTINGS[self.policy]
        return {table[k].field: v for k, v in self.settings if not table[k].on_config}


def spec_label(text: str) -> str:
    """A spec as a directory name: `batch-timeout:delay=5ms` → `batch-timeout-delay-5ms`."""
    return re.sub(r"[^A-Za-z0-9._+-]", "-", text)


def parse_scheduler(text: str, flag: str = "--scheduler") -> SchedulerSpec:
    """`batch-timeout:delay=5ms` → its SchedulerSpec, every part checked."""
    # spaces around names and values are dropped: the text names runs and their directories
    policy, *parts = (_tidy(part) for part in text.split(":"))
    text = ":".join([policy, *parts])
    if policy not in SCHEDULERS:
        raise UsageError(f"unknown scheduler '{policy}' in {flag} {text}",
                         f"choose from {', '.join(SCHEDULERS)}")
    table, settings = SETTINGS[policy], {}
    for part in parts:
        key, eq, value = part.partition("=")
        if key not in table:
            offered = "; ".join(f"{k}={s.default} ({s.help})" for k, s in table.items())
            raise UsageError(f"{flag} {text}: '{policy}' has no setting '{key}'",
                             f"its settings: {offered}" if offered else f"'{policy}' takes none")
        if not eq or not value:
            raise UsageError(f"{flag} {text}: '{key}' has no value", f"write {key}=VALUE")
        if key in settings:
            raise UsageError(f"{flag} {text}: '{key}' is given twice", "give it once")
        settings[key] = _value(table[key], key, value, f"{flag} {text}")
    return SchedulerSpec(text, policy, tuple((k, settings[k]) for k in table if k in settings))


def parse_schedulers(text: str, flag: str = "--scheduler") -> list[SchedulerSpec]:
    """`clockwork,clockwork:ahead=2ms,clipper` → the specs, each a distinct policy or variant."""
    specs = [parse_scheduler(part, flag) for part in text.split(",") if part.strip()]
    if not specs:
        raise UsageError(f"{flag} is empty", f"give one or more of {', '.join(SCHEDULERS)}")
    for i, s in enumerate(specs):
        for t in specs[:i]:
            if (t.policy, t.settings) == (s.policy, s.settings):
                raise UsageError(f"{flag} {text} names one policy twice ({t.text}, {s.text})",
                                 "name each variant once")
    labels = [s.label for s in specs]
    if len(set(labels)) < len(labels):
        raise UsageError(f"{flag} {text}: two variants would share an output directory",
                         "write their settings differently")
    return specs


def make_scheduler(spec: str | SchedulerSpec, config: SchedulerConfig | None = None) -> Scheduler:
    """The policy `spec` names (a string like `clipper:step=2`, or a parsed spec), on `config`
    with the spec's settings applied."""
    from cw.serve.scheduler.baselines import (BatchTimeoutScheduler, ClipperScheduler,
                                              FifoScheduler)
    from cw.serve.scheduler.clockwork import ClockworkScheduler

    if isinstance(spec, str):
        spec = parse_scheduler(spec)
    table = {"clockwork": ClockworkScheduler, "clipper": ClipperScheduler,
             "batch-timeout": BatchTimeoutScheduler, "fifo": FifoScheduler}
    return table[spec.policy](spec.config(config), **spec.keywords())


def _tidy(part: str) -> str:
    key, eq, value = part.partition("=")
    return f"{key.strip()}{eq}{value.strip()}"


def _value(setting: Setting, key: str, text: str, where: str) -> int | float:
    if setting.kind == "duration":
        from cw.units import parse_duration_ns

        try:
            value = parse_duration_ns(text)
        except UsageError:
            raise UsageError(f"{where}: {key}={text} is not a duration",
                             f"write it like {key}={setting.default}") from None
        if value < setting.low:  # durations parse as ≥ 0; low=1 asks for a positive one
            raise UsageError(f"{where}: {key}={text} must be positive",
                             f"e.g. {key}={setting.default}")
        return value
    if setting.kind == "count":
        try:
            value = int(text)
        except ValueError:
            value = -1
        if not setting.low <= value <= setting.high:
            bound = (f"≥ {setting.low:g}" if setting.high == math.inf
                     else f"within {setting.low:g}..{setting.high:g}")
            raise UsageError(f"{where}: {key}={text} must be a whole number {bound}",
                             f"e.g. {key}={setting.default}")
        return value
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value < 1:
        raise UsageError(f"{where}: {key}={text} must be a fraction above 0 and below 1",
                         f"e.g. {key}={setting.default}")
    return value
