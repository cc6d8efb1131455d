"""Pure checks behind the GPU runtime that run anywhere: which GPU can run a bundle's cubins, and
TVM tensors built over memory cw owns (the page cache's weights)."""

import numpy as np
import pytest

from cw.compile.targets import check_gpu_runs
from cw.errors import DeviceError
from cw.serve.runtime.dlpack import KDL_CPU, tensor_at


@pytest.mark.parametrize("bundle, device", [("sm_90", "sm_90"), ("sm_80", "sm_86"),
                                            ("sm_90a", "sm_90")])
def test_same_major_architecture_at_equal_or_newer_minor_runs(bundle, device):
    check_gpu_runs(bundle, device, "b")


@pytest.mark.parametrize("bundle, device", [("sm_90", "sm_80"), ("sm_70", "sm_90"),
                                            ("sm_86", "sm_80")])
def test_other_gpu_architectures_are_refused_with_the_fix(bundle, device):
    with pytest.raises(DeviceError) as e:
        check_gpu_runs(bundle, device, "b")
    assert f"compiled for {bundle}; this GPU is {device}" in e.value.message
    assert f"--arch {device}" in e.value.hint


def test_tensor_at_aliases_memory_at_an_offset():
    buf = np.zeros(4096, dtype=np.uint8)
    offset = (-buf.ctypes.data) % 256 + 512  # a weight in the middle of a page
    values = np.arange(12, dtype=np.float32).reshape(3, 4)
    buf[offset:offset + values.nbytes] = values.view(np.uint8).ravel()
    holder = tensor_at(buf.ctypes.data + offset, (3, 4), "float32", KDL_CPU)
    assert holder.tensor.data_ptr() == buf.ctypes.data + offset
    np.testing.assert_array_equal(holder.tensor.numpy(), values)
    buf[offset:offset + 4] = np.array([7], dtype=np.float32).view(np.uint8)  # no copy was made
    assert holder.tensor.numpy()[0, 0] == 7
    assert tensor_at(buf.ctypes.data + offset, (), "float32", KDL_CPU).tensor.shape == ()


def test_tensor_at_refuses_unaligned_addresses():
    buf = np.zeros(256, dtype=np.uint8)
    with pytest.raises(ValueError, match="aligned"):
        tensor_at(buf.ctypes.data + (-buf.ctypes.data) % 64 + 4, (2,), "float32", KDL_CPU)


def test_local_cuda_workers_get_a_gpu_each_and_the_gpus_are_checked(monkeypatch):
    """`cw serve --runtime cuda --workers N` put all N on cuda:0 (a live replay did not)."""
    from cw.serve import launch
    from cw.serve.runtime import cuda_api

    assert launch.local_devices("simulated", 3) == ["cpu"] * 3
    assert launch.local_devices("cpu", 2) == ["cpu"] * 2
    checked = []
    monkeypatch.setattr(cuda_api, "require_gpu", checked.append)
    assert launch.local_devices("cuda", 3) == ["cuda:0", "cuda:1", "cuda:2"]
    assert checked == [0, 1, 2]

    def only_one(index):
        if index > 0:
            raise DeviceError(f"no CUDA GPU {index}", "check nvidia-smi")

    monkeypatch.setattr(cuda_api, "require_gpu", only_one)
    with pytest.raises(DeviceError, match="no CUDA GPU 1"):
        launch.local_devices("cuda", 2)
