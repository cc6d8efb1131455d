"""ONNX files whose weights are stored beside them (`external data`: exporters write it for
models past protobuf's 2 GiB, and PyTorch's dynamo exporter and Hugging Face's optimum often
for smaller ones too). The weights are read into the model, so that every later step (onnxslim,
TVM's importer) sees one self-contained graph wherever cw runs from: left external, they were
looked for relative to the working directory."""

from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path
from typing import BinaryIO

import onnx
from onnx.external_data_helper import ExternalDataInfo

from cw.errors import ModelError


def _tensors(graph: onnx.GraphProto):
    """Every tensor of `graph` and of the graphs its nodes hold: initializers and the values
    of Constant nodes."""
    yield from graph.initializer
    for node in graph.node:
        for a in node.attribute:
            if a.HasField("t"):
                yield a.t
            yield from a.tensors
            if a.HasField("g"):
                yield from _tensors(a.g)
            for g in a.graphs:
                yield from _tensors(g)


def inline(path: Path, model: onnx.ModelProto, digest: hashlib._Hash) -> list[str]:
    """Read `model`'s external tensors (stored beside `path`) into it; each file's bytes also go
    into `digest`, in the order of their names. Returns the files' names. Each tensor is read
    from its file on its own, so that the bytes exist twice (read, and in the model) for one
    tensor at a time, not for the whole file (a 2.6 GB model peaked at 2x its size)."""
    external = [t for t in _tensors(model.graph)
                if t.data_location == onnx.TensorProto.EXTERNAL]
    if not external:
        return []
    base = path.resolve().parent
    with contextlib.ExitStack() as opened:
        files: dict[str, BinaryIO] = {}  # by location
        for tensor in external:
            info = ExternalDataInfo(tensor)
            if info.location not in files:
                files[info.location] = opened.enter_context(
                    _located(path, base, info.location, tensor.name).open("rb"))
            f = files[info.location]
            size = os.fstat(f.fileno()).st_size
            start = info.offset or 0
            end = start + info.length if info.length else size
            if end > size:
                raise ModelError(f"{path.name}: tensor '{tensor.name}' lies at bytes "
                                 f"{start}-{end} of {info.location}, which has {size}",
                                 "the data file is truncated or belongs to another export: "
                                 "export the model again")
            f.seek(start)
            tensor.raw_data = f.read(end - start)
            tensor.data_location = onnx.TensorProto.DEFAULT
            del tensor.external_data[:]
        for name in sorted(files):
            f = files[name]
            f.seek(0)
            while chunk := f.read(_HASH_CHUNK):
                digest.update(chunk)
    return sorted(files)


_HASH_CHUNK = 64 << 20


def _located(path: Path, base: Path, location: str, tensor: str) -> Path:
    file = (base / location).resolve()
    if not file.is_relative_to(base):
        raise ModelError(f"{path.name}: tensor '{tensor}' is stored at {location!r}, outside "
                         "the model's directory", "keep a model's data files beside it")
    if not file.is_file():
        raise ModelError(f"{path.name}: tensor '{tensor}' is stored in {location}, which is not "
                         f"in {base}", f"copy {location} next to {path.name} (an ONNX file "
                         "with external data needs its data files beside it)")
    return file
