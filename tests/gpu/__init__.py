"""Tests on a real CUDA GPU (marked `gpu`, skipped without one)."""


def infer_once(rt, model, size, x):
    """One INFER through a TvmCudaRuntime's phases in a slot of `size` (x padded up to it)."""
    slot = rt.acquire_slot(model, size)
    rt.copy_input(model, slot, [x])
    rt.execute(model, slot)
    (y,), timing = rt.copy_output(model, slot)
    rt.release_slot(slot)
    assert timing.device_ns > 0
    return y
