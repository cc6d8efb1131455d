"""Shared-memory input slots (cw/serve/shm.py)."""

import os
import subprocess
import sys

import numpy as np
import pytest

from cw.serve import protocol as p
from cw.serve.shm import SHM_DIR, ShmArena, ShmError, ShmReader, ShmRef, remove_stale, shm_domain

pytestmark = pytest.mark.skipif(not shm_domain(), reason="no /dev/shm here")


@pytest.fixture
def arena():
    a = ShmArena(segment_bytes=64 * 1024)
    yield a
    a.close()


def test_a_reader_sees_what_the_arena_wrote(arena):
    x = np.random.default_rng(0).standard_normal((3, 5, 7)).astype(np.float32)
    y = np.arange(10, dtype=np.int64)
    refs = arena.put([x, y])
    reader = ShmReader()
    assert np.array_equal(np.frombuffer(reader.view(refs[0]), np.float32).reshape(x.shape), x)
    assert np.array_equal(np.frombuffer(reader.view(refs[1]), np.int64), y)
    assert [r.nbytes for r in refs] == [x.nbytes, y.nbytes]


def test_slots_are_reused_once_freed_and_never_shared_while_held(arena):
    x = np.ones(1000, np.float32)
    held = [arena.put([x])[0] for _ in range(40)]  # more than one 64 KiB segment holds
    places = {(r.segment, r.offset) for r in held}
    assert len(places) == 40
    assert len({r.segment for r in held}) > 1  # the arena grew
    arena.free(held[:5])
    again = [arena.put([x])[0] for _ in range(5)]
    assert {(r.segment, r.offset) for r in again} == {(r.segment, r.offset) for r in held[:5]}


def test_close_removes_the_segments(arena):
    ref = arena.put([np.zeros(10, np.float32)])[0]
    assert os.path.exists(os.path.join(SHM_DIR, ref.segment))
    arena.close()
    assert not os.path.exists(os.path.join(SHM_DIR, ref.segment))
    with pytest.raises(ShmError, match="cannot open"):
        ShmReader().view(ref)


def test_a_sweep_lets_go_of_segments_that_are_gone_and_keeps_views_readable():
    a, b = ShmArena(), ShmArena()
    try:
        x = np.arange(100, dtype=np.float32)
        ra, rb = a.put([x])[0], b.put([x * 2])[0]
        reader = ShmReader()
        held = reader.view(ra)
        reader.view(rb)
        assert reader.sweep() == 0 and len(reader) == 2
        a.close()
        assert reader.sweep() == 1 and len(reader) == 1
        assert np.array_equal(np.frombuffer(held, np.float32), x)  # a view from before
        with pytest.raises(ShmError, match="cannot open"):
            reader.view(ra)
        assert np.array_equal(np.frombuffer(reader.view(rb), np.float32), x * 2)
    finally:
        a.close()
        b.close()


def test_segments_start_small_and_grow_geometrically():
    a = ShmArena(segment_bytes=8 << 20, first_segment_bytes=1 << 20)
    try:
        image = np.zeros((3, 224, 224), np.float32)  # 602 KB: four slots in the first segment
        held = [a.put([image])[0] for _ in range(40)]
        sizes = [os.path.getsize(os.path.join(SHM_DIR, s))
                 for s in sorted({r.segment for r in held}, key=lambda n: int(n.rsplit("-", 1)[1]))]
        slot = sizes[0] // 4
        assert slot >= image.nbytes and sizes[0] == 4 * slot  # 2.4 MB, not a whole segment
        assert sizes[1:4] == [4 * slot, 8 * slot, 13 * slot]  # doubling, up to 8 MiB
        small = a.put([np.zeros(10, np.float32)])[0]  # tiny slots: the first 1 MiB of them
        assert os.path.getsize(os.path.join(SHM_DIR, small.segment)) == 1 << 20
    finally:
        a.close()


def test_bad_references_raise_instead_of_reading_elsewhere(arena):
    ref = arena.put([np.zeros(10, np.float32)])[0]
    reader = ShmReader()
    size = os.path.getsize(os.path.join(SHM_DIR, ref.segment))
    with pytest.raises(ShmError, match="outside"):
        reader.view(ShmRef(ref.segment, size - 8, 16))
    with pytest.raises(ShmError, match="outside"):
        reader.view(ShmRef(ref.segment, -4, 8))
    for name in ("../etc/passwd", "not-cw", "cw-1-2-zz-0"):
        with pytest.raises(ShmError, match="not a cw shared-memory segment"):
            reader.view(ShmRef(name, 0, 1))


def test_segments_of_a_dead_process_are_removed_and_live_ones_kept(arena):
    mine = arena.put([np.zeros(10, np.float32)])[0].segment
    code = ("import numpy as np, os; from cw.serve.shm import ShmArena; a = ShmArena(); "
            "print(a.put([np.zeros(4, np.float32)])[0].segment); os._exit(0)")
    dead = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip()
    assert os.path.exists(os.path.join(SHM_DIR, dead))  # left behind by os._exit
    assert remove_stale() >= 1
    assert not os.path.exists(os.path.join(SHM_DIR, dead))
    assert os.path.exists(os.path.join(SHM_DIR, mine))


def test_references_travel_in_requests_next_to_plain_bytes():
    codec = p.Codec(p.ToWorker)
    msg = p.Infer(id=1, model="m", gpu=0, earliest_ns=0, latest_ns=1, expected_ns=1,
                  batch_size=2, n=2, inputs=[[memoryview(b"abcd"), ShmRef("cw-1-2-ab-0", 8, 4)]])
    back = codec.decoder.decode(codec.encode(msg))
    assert bytes(back.inputs[0][0]) == b"abcd"
    assert back.inputs[0][1] == ShmRef("cw-1-2-ab-0", 8, 4)


def test_the_controller_removes_dead_clients_segments_and_lets_go_of_closed_ones(arena):
    from cw.serve.controller import Controller, ControllerConfig
    from cw.serve.scheduler import make_scheduler
    from cw.serve.inproc import InprocHub, InprocRouter

    ms = 1_000_000
    hub = InprocHub()
    ctl = Controller(ControllerConfig(),
                     InprocRouter(hub, "w", p.Codec(p.FromWorker), p.Codec(p.ToWorker)),
                     InprocRouter(hub, "c", p.Codec(p.FromClient), p.Codec(p.ToClient)),
                     make_scheduler("clockwork"))
    live = arena.put([np.zeros(10, np.float32)])[0]
    code = ("import numpy as np, os; from cw.serve.shm import ShmArena; a = ShmArena(); "
            "print(a.put([np.zeros(4, np.float32)])[0].segment); os._exit(0)")
    dead = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip()
    ctl.shm.view(live)
    ctl.shm.view(ShmRef(dead, 0, 16))  # a request of the client before it died
    ctl.housekeeping(0)
    assert not os.path.exists(os.path.join(SHM_DIR, dead))
    assert os.path.exists(os.path.join(SHM_DIR, live.segment)) and len(ctl.shm) == 1
    arena.close()
    ctl.housekeeping(1_000 * ms)  # sooner than shm_sweep_ns: still mapped
    assert len(ctl.shm) == 1
    ctl.housekeeping(2_000 * ms)
    assert len(ctl.shm) == 0
