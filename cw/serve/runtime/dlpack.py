"""TVM tensors over memory that cw owns (the page cache, IO buffers), built from a raw pointer.

TVM's generated kernels require `byte_offset == 0`, so a weight inside a page cannot be a view of
one big TVM tensor: each weight needs its own DLPack tensor whose data pointer is the weight's
address. No installed library makes such a tensor from a bare device pointer without owning or
copying it, so this builds the DLPack structs with ctypes. The structs are kept alive by the
returned holder; their deleter is NULL because the memory belongs to the runtime, not to TVM.
"""

from __future__ import annotations

import ctypes

import numpy as np

KDL_CPU = 1
KDL_CUDA = 2
KDL_CUDA_HOST = 3

_DTYPE_CODES = {"i": 0, "u": 1, "f": 2, "b": 1}


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class _Producer:
    """The minimal DLPack producer protocol that `tvm.runtime.from_dlpack` consumes."""

    def __init__(self, managed: _DLManagedTensor, device: tuple[int, int]):
        self._managed = managed
        self._device = device

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        return _capsule_new(ctypes.addressof(self._managed), b"dltensor", None)

    def __dlpack_device__(self):
        return self._device


class RawTensor:
    """A TVM tensor aliasing `ptr`; holds the DLPack structs for as long as it lives."""

    __slots__ = ("tensor", "_managed", "_shape")

    def __init__(self, tensor, managed, shape):
        self.tensor = tensor
        self._managed = managed
        self._shape = shape


def tensor_at(ptr: int, shape: tuple[int, ...] | list[int], dtype: str, device_type: int,
              device_id: int = 0) -> RawTensor:
    """A TVM tensor of `shape`/`dtype` whose data starts at address `ptr` (not copied, not
    owned: the caller keeps the memory alive and must keep the returned holder alive too)."""
    from cw.tvm_env import load_tvm

    if ptr % 64:
        raise ValueError(f"address {ptr:#x} is not 64-byte aligned (TVM requires it)")
    dt = np.dtype(dtype)
    code = 6 if dt.kind == "b" else _DTYPE_CODES[dt.kind]  # 6 = kDLBool
    shape_arr = (ctypes.c_int64 * max(len(shape), 1))(*shape)
    managed = _DLManagedTensor()
    t = managed.dl_tensor
    t.data = ptr
    t.device = _DLDevice(device_type, device_id)
    t.ndim = len(shape)
    t.dtype = _DLDataType(code, dt.itemsize * 8, 1)
    t.shape = ctypes.cast(shape_arr, ctypes.POINTER(ctypes.c_int64))
    t.strides = None
    t.byte_offset = 0
    tensor = load_tvm().runtime.from_dlpack(_Producer(managed, (device_type, device_id)))
    return RawTensor(tensor, managed, shape_arr)
