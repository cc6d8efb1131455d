"""The bundle: what `cw compile` writes and everything else reads (schema in docs/bundle.md).

A bundle is a directory holding `manifest.json`, one weights blob shared by every batch size, one
kernel library per batch size and optionally `profile.json`. The manifest records the sha256 of
every other file; `open_bundle` verifies them. Bundles are written by `BundleWriter` into a
temporary sibling directory that is renamed into place only when complete, so a failed or
interrupted write never leaves a bundle behind.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
from pathlib import Path

import msgspec

from cw.errors import BundleError, HostError, OutputExistsError, UsageError, cannot_write

SCHEMA_VERSION = 1
MANIFEST = "manifest.json"
WEIGHTS_FILE = "weights.bin"
PROFILE_FILE = "profile.json"
# Offsets of tensors inside pages: TVM aliases memory zero-copy only when 64-byte aligned.
TENSOR_ALIGNMENT = 256
# A model's name is its id on the wire, in telemetry and on command lines (`cw infer NAME`),
# and the stem of its copies' ids (`name#k`): no separators, quotes or path parts.
_MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}")


def check_model_name(name: str, where: str) -> str:
    if not _MODEL_NAME.fullmatch(name):
        raise UsageError(f"{where}: '{name}' is not a valid model name",
                         "use up to 128 letters, digits, '.', '_', '+' or '-', starting with a "
                         "letter or digit")
    return name


def model_name_from(stem: str) -> str:
    """A valid model name made from a file's stem: other characters become '-'."""
    name = re.sub(r"[^A-Za-z0-9._+-]", "-", stem).lstrip("._+-")[:128]
    return name or "model"


class TensorSpec(msgspec.Struct, frozen=True):
    """A model input or output; `shape[0]` is the batch dimension."""
    name: str
    dtype: str
    sample_shape: list[int]  # shape without the batch dimension
    sample_bytes: int
    # an integer input that indexes a table (token ids): its values must be in
    # [-index_limit, index_limit); 0 where it indexes nothing
    index_limit: int = 0
    # where the ONNX file has this tensor's batch axis, when not first (a recurrent state
    # [2, batch, 128]): the bundle takes and gives it batch-first all the same
    source_batch_axis: int = 0


class FixedInput(msgspec.Struct, frozen=True):
    """An input of the ONNX file given its value at compile time (`--input-value`)."""
    name: str
    dtype: str
    shape: list[int]
    values: list[float | int]


def check_model_inputs(model: str, specs, batch_sizes: list[int], inputs) -> int:
    """`inputs` (numpy arrays with a batch axis) against what `model` (named as in messages,
    e.g. "bundle 'mlp'") takes: `specs` (TensorSpec, or the protocol's TensorInfo) and its
    compiled `batch_sizes`. Returns the batch size, or raises a UsageError saying how to fix
    the input: what `cw run` and `cw infer` check before anything runs or is sent."""
    import numpy as np

    if len(inputs) != len(specs):
        raise UsageError(f"{model} takes {len(specs)} input(s), got {len(inputs)}",
                         "inputs: " + ", ".join(s.name for s in specs))
    batch = None
    for x, spec in zip(inputs, specs):
        expected = ["B", *spec.sample_shape]
        if not isinstance(x, np.ndarray):
            raise UsageError(f"input '{spec.name}' is a {type(x).__name__}, not a numpy array",
                             f"make it one, e.g. np.asarray(x, dtype='{spec.dtype}')")
        if x.dtype != np.dtype(spec.dtype):
            raise UsageError(f"input '{spec.name}' has dtype {x.dtype}, {model} expects "
                             f"{spec.dtype}", f"convert it, e.g. x.astype('{spec.dtype}')")
        if x.ndim != len(expected) or list(x.shape[1:]) != list(spec.sample_shape):
            raise UsageError(f"input '{spec.name}' has shape {list(x.shape)}, {model} expects "
                             f"[{', '.join(map(str, expected))}]",
                             "B is the batch size; add a leading axis for a single sample")
        problem = index_problem(spec, x)
        if problem:
            raise UsageError(problem, "indices (token ids) must come from the model's own range, "
                                      "e.g. its tokenizer's vocabulary")
        if batch is not None and x.shape[0] != batch:
            raise UsageError("inputs disagree on the batch size",
                             "give every input the same leading dimension")
        batch = x.shape[0]
    if not batch:
        raise UsageError("input batch is empty", "give at least one sample")
    if batch > max(batch_sizes):
        raise batch_too_large(batch, max(batch_sizes), model)
    return batch


def synthetic_input(spec, batch: int, rng):
    """A made-up input of `batch` samples for `spec` (a TensorSpec or TensorInfo), valid for
    the model: normal floats, indices within the table they index (random token ids), zeros
    for any other integers or booleans. What profiling and `cw infer --random` send; the
    kernels' time does not depend on the values."""
    import numpy as np

    shape = (batch, *spec.sample_shape)
    dtype = np.dtype(spec.dtype)
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    limit = getattr(spec, "index_limit", 0)
    if dtype.kind in "iu" and limit:
        return rng.integers(0, limit, shape).astype(dtype)
    return np.zeros(shape, dtype)


def index_problem(spec, values) -> str | None:
    """Why `values` (a numpy array of `spec`'s input, any shape) cannot index the table it
    indexes (`spec.index_limit`, a TensorSpec's or the protocol's TensorInfo's), or None: the
    first value out of range, where it is, and the range."""
    import numpy as np

    limit = getattr(spec, "index_limit", 0)
    if not limit or values.size == 0:
        return None
    bad = (values < -limit) | (values >= limit)
    if not bad.any():
        return None
    where = np.unravel_index(int(np.argmax(bad)), values.shape)
    return (f"input '{spec.name}' holds {values[where]} at {list(map(int, where))}: it indexes "
            f"a table of {limit} rows (values {-limit}..{limit - 1})")


def batch_too_large(batch: int, largest: int, model: str) -> UsageError:
    return UsageError(f"batch of {batch} exceeds the largest compiled batch size {largest} of "
                      f"{model}", "split the input or recompile with larger --batch-sizes")


class WeightPage(msgspec.Struct, frozen=True):
    index: int
    file_offset: int  # where the page's bytes start in the weights file
    used_bytes: int   # bytes stored; the rest of the page is free


class WeightTensor(msgspec.Struct, frozen=True):
    name: str
    dtype: str
    shape: list[int]
    nbytes: int
    page: int
    offset: int  # within the page
    source: str = ""  # the ONNX initializers it was computed from, when not stored as is


class Weights(msgspec.Struct, frozen=True):
    file: str
    total_bytes: int
    page_size: int
    pages: list[WeightPage]
    tensors: list[WeightTensor]  # in kernel parameter order


class Allocation(msgspec.Struct, frozen=True):
    kind: str  # "alloc_tensor" (unplanned) or "alloc_storage" (planned)
    nbytes: int | None  # None where the size is only known at run time


class BatchKernel(msgspec.Struct, frozen=True):
    batch_size: int
    kernel_file: str
    kernel_bytes: int
    workspace_bytes: int  # sum of TVM's statically planned storage blocks
    input_bytes: int
    output_bytes: int
    storage_blocks: list[int]
    unplanned: list[Allocation]  # allocations outside the static plan (usually the outputs)
    compile_seconds: float
    data_bytes: int = 0  # CPU libraries: size of the data sections, which bound any constant
    kernels_tuned: int = 0  # kernels scheduled from a tuning database (the rest: TVM defaults)
    kernels_total: int = 0
    kernels_conv_scheduled: int = 0  # CPU: convolutions with cw's schedule (NCHWc or NCHW)
    kernels_conv_split: int = 0  # CUDA: convolutions split along input channels (split-K)


class Target(msgspec.Struct, frozen=True):
    kind: str  # "cpu" | "cuda"
    arch: str | None
    tvm_target: str
    tuning: str = ""  # tuning databases applied, most important first ("" when none)
    precision: str = "fp32"  # "fp16": convolutions and matmuls in fp16, summed in fp32


class Source(msgspec.Struct, frozen=True):
    file: str
    sha256: str
    opset: int
    producer: str


class Manifest(msgspec.Struct, frozen=True):
    schema_version: int
    name: str
    source: Source
    cw_version: str
    tvm_version: str
    target: Target
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    batch_sizes: list[int]
    kernels: list[BatchKernel]
    weights: Weights
    files: dict[str, str]  # relative path -> sha256 of every file but the manifest
    notes: list[str] = []
    fixed_inputs: list[FixedInput] = []

    def kernel_for(self, batch_size: int) -> BatchKernel:
        """The smallest compiled batch size that holds `batch_size` requests (inputs are padded)."""
        for kernel in self.kernels:
            if kernel.batch_size >= batch_size:
                return kernel
        raise batch_too_large(batch_size, self.batch_sizes[-1], f"bundle '{self.name}'")


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def encode_json(obj) -> bytes:
    return msgspec.json.format(msgspec.json.encode(obj), indent=2) + b"\n"


class Bundle:
    """An opened, verified bundle on disk."""

    def __init__(self, path: Path, manifest: Manifest):
        self.path = path
        self.manifest = manifest

    def file(self, relative: str) -> Path:
        return self.path / relative

    @property
    def has_profile(self) -> bool:
        return PROFILE_FILE in self.manifest.files


def read_manifest(path: str | os.PathLike) -> Manifest:
    path = Path(path)
    if not path.is_dir():
        raise BundleError(f"no bundle at {path}", "give the directory that `cw compile -o` wrote")
    manifest_path = path / MANIFEST
    if not manifest_path.is_file():
        raise BundleError(f"{path} is not a bundle: {MANIFEST} is missing",
                          "compile the model again with `cw compile`")
    try:
        raw = msgspec.json.decode(manifest_path.read_bytes())
        version = raw.get("schema_version") if isinstance(raw, dict) else None
        if version != SCHEMA_VERSION:
            raise BundleError(f"{manifest_path}: schema version {version} is not supported "
                              f"(this cw reads version {SCHEMA_VERSION})",
                              "recompile the model with this version of cw")
        manifest = msgspec.convert(raw, Manifest)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise BundleError(f"{manifest_path} is corrupted: {e}",
                          "compile the model again with `cw compile`") from None
    if not _MODEL_NAME.fullmatch(manifest.name):
        raise BundleError(f"{manifest_path}: '{manifest.name}' is not a valid model name",
                          "compile the model again with `cw compile --name NAME` (letters, "
                          "digits, '.', '_', '+', '-')")
    return manifest


def open_bundle(path: str | os.PathLike, verify: bool = True,
                remeasuring: bool = False) -> Bundle:
    """Read the manifest and (by default) check every file against its sha256.
    `remeasuring` (cw profile): profile.json is not checked, being about to be replaced."""
    path = Path(path)
    manifest = read_manifest(path)
    if verify:
        for relative, digest in manifest.files.items():
            if relative == PROFILE_FILE and remeasuring:
                continue
            file = path / relative
            # measurements are remade by measuring again; the rest only by compiling again
            fix = (f"measure it again: cw profile {path} (or cw profile {path} --import FILE)"
                   if relative == PROFILE_FILE
                   else "compile the model again with `cw compile --force`")
            if not file.is_file():
                raise BundleError(f"bundle {path} is incomplete: {relative} is missing", fix)
            if sha256_file(file) != digest:
                raise BundleError(f"bundle {path} is corrupted: checksum mismatch in {relative}",
                                  fix)
    return Bundle(path, manifest)


def profile_intact(bundle: Bundle) -> bool:
    """Whether the bundle's listed profile.json is there and matches its checksum."""
    file = bundle.path / PROFILE_FILE
    return (bundle.has_profile and file.is_file()
            and sha256_file(file) == bundle.manifest.files[PROFILE_FILE])


class BundleWriter:
    """Writes a bundle into a temporary sibling directory; `commit()` renames it into place.

    Used as a context manager: leaving the block without `commit()` (an error, Ctrl-C) removes
    the temporary directory, so no half-written bundle is ever visible at the output path.
    """

    def __init__(self, out: str | os.PathLike, force: bool = False):
        self.out = Path(out)
        self.force = force
        if self.out.exists() and not force:
            raise OutputExistsError(f"output {self.out} already exists",
                                    "pass --force to replace it or choose another -o")
        if self.out.exists() and not (self.out / MANIFEST).is_file() and any(self.out.iterdir()):
            raise OutputExistsError(f"output {self.out} exists and is not a bundle",
                                    "refusing to replace it; choose another -o")
        parent = self.out.parent if str(self.out.parent) else Path(".")
        try:
            parent.mkdir(parents=True, exist_ok=True)
            self.tmp = Path(tempfile.mkdtemp(prefix=f".{self.out.name}.", dir=parent))
        except OSError as e:
            raise cannot_write(e, parent, "-o") from None
        self._committed = False

    def __enter__(self) -> "BundleWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if not self._committed:
            shutil.rmtree(self.tmp, ignore_errors=True)
        if isinstance(exc, OSError) and (host := HostError.of(exc, self.out, "-o")) is not None:
            raise host from exc  # a full disk is not a bug: say so, and where

    def path(self, relative: str) -> Path:
        p = self.tmp / relative
        p.parent.mkdir(parents=True, exist_ok=True)
        return p

    def checksums(self) -> dict[str, str]:
        return {str(p.relative_to(self.tmp)): sha256_file(p)
                for p in sorted(self.tmp.rglob("*")) if p.is_file() and p.name != MANIFEST}

    def commit(self, manifest: Manifest) -> Path:
        self.path(MANIFEST).write_bytes(encode_json(manifest))
        os.chmod(self.tmp, 0o755)  # mkdtemp makes it private
        if self.out.exists():
            old = self.out.with_name(f".{self.out.name}.old-{os.getpid()}")
            os.replace(self.out, old)
            os.replace(self.tmp, self.out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(self.tmp, self.out)
        self._committed = True
        return self.out


def replace_file_in_bundle(bundle: Bundle, relative: str, data: bytes) -> Bundle:
    """Add or replace one file (e.g. profile.json) and its checksum, each written atomically."""
    target = bundle.path / relative
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    tmp.write_bytes(data)
    files = dict(bundle.manifest.files)
    files[relative] = hashlib.sha256(data).hexdigest()
    manifest = msgspec.structs.replace(bundle.manifest, files=files)
    manifest_tmp = bundle.path / f".{MANIFEST}.tmp-{os.getpid()}"
    manifest_tmp.write_bytes(encode_json(manifest))
    os.replace(tmp, target)
    os.replace(manifest_tmp, bundle.path / MANIFEST)
    return Bundle(bundle.path, manifest)


def describe(path: str | os.PathLike) -> dict:
    """What `cw inspect` shows: the verified manifest, plus the profile's summary if present."""
    bundle = open_bundle(path, verify=True)
    info = msgspec.to_builtins(bundle.manifest)
    info["path"] = str(bundle.path)
    info["checksums_verified"] = True
    if bundle.has_profile:
        try:
            info["profile"] = msgspec.json.decode(bundle.file(PROFILE_FILE).read_bytes())
        except msgspec.DecodeError:
            raise BundleError(f"{bundle.path / PROFILE_FILE} is not valid JSON",
                              "run `cw profile` again") from None
    elif (bundle.path / PROFILE_FILE).is_file():
        info["unregistered_profile"] = str(bundle.path / PROFILE_FILE)  # copied in by hand
    return info
