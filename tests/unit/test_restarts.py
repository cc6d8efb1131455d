"""When `cw serve` starts an ended worker again: the policy on a clock advanced by hand."""

import signal

import pytest

from cw.errors import BundleError, DeviceError, UsageError
from cw.serve.restarts import RestartConfig, RestartPlan

KILLED = -signal.SIGKILL


def test_a_worker_that_keeps_dying_waits_longer_each_time_and_a_steady_one_starts_over():
    plan = RestartPlan(RestartConfig(first_delay_s=1, max_delay_s=8, steady_s=60), 2, now_s=0)
    now, delays = 100.0, []
    for _ in range(6):
        assert plan.ended(0, now, KILLED).startswith("restarting it in")
        assert plan.due(now) == []
        restart_at = min(t for t in (now + d / 10 for d in range(1, 200)) if plan.due(t))
        delays.append(round(restart_at - now, 1))
        now = restart_at
        assert plan.due(now) == [0]
        plan.started(0, now)
        assert plan.waiting() == [0]
        assert plan.joined(0) and not plan.joined(0)  # the first time since it started only
        now += 5  # served a little, then died again
    assert delays == [1, 2, 4, 8, 8, 8]
    # after a minute or more of serving, a death is news again: the first delay
    now += 60
    assert plan.ended(0, now, KILLED) == "restarting it in 1 s"
    assert plan.given_up() == []


@pytest.mark.parametrize("error", [UsageError, BundleError])
def test_a_worker_that_refused_what_it_was_given_is_not_started_again(error):
    plan = RestartPlan(RestartConfig(), 1, now_s=0)
    assert plan.ended(0, 10, error.exit_code) == "not restarted: it would refuse the same again"
    assert plan.given_up() == [0] and plan.due(10**6) == []


def test_a_device_error_is_tried_again_and_three_failed_starts_in_a_row_are_the_end():
    """A fresh process clears a device fault; one that never joins again gives up."""
    plan = RestartPlan(RestartConfig(max_failed_starts=3), 1, now_s=0)
    now = 50.0
    for attempt in range(4):  # it had joined; then three starts that never join
        what = plan.ended(0, now, DeviceError.exit_code)
        if attempt < 3:
            assert what.startswith("restarting it in"), what
            now += 100
            assert plan.due(now) == [0]
            plan.started(0, now)  # ... and it dies again before joining
    assert what == "not restarted: it ended 3 times in a row without joining the controller"
    assert plan.given_up() == [0]


def test_restarts_off():
    plan = RestartPlan(RestartConfig(enabled=False), 2, now_s=0)
    assert plan.ended(1, 5, KILLED) == "not restarted (--no-restart)"
    assert plan.given_up() == [1] and plan.due(10**6) == []


def test_config_is_checked():
    with pytest.raises(UsageError):
        RestartConfig(first_delay_s=10, max_delay_s=1)
    with pytest.raises(UsageError):
        RestartConfig(max_failed_starts=0)
