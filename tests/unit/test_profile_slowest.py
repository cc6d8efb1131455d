"""The slowest EXECs a profile keeps: which runs, in what order, and when they began."""

import msgspec

from cw.profile.profiler import slowest_runs
from cw.profile.schema import SLOWEST_KEPT, BatchProfile


def test_the_slowest_runs_in_run_order_with_when_they_began():
    exec_ns = [100] * 50
    for run, ns in ((3, 140), (17, 190), (18, 150), (44, 120)):
        exec_ns[run] = ns
    exec_ns[30:34] = [130, 131, 132, 133]  # a burst
    began_ns = [1_000 + 10 * i for i in range(50)]
    got = slowest_runs(exec_ns, began_ns)
    assert len(got) == SLOWEST_KEPT == 8
    assert [(r.run, r.exec_ns, r.at_ns) for r in got] == [
        (3, 140, 30), (17, 190, 170), (18, 150, 180), (30, 130, 300), (31, 131, 310),
        (32, 132, 320), (33, 133, 330), (44, 120, 440)]
    assert [r.run for r in slowest_runs([5, 7], [0, 9])] == [0, 1]
    assert slowest_runs([], []) == []


def test_a_profile_from_before_the_slowest_were_kept_still_reads():
    stats = dict(n=1, mean_ns=1, std_ns=0, p50_ns=1, p99_ns=1, p999_ns=1, p9999_ns=1, max_ns=1)
    old = {"batch_size": 1, **{phase: stats for phase in ("input", "exec", "exec_host",
                                                          "output")}}
    assert msgspec.json.decode(msgspec.json.encode(old), type=BatchProfile).exec_slowest == []
