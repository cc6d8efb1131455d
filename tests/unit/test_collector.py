"""When the cycle collector may run in a serving process (cw/serve/collector.py)."""

import gc
import threading

from cw.serve import collector
from cw.serve import protocol as p


def test_paused_nests_and_restores_the_previous_state():
    assert gc.isenabled()
    with collector.paused():
        assert not gc.isenabled()
        with collector.paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer pause still holds
    assert gc.isenabled()
    gc.disable()  # a process that turned it off keeps it off
    try:
        with collector.paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_paused_across_threads_until_the_last_leaves():
    inside, leave = threading.Event(), threading.Event()

    def other():
        with collector.paused():
            inside.set()
            leave.wait(10)

    t = threading.Thread(target=other)
    t.start()
    try:
        assert inside.wait(10)
        with collector.paused():
            pass
        assert not gc.isenabled()  # the other thread is still inside
    finally:
        leave.set()
        t.join()
    assert gc.isenabled()


def test_kept_state_is_frozen_out_of_later_collections():
    before = gc.get_freeze_count()
    with collector.kept():
        state = [[i] for i in range(5000)]
    assert gc.get_freeze_count() - before >= 5000 and len(state) == 5000


def test_a_large_message_is_decoded_with_no_collection():
    tensor = p.TensorInfo("input", "float32", [64], 256)
    models = [p.ModelInfo(f"mlp#{i}", "mlp", 1000, 1, [1, 2, 4], [tensor], [tensor], 1000,
                          {1: 10, 2: 20, 4: 40}, "profile") for i in range(8000)]
    codec = p.Codec(p.FromWorker)
    data = codec.encode(p.Register(p.PROTOCOL_VERSION, "w", "simulated", True, [], models, 0))
    assert len(data) > collector.LARGE_MESSAGE_BYTES
    collections = []

    def count(phase, info):
        if phase == "start":
            collections.append(info["generation"])

    gc.collect()  # counts at zero: no collection due before the pause begins
    gc.callbacks.append(count)
    try:
        msg = codec.decode(data)
        # (the one that falls due meanwhile runs once the pause ends)
        assert len(collections) <= 1 and len(msg.models) == 8000
        collections.clear()
        codec.decoder.decode(data)  # the same bytes decoded without the pause
        assert len(collections) > 20, collections
    finally:
        gc.callbacks.remove(count)
