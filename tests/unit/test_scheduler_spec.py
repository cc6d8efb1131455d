"""Scheduler specs (`batch-timeout:delay=5ms`): parsing, checks, and settings that take effect."""

import pytest

from cw.errors import UsageError
from cw.serve.scheduler import SchedulerConfig, make_scheduler, parse_scheduler, parse_schedulers
from cw.serve.scheduler.base import SendInfer
from tests.unit.test_scheduler_baselines import warm_with_requests
from tests.unit.test_scheduler_clockwork import MS, of


def test_settings_are_parsed_into_the_config_and_the_policy():
    spec = parse_scheduler("batch-timeout:delay=5ms:max-batch=8")
    assert spec.policy == "batch-timeout" and spec.text == "batch-timeout:delay=5ms:max-batch=8"
    # settings come out in the policy's own order, whatever order they were written in
    assert spec.settings == (("max-batch", 8), ("delay", 5 * MS))
    assert spec.label == "batch-timeout-delay-5ms-max-batch-8"
    s = make_scheduler(spec)
    assert (s.max_batch, s.max_queue_delay_ns) == (8, 5 * MS)

    s = make_scheduler("clockwork:ahead=2ms:slack=500us:loads=3",
                       SchedulerConfig(completion_margin_ns=7))
    assert (s.config.schedule_ahead_ns, s.config.infer_slack_ns,
            s.config.max_loads_in_flight) == (2 * MS, 500_000, 3)
    assert s.config.completion_margin_ns == 7  # the base config's other fields are kept
    s = make_scheduler("clockwork:margin=0ms:guard=500us:window=20")
    assert (s.config.completion_margin_ns, s.config.answer_guard_ns,
            s.config.estimate_window) == (0, 500_000, 20)
    assert s.estimates.window == 20  # what the estimates are built with, not just the config

    s = make_scheduler("clipper:step=3:backoff=0.5")
    assert (s.aimd_step, s.backoff) == (3, 0.5)
    assert make_scheduler("clockwork").config == SchedulerConfig()


def test_spaces_around_names_and_values_are_dropped():
    spec = parse_scheduler(" batch-timeout : delay = 5ms ")
    assert spec.text == "batch-timeout:delay=5ms" and spec.label == "batch-timeout-delay-5ms"
    assert spec.settings == (("delay", 5 * MS),)


def test_variants_of_one_policy_side_by_side():
    specs = parse_schedulers("clockwork, clockwork:ahead=2ms,clipper")
    assert [s.text for s in specs] == ["clockwork", "clockwork:ahead=2ms", "clipper"]
    assert [s.label for s in specs] == ["clockwork", "clockwork-ahead-2ms", "clipper"]


@pytest.mark.parametrize("text, message", [
    ("bogus", "unknown scheduler 'bogus'"),
    ("clockwork:ahed=2ms", "'clockwork' has no setting 'ahed'"),
    ("fifo:delay=1ms", "'fifo' has no setting 'delay'"),
    ("batch-timeout:delay", "'delay' has no value"),
    ("batch-timeout:delay=", "'delay' has no value"),
    ("batch-timeout:delay=soon", "delay=soon is not a duration"),
    ("batch-timeout:max-batch=0", "max-batch=0 must be a whole number within 1..16"),
    ("batch-timeout:max-batch=17", "max-batch=17 must be a whole number within 1..16"),
    ("batch-timeout:max-batch=2.5", "max-batch=2.5 must be a whole number"),
    ("clipper:backoff=1", "backoff=1 must be a fraction above 0 and below 1"),
    ("clipper:backoff=nan", "backoff=nan must be a fraction"),
    ("clockwork:slack=0ms", "slack=0ms must be positive"),
    ("clipper:step=2:step=3", "'step' is given twice"),
    ("clockwork,clockwork", "names one policy twice"),
    # the same settings written in another order are the same variant
    ("clipper:step=2:backoff=0.5,clipper:backoff=0.5:step=2", "names one policy twice"),
    (" , ", "--scheduler is empty"),
])
def test_bad_specs_are_refused_with_what_to_write(text, message):
    with pytest.raises(UsageError) as e:
        parse_schedulers(text)
    assert message in e.value.message
    assert "--scheduler" in e.value.message
    assert e.value.hint  # every refusal says what to write instead


def test_a_setting_changes_the_decisions_on_the_fake_clock():
    """batch-timeout's delay: a batch of 3 leaves after 2 ms by default, after 5 ms with
    delay=5ms, and at once with max-batch=3."""
    def first_send_after(spec):
        h, clock, t0 = warm_with_requests(spec, 3)
        for waited_ms in range(10):
            clock.now = t0 + waited_ms * MS
            h.apply(h.s.tick(clock.now))
            if of(h.sent, SendInfer):
                return waited_ms
        return None

    assert first_send_after("batch-timeout") == 2
    assert first_send_after("batch-timeout:delay=5ms") == 5
    assert first_send_after("batch-timeout:max-batch=3") == 0


def test_the_defaults_listed_are_the_policies_own():
    """`cw schedulers` and the refusals' hints show each setting's default: it must be the
    value a policy has when the setting is left out."""
    from cw.serve.scheduler.spec import SETTINGS

    for policy, settings in SETTINGS.items():
        plain = make_scheduler(policy)
        for key, setting in settings.items():
            (_, value), = parse_scheduler(f"{policy}:{key}={setting.default}").settings
            holder = plain.config if setting.on_config else plain
            assert getattr(holder, setting.field) == value, (policy, key)


def test_cw_schedulers_lists_every_policy_and_setting(cli):
    import json

    from cw.serve.scheduler.spec import SCHEDULERS, SETTINGS

    r = cli("schedulers", "--json")
    assert r.code == 0, r.err
    listed = json.loads(r.out)
    assert list(listed) == list(SCHEDULERS)
    assert {p: set(s) for p, s in listed.items()} == {p: set(s) for p, s in SETTINGS.items()}
    r = cli("schedulers")
    assert r.code == 0 and "max-batch" in r.out and "no settings" in r.out
