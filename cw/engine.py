"""A bundle loaded on one device for local inference (`cw run`, `--verify`, tests).

This is the simple path: weights are placed as one TVM tensor each. The serving worker and
`cw profile` manage device memory themselves (a page cache allocated once); they share the
bundle format and the input checks below.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import NamedTuple

import numpy as np

from cw.bundle import Bundle, Manifest, check_model_inputs, open_bundle
from cw.errors import BundleError, DeviceError, UsageError
from cw.tvm_env import load_tvm

DEVICES = ("cpu", "cuda")


def parse_device(text: str) -> tuple[str, int]:
    """'cpu' | 'cuda' | 'cuda:1' -> (kind, index)."""
    kind, _, index = text.partition(":")
    if kind not in DEVICES or (index and not index.isdigit()):
        raise UsageError(f"unknown device '{text}'", "use cpu, cuda or cuda:N")
    return kind, int(index or 0)


def tvm_device(kind: str, index: int = 0):
    tvm = load_tvm()
    if kind == "cpu":
        return tvm.cpu(0)
    dev = tvm.cuda(index)
    if not dev.exist:
        raise DeviceError(f"no CUDA GPU {index} on this machine",
                          "use --device cpu with a bundle compiled for --target cpu")
    return dev


def check_target(manifest: Manifest, kind: str, where: str, index: int = 0) -> None:
    """Refuse a bundle that this device cannot run, with what to do instead."""
    if manifest.target.kind != kind:
        raise DeviceError(f"bundle {where} was compiled for {manifest.target.kind}, not {kind}",
                          f"use --device {manifest.target.kind}, or recompile with "
                          f"--target {kind}")
    if kind == "cpu":
        from cw.compile.targets import check_host_runs
        check_host_runs(manifest.target.arch, where)
    else:
        from cw.compile.targets import check_gpu_runs
        version = tvm_device(kind, index).compute_version  # e.g. "9.0"
        check_gpu_runs(manifest.target.arch, "sm_" + version.replace(".", ""), where)


def weights_host(bundle: Bundle) -> list[np.ndarray]:
    """Every weight tensor as a view into one host copy of the weights file."""
    w = bundle.manifest.weights
    blob = read_aligned(bundle.file(w.file))
    out = []
    for t in w.tensors:
        start = w.pages[t.page].file_offset + t.offset
        raw = blob[start:start + t.nbytes]
        out.append(raw.view(np.dtype(t.dtype)).reshape(t.shape))
    return out


def aligned_empty(shape, dtype, alignment: int = 64) -> np.ndarray:
    """An uninitialized array whose data starts `alignment`-aligned (numpy's own allocations
    are not; TVM aliases host memory only when it is 64-byte aligned)."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + alignment, dtype=np.uint8)
    start = (-raw.ctypes.data) % alignment
    return raw[start:start + nbytes].view(dtype).reshape(shape)


def read_aligned(path: Path, alignment: int = 256) -> np.ndarray:
    """A file's bytes in a buffer whose start is `alignment`-aligned."""
    size = path.stat().st_size
    buf = aligned_empty((size,), np.uint8, alignment)
    with open(path, "rb") as f:
        if f.readinto(memoryview(buf)) != size:
            raise BundleError(f"{path} is truncated", "compile the model again")
    return buf


def check_inputs(manifest: Manifest, inputs: list[np.ndarray]) -> int:
    """Validate against the manifest; returns the batch size (the leading dimension)."""
    return check_model_inputs(f"bundle '{manifest.name}'", manifest.inputs,
                              manifest.batch_sizes, inputs)


class LocalModel:
    """Runs a bundle on one device: pads a batch to the next compiled size, runs, unpads."""

    def __init__(self, path: str | Path, device: str = "cpu", verify: bool = True):
        self.bundle = open_bundle(path, verify=verify)
        self.manifest = self.bundle.manifest
        kind, index = parse_device(device)
        self.kind = kind
        check_target(self.manifest, kind, str(path), index)
        self.tvm = load_tvm()
        self.device = tvm_device(kind, index)
        rt = self.tvm.runtime
        host = weights_host(self.bundle)
        if kind == "cpu":
            # Zero-copy: every tensor offset is 256-byte aligned inside the host blob.
            # (views of the blob are contiguous; np.ascontiguousarray would turn 0-d into 1-d)
            self.weights = [rt.from_dlpack(w) for w in host]
        else:
            self.weights = [rt.tensor(w, device=self.device) for w in host]
        self._vms: dict[int, object] = {}
        self._kernels: dict[int, _Kernel] = {}
        # A VM is not thread-safe, and a CPU kernel's inputs are buffers made once per batch size
        self._lock = threading.Lock()

    def _vm(self, batch_size: int):
        if batch_size not in self._vms:
            from tvm.runtime.vm import VirtualMachine

            kernel = next(k for k in self.manifest.kernels if k.batch_size == batch_size)
            try:
                lib = self.tvm.runtime.load_module(str(self.bundle.file(kernel.kernel_file)))
            except Exception as e:
                raise BundleError(f"cannot load {kernel.kernel_file} of {self.bundle.path}: "
                                  f"{str(e).strip().splitlines()[-1]}",
                                  "recompile the bundle for this machine") from None
            self._vms[batch_size] = VirtualMachine(lib, self.device)
        return self._vms[batch_size]

    def _kernel(self, batch_size: int) -> _Kernel:
        kernel = self._kernels.get(batch_size)
        if kernel is None:
            hosts = []
            if self.kind == "cpu":  # the kernels read aligned buffers, aliased by TVM
                hosts = [aligned_empty((batch_size, *s.sample_shape), s.dtype)
                         for s in self.manifest.inputs]
            kernel = _Kernel(self._vm(batch_size)["main"], hosts,
                             [self.tvm.runtime.from_dlpack(h) for h in hosts])
            self._kernels[batch_size] = kernel
        return kernel

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        n = check_inputs(self.manifest, inputs)
        size = self.manifest.kernel_for(n).batch_size
        with self._lock:
            kernel = self._kernel(size)
            if self.kind == "cpu":
                # Into buffers made once: a fresh aligned buffer, its TVM tensor and the
                # outputs' Tensor.numpy() cost Silero VAD 110 us a run, its kernels 43.
                for host, x in zip(kernel.hosts, inputs):
                    host[:n] = x
                    host[n:] = 0
                args = kernel.tensors
            else:
                args = []
                for x in inputs:
                    if size != n:
                        pad = np.zeros((size - n, *x.shape[1:]), dtype=x.dtype)
                        x = np.concatenate([x, pad])
                    args.append(self.tvm.runtime.tensor(np.ascontiguousarray(x),
                                                        device=self.device))
            result = kernel.main(*args, *self.weights)
            outs = list(result) if not hasattr(result, "numpy") else [result]
            if self.kind == "cpu":
                return [host_rows(o, n) for o in outs]
            return [o.numpy()[:n] for o in outs]


class _Kernel(NamedTuple):
    """One batch size's compiled kernels: the VM's entry point and, on the CPU, the aligned
    input buffers it reads (`tensors`: TVM's views of `hosts`)."""
    main: object
    hosts: list
    tensors: list


def host_rows(tensor, n: int) -> np.ndarray:
    """The first `n` rows of a CPU TVM tensor, as a numpy array of their own. Through DLPack:
    1 us, where Tensor.numpy() takes 9 us (it checks the dtype against a list in Python)."""
    try:
        view = np.from_dlpack(tensor)
    except (BufferError, TypeError, ValueError):  # a dtype numpy's DLPack lacks (bfloat16)
        return tensor.numpy()[:n]
    return view[:n].copy()


def read_arrays(path: str | Path) -> np.ndarray | dict[str, np.ndarray]:
    """An --input file: an .npy array, or an .npz's arrays by name (read at once, before any
    model is known: a missing file is said before anything else is waited for)."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"no such file: {path}", "give --input an .npy or .npz file")
    with open(path, "rb") as f:
        magic = f.read(6)
    if not (magic.startswith(b"\x93NUMPY") or magic.startswith(b"PK")):
        # np.load would guess a pickle and say so, which misleads
        raise UsageError(f"{path} is not an .npy or .npz file",
                         "save the input with numpy.save or numpy.savez")
    try:
        data = np.load(path, allow_pickle=False)
        if isinstance(data, np.ndarray):
            return data
        with data:
            return {name: data[name] for name in data.files}
    except (ValueError, OSError) as e:
        raise UsageError(f"cannot read {path}: {e}", "give --input an .npy or .npz file") from None


def arrange_inputs(data: np.ndarray | dict[str, np.ndarray], model: str, specs,
                   source: str) -> list[np.ndarray]:
    """`data` (read_arrays of the file named `source`) as the inputs of `model` (named as in
    messages), in the order of `specs`."""
    if isinstance(data, np.ndarray):
        if len(specs) != 1:
            raise UsageError(f"{model} has {len(specs)} inputs; {source} holds one array",
                             "give an .npz with arrays named " + ", ".join(s.name for s in specs))
        return [data]
    if len(specs) == 1 and len(data) == 1:  # one array for one input: its name is no matter
        return list(data.values())
    missing = [s.name for s in specs if s.name not in data]
    if missing:
        quoted = ", ".join(f"'{name}'" for name in missing)
        held = ", ".join(f"'{name}'" for name in data) or "no arrays"
        example = ", ".join(f"{s.name}=..." for s in specs)
        raise UsageError(f"{source} lacks input{'s' if len(missing) > 1 else ''} {quoted} of "
                         f"{model} (it holds {held})",
                         f"name its arrays after the inputs: numpy.savez(FILE, {example})")
    return [data[s.name] for s in specs]


def load_inputs(path: str | Path, manifest: Manifest) -> list[np.ndarray]:
    """A .npy file for a one-input model, or an .npz with one array per input name."""
    return arrange_inputs(read_arrays(path), f"model '{manifest.name}'", manifest.inputs,
                          Path(path).name)


def check_output_path(path: str | Path, specs) -> None:
    """Before running: -o names a format numpy writes for these outputs (.npy holds one array;
    y.txt got .npy bytes, and a two-output model's y.npy got an .npz)."""
    path = Path(path)
    if path.suffix not in (".npy", ".npz"):
        raise UsageError(f"-o {path}: cw writes outputs as .npy or .npz, not "
                         f"'{path.suffix or 'no suffix'}'",
                         f"name it {path.with_suffix('.npy' if len(specs) == 1 else '.npz')}")
    if path.suffix == ".npy" and len(specs) > 1:
        raise UsageError(f"-o {path}: the model has {len(specs)} outputs "
                         f"({', '.join(s.name for s in specs)}); an .npy file holds one",
                         f"name it {path.with_suffix('.npz')} (one array per output name)")
    if path.is_dir():
        raise UsageError(f"-o {path} is a directory", "give a file name ending in .npy or .npz")


def save_outputs(path: str | Path, specs, outputs: list[np.ndarray]) -> None:
    """Atomically: .npy for one output, else .npz keyed by the output names of `specs`."""
    path = Path(path)
    check_output_path(path, specs)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "wb") as f:
            if len(outputs) == 1 and path.suffix != ".npz":
                np.save(f, outputs[0])
            else:
                np.savez(f, **{s.name: y for s, y in zip(specs, outputs)})
        tmp.replace(path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise UsageError(f"cannot write {path}: {e.strerror}", "choose a writable -o path") \
            from None


class RunResult:
    def __init__(self, outputs, batch, padded_to, seconds, relative_error=None):
        self.outputs = outputs
        self.batch = batch
        self.padded_to = padded_to
        self.seconds = seconds
        self.relative_error = relative_error

    def to_dict(self) -> dict:
        return {"batch": self.batch, "padded_to": self.padded_to, "seconds": self.seconds,
                "outputs": [{"shape": list(y.shape), "dtype": y.dtype.name} for y in self.outputs],
                "max_relative_error": self.relative_error}


def run_bundle(path: str | Path, inputs: list[np.ndarray], device: str = "cpu",
               verify_onnx: str | Path | None = None) -> RunResult:
    """One local inference, no server. With `verify_onnx`, also the max relative error against
    onnxruntime on the same inputs."""
    import time

    model = LocalModel(path, device)
    n = check_inputs(model.manifest, inputs)
    start = time.perf_counter()
    outputs = model.run(inputs)
    seconds = time.perf_counter() - start
    error = None
    if verify_onnx is not None:
        from cw.verify import max_relative_error, onnx_reference

        refs = onnx_reference(verify_onnx, inputs, model.manifest)
        error = max(max_relative_error(y, r) for y, r in zip(outputs, refs))
    return RunResult(outputs, n, model.manifest.kernel_for(n).batch_size, seconds, error)
