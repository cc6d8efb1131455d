"""ONNX builders for standard architectures, with seeded random weights and no downloads.

`build(name)` returns an `onnx.ModelProto`; `export(name, path)` writes it. The same name gives a
byte-identical file on any machine.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from functools import partial
from typing import Callable

import onnx

from cw.errors import UsageError, cannot_write

from .bert import bert
from .densenet import densenet121
from .inception import inception_v3
from .mobilenet import mobilenet_v2
from .quantized import int8_activations
from .resnet import resnet50_v2, resnet_v1
from .tiny import late_cnn, mlp, small_cnn


@dataclass(frozen=True)
class ZooEntry:
    name: str
    build: Callable[..., onnx.ModelProto]
    input_shape: tuple[int, ...]  # without the batch dimension
    description: str
    # Weight bytes of the published model in decimal MB, and where the figure comes from.
    published_mb: float | None = None
    published_source: str = ""
    # Clockwork's Table 1 (V100, TVM 0.7): weights transfer ms and exec ms at batch 1/2/4/8/16.
    # The simulated runtime falls back to these where a bundle has no profile of its own.
    paper_load_ms: float | None = None
    paper_exec_ms: tuple[float, ...] | None = None
    input_dtype: str = "float32"
    # what a simulated worker answers (the ImageNet classifiers'; the tiny models' 10 were
    # simulated as 1,000 too)
    output_shape: tuple[int, ...] = (1000,)
    # token ids: the vocabulary's size (the input's values are in [0, index_limit))
    index_limit: int = 0


_TABLE1 = "Clockwork (OSDI'20) Table 1"
MODELS: dict[str, ZooEntry] = {e.name: e for e in [
    ZooEntry("resnet18", partial(resnet_v1, 18), (3, 224, 224), "ResNet-18 v1", 46.7, _TABLE1,
             paper_load_ms=3.81, paper_exec_ms=(1.27, 1.86, 2.73, 4.06, 7.02)),
    ZooEntry("resnet34", partial(resnet_v1, 34), (3, 224, 224), "ResNet-34 v1", 87.2, _TABLE1,
             paper_load_ms=7.11, paper_exec_ms=(2.4, 3.39, 4.62, 7.76, 14.4)),
    ZooEntry("resnet50", partial(resnet_v1, 50), (3, 224, 224), "ResNet-50 v1", 102.3, _TABLE1,
             paper_load_ms=8.33, paper_exec_ms=(2.61, 3.78, 5.61, 9.13, 15.67)),
    ZooEntry("resnet101", partial(resnet_v1, 101), (3, 224, 224), "ResNet-101 v1", 178.3, _TABLE1,
             paper_load_ms=14.54, paper_exec_ms=(5.27, 7.62, 11.07, 18.04, 30.3)),
    ZooEntry("resnet152", partial(resnet_v1, 152), (3, 224, 224), "ResNet-152 v1", 240.9, _TABLE1,
             paper_load_ms=19.58, paper_exec_ms=(7.71, 11.14, 16.21, 26.48, 44.6)),
    ZooEntry("resnet50_v2", resnet50_v2, (3, 224, 224), "ResNet-50 v2 (pre-activation)", 102.2,
             _TABLE1,
             paper_load_ms=8.32, paper_exec_ms=(2.73, 4.05, 5.87, 9.93, 17.3)),
    ZooEntry("mobilenet_v2", mobilenet_v2, (3, 224, 224), "MobileNetV2 1.0", 14.02,
             "torchvision mobilenet_v2: 3,504,872 parameters"),
    ZooEntry("densenet121", densenet121, (3, 224, 224), "DenseNet-121", 31.8, _TABLE1,
             paper_load_ms=2.59, paper_exec_ms=(3.8, 4.52, 6.55, 10.22, 17.91)),
    ZooEntry("inception_v3", inception_v3, (3, 299, 299), "Inception v3 (no aux head)", 95.3,
             _TABLE1,
             paper_load_ms=7.77, paper_exec_ms=(4.46, 6.85, 10.99, 16.45, 26.17)),
    ZooEntry("bert_base", partial(bert, 12, 768, 12, 128, 30522, "bert_base"), (128,),
             "BERT-base encoder, 128 token ids, 2-way classifier", 437.9,
             "Hugging Face bert-base-uncased: 109,482,240 parameters",
             input_dtype="int64", index_limit=30522, output_shape=(2,)),
    ZooEntry("mlp", mlp, (64,), "tiny MLP 64-128-128-10 (tests)"),
    ZooEntry("small_cnn", small_cnn, (3, 32, 32), "tiny CNN, 2 conv layers (tests)"),
    ZooEntry("late_cnn", late_cnn, (64, 7, 7), "tiny CNN, 2 wide convs on 7x7 (tests: split-K)"),
    ZooEntry("small_bert", partial(bert, 2, 128, 2, 32, 1000, "small_bert"), (32,),
             "2-layer BERT, hidden 128, 32 token ids of 1,000 (tests)",
             input_dtype="int64", index_limit=1000, output_shape=(2,)),
    ZooEntry("int8_activations", int8_activations, (8, 6, 6),
             "tiny uint8 graph of onnxruntime's QLinear activations (tests)",
             output_shape=(24, 6, 6)),
]}


def get(name: str) -> ZooEntry:
    try:
        return MODELS[name]
    except KeyError:
        raise UsageError(f"unknown zoo model '{name}'",
                         f"valid names: {', '.join(MODELS)}") from None


def build(name: str, batch: int | None = None) -> onnx.ModelProto:
    """The model with a symbolic batch dimension, or a fixed one if `batch` is given."""
    if batch is not None and not 1 <= batch:
        raise UsageError(f"batch must be a positive integer, got {batch}", "use --batch dynamic")
    return get(name).build(batch=batch)


_BUFFER_SUFFIXES = (".running_mean", ".running_var")


def _nbytes(t: onnx.TensorProto) -> int:
    return onnx.numpy_helper.to_array(t).nbytes


def weight_bytes(model: onnx.ModelProto) -> int:
    """Bytes of every initializer, BatchNorm running statistics included."""
    return sum(_nbytes(t) for t in model.graph.initializer)


def learned_bytes(model: onnx.ModelProto) -> int:
    """Bytes of learned parameters only: what published model sizes count (torchvision's
    parameter counts, Clockwork's Table 1), BatchNorm running statistics excluded. After
    `cw compile` folds BatchNorm for inference the bundle's weights come close to this."""
    return sum(_nbytes(t) for t in model.graph.initializer
               if not t.name.endswith(_BUFFER_SUFFIXES))


def export(name: str, path: str | os.PathLike, batch: int | None = None) -> int:
    """Write the ONNX file atomically; returns its size in bytes."""
    data = build(name, batch).SerializeToString()
    path = Path(path)
    # named as cw's atomic writers name their temporaries, so that errors name `path`
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise cannot_write(e, path, "-o", "file") from None
    return len(data)
