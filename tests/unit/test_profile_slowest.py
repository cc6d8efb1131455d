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


class _RuntimeThatFails:
    """Records the order of what `_back_to_back` asks of a runtime; its `fail_at`-th finish
    raises, as a GPU fault would."""

    def __init__(self, fail_at: int):
        self.calls, self.finished, self.fail_at = [], 0, fail_at
        self.launched = 0

    def acquire_slot(self, model, batch):
        self.calls.append(("acquire", batch))
        return f"slot{sum(c[0] == 'acquire' for c in self.calls)}"

    def copy_input(self, model, slot, inputs):
        pass

    def copy_output(self, model, slot):
        pass

    def launch(self, model, slot):
        self.launched += 1
        self.calls.append(("launch", self.launched))
        return self.launched

    def finish(self, handle):
        from cw.serve.runtime.base import PhaseTiming

        self.finished += 1
        self.calls.append(("finish", handle))
        if self.finished == self.fail_at:
            raise RuntimeError("the GPU faulted")
        return PhaseTiming(handle * 10, handle * 10 + 5, 5)

    def release_slot(self, slot):
        self.calls.append(("release", slot))


def test_back_to_back_finishes_what_it_queued_before_handing_its_slots_back_after_an_error():
    import pytest

    from cw.profile.profiler import _back_to_back

    runtime = _RuntimeThatFails(fail_at=5)  # 2 warm-up finishes, then the 3rd measured one
    with pytest.raises(RuntimeError, match="faulted"):
        _back_to_back(runtime, None, 1, [], 10, lambda *a: None)
    launched = {c[1] for c in runtime.calls if c[0] == "launch"}
    finished = {c[1] for c in runtime.calls if c[0] == "finish"}
    first_release = next(i for i, c in enumerate(runtime.calls) if c[0] == "release")
    assert launched == finished == set(range(1, 7))  # every EXEC launched was waited for ...
    assert all(c[0] != "finish" for c in runtime.calls[first_release:])  # ... before release
    assert [c for c in runtime.calls if c[0] == "release"] == [("release", "slot1"),
                                                               ("release", "slot2")]
