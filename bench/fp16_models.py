"""A float32 ONNX model as a float16 one, the way onnxconverter_common's
convert_float_to_float16 writes it (keep_io_types off): float16 weights, inputs and outputs,
casts to float16 where the graph cast to float32. For stop 78's float32 sums
(cw/compile/fp16_sums.py): cw's float16 bundles of real models against the float32 model's
outputs, old and new side by side (docs/benchmarks.md).

    python bench/fp16_models.py IN.onnx OUT.onnx
"""

import sys

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper


def to_float16(model: onnx.ModelProto) -> onnx.ModelProto:
    graph = model.graph
    for i, t in enumerate(graph.initializer):
        if t.data_type == TensorProto.FLOAT:
            graph.initializer[i].CopyFrom(numpy_helper.from_array(
                numpy_helper.to_array(t).astype(np.float16), t.name))
    for node in graph.node:
        for a in node.attribute:
            if node.op_type == "Cast" and a.name == "to" and a.i == TensorProto.FLOAT:
                a.i = TensorProto.FLOAT16
            if a.name == "value" and a.t.data_type == TensorProto.FLOAT:
                a.t.CopyFrom(numpy_helper.from_array(
                    numpy_helper.to_array(a.t).astype(np.float16), a.t.name))
    for v in (*graph.input, *graph.output):
        if v.type.tensor_type.elem_type == TensorProto.FLOAT:
            v.type.tensor_type.elem_type = TensorProto.FLOAT16
    del graph.value_info[:]
    return model


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python bench/fp16_models.py IN.onnx OUT.onnx")
    model = to_float16(onnx.load(sys.argv[1]))
    onnx.checker.check_model(model)
    onnx.save(model, sys.argv[2])
    print(sys.argv[2])
