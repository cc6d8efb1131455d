"""ONNX files whose weights are stored beside them (`external data`: exporters write it for
models past protobuf's 2 GiB, and PyTorch's dynamo exporter and Hugging Face's optimum often
for smaller ones too). The weights are read into the model, so that every later step (onnxslim,
TVM's importer) sees one self-contained graph wherever cw runs from: left external, they were
looked for relative to the working directory."""

from __future__ import annotations

import hashlib
from pathlib import Path

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
    into `digest`, in the order of their names. Returns the files' names."""
    external = [t for t in _tensors(model.graph)
                if t.data_location == onnx.TensorProto.EXTERNAL]
    if not external:
        return []
    base = path.resolve().parent
    files: dict[str, bytes] = {}
    for tensor in external:
        info = ExternalDataInfo(tensor)
        if info.location not in files:
            files[info.location] = _read(path, base, info.location, tensor.name)
        blob = files[info.location]
        start = info.offset or 0
        end = start + info.length if info.length else len(blob)
        if end > len(blob):
            raise ModelError(f"{path.name}: tensor '{tensor.name}' lies at bytes {start}-{end} "
                             f"of {info.location}, which has {len(blob)}",
                             "the data file is truncated or belongs to another export: "
                             "export the model again")
        tensor.raw_data = blob[start:end]
        tensor.data_location = onnx.TensorProto.DEFAULT
        del tensor.external_data[:]
    for name in sorted(files):
        digest.update(files[name])
    return sorted(files)


def _read(path: Path, base: Path, location: str, tensor: str) -> bytes:
    file = (base / location).resolve()
    if not file.is_relative_to(base):
        raise ModelError(f"{path.name}: tensor '{tensor}' is stored at {location!r}, outside "
                         "the model's directory", "keep a model's data files beside it")
    if not file.is_file():
        raise ModelError(f"{path.name}: tensor '{tensor}' is stored in {location}, which is not "
                         f"in {base}", f"copy {location} next to {path.name} (an ONNX file "
                         "with external data needs its data files beside it)")
    return file.read_bytes()
