"""Controller↔worker clock translation from ping/pong round trips (cw/serve/clock.py)."""

import subprocess
import sys

from cw.serve.clock import ClockSync, clock_domain

S = 1_000_000_000


def test_offset_from_the_tightest_round_trip_and_translation_both_ways():
    sync = ClockSync(window=4)
    assert not sync.synced
    true_offset = 7 * S + 123_456  # controller clock = worker clock + this
    # (worker sent, one-way delay there, one-way delay back): asymmetric delays bias a sample
    # by half their difference, at most half its round trip
    samples = [(1_000 * S, 900_000, 100_000), (1_001 * S, 50_000, 70_000),
               (1_002 * S, 3_000_000, 200_000)]
    for sent, there, back in samples:
        controller_ns = sent + there + true_offset
        sync.observe(sent, controller_ns, sent + there + back)
        assert abs(sync.offset_ns - true_offset) <= sync.rtt_ns // 2
    assert sync.synced and sync.rtt_ns == 120_000  # the tightest sample won
    assert abs(sync.offset_ns - true_offset) <= 10_000
    local = 1_005 * S
    assert sync.to_local(sync.to_controller(local)) == local
    assert sync.to_controller(local) == local + sync.offset_ns


def test_old_samples_leave_the_window_and_bad_ones_are_ignored():
    sync = ClockSync(window=2)
    sync.observe(0, 5 * S + 10, 20)           # rtt 20 ns, offset 5 s
    sync.observe(100, 6 * S + 200, 300)       # rtt 200: looser, not chosen
    assert sync.offset_ns == 5 * S and sync.rtt_ns == 20
    sync.observe(400, 6 * S + 500, 600)       # the 20 ns sample leaves the window of 2
    assert sync.rtt_ns == 200 and sync.offset_ns == 6 * S
    sync.observe(1_000, 9 * S, 900)           # received before sent: not a round trip
    assert sync.rtt_ns == 200 and sync.offset_ns == 6 * S


def test_same_clock_pins_the_offset_to_zero_and_keeps_the_estimate_for_reporting():
    sync = ClockSync()
    sync.observe(1_000, 1_000 + 40_000 + 300, 1_000 + 100_000)  # biased by the asymmetry
    assert sync.offset_ns == sync.estimate_ns == -9_700 and sync.rtt_ns == 100_000
    sync.set_same_clock(True)
    assert sync.offset_ns == 0 and sync.synced
    sync.observe(2_000, 2_000 + 10_000, 2_000 + 30_000)
    assert sync.offset_ns == 0 and sync.estimate_ns == -5_000 and sync.to_local(123) == 123
    sync.set_same_clock(False)  # registered with a controller elsewhere
    assert sync.offset_ns == -5_000


def test_clock_domain_is_one_for_the_processes_of_one_host():
    here = clock_domain()
    assert here  # Linux: boot id and time-namespace offsets are readable
    there = subprocess.run([sys.executable, "-c",
                            "from cw.serve.clock import clock_domain; print(clock_domain())"],
                           capture_output=True, text=True, check=True).stdout.strip()
    assert there == here
