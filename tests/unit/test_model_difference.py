"""When two workers' descriptions of one model id are two models (the controller refuses the
second worker), and when they are one model measured on two machines."""

import msgspec

from cw.serve.protocol import ModelInfo, TensorInfo, model_difference

BASE = ModelInfo("resnet50", "resnet50", 102_000_000, 7, [1, 2, 4, 8, 16],
                 [TensorInfo("input", "float32", [3, 224, 224], 602112)],
                 [TensorInfo("output", "float32", [1000], 4000)], 9_000_000,
                 {1: 2_000_000}, "profile")


def differs(**changes):
    return model_difference(msgspec.structs.replace(BASE, **changes), BASE)


def test_timings_are_each_workers_own():
    assert differs(load_ns=1, exec_ns={1: 5}, estimates_from="paper") is None


def test_what_a_request_sees_or_the_scheduler_counts():
    assert differs(batch_sizes=[1, 4]) == "batch sizes [1, 4] vs [1, 2, 4, 8, 16]"
    assert differs(weights_bytes=51_000_000) == \
        "weights of 51,000,000 vs 102,000,000 bytes"  # an fp16 bundle beside an fp32 one
    assert differs(pages=2) == "weights in 2 vs 7 pages"
    assert differs(inputs=[TensorInfo("input", "float16", [3, 224, 224], 301056)]) == \
        "inputs input float16[3, 224, 224] vs input float32[3, 224, 224]"
    assert differs(outputs=[]) == "outputs none vs output float32[1000]"
