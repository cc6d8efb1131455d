"""A model past protobuf's 2 GiB, its weights in a data file beside it (external data): two
80,000 x 4,096 embeddings (1.3 GB each), summed, layer-normed, projected to 16. For checking
that `cw compile` takes such exports, and what it costs:

    python bench/large_model.py DIR
    /usr/bin/time -v cw compile DIR/big.onnx -o OUT --batch-sizes 1,2 --page-size 2GiB
    cw run OUT -i DIR/ids.npy --verify DIR/big.onnx
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx.external_data_helper import convert_model_to_external_data

VOCAB, WIDTH = 80_000, 4_096


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="directory for big.onnx, its data and ids.npy")
    out = parser.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal((VOCAB, WIDTH), dtype=np.float32),
                                       name) for name in ("emb1", "emb2")]
    weights += [numpy_helper.from_array(rng.standard_normal((WIDTH, 16), dtype=np.float32)
                                        * 0.01, "w"),
                numpy_helper.from_array(np.ones(WIDTH, np.float32), "gamma"),
                numpy_helper.from_array(np.zeros(WIDTH, np.float32), "beta")]
    nodes = [helper.make_node("Gather", ["emb1", "ids"], ["a"]),
             helper.make_node("Gather", ["emb2", "ids"], ["b"]),
             helper.make_node("Add", ["a", "b"], ["s"]),
             helper.make_node("LayerNormalization", ["s", "gamma", "beta"], ["n"], axis=-1),
             helper.make_node("MatMul", ["n", "w"], ["y"])]
    graph = helper.make_graph(
        nodes, "big", [helper.make_tensor_value_info("ids", TensorProto.INT64, ["N", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8, 16])], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    convert_model_to_external_data(model, all_tensors_to_one_file=True,
                                   location="big.onnx.data", size_threshold=1024)
    onnx.save(model, out / "big.onnx")
    np.save(out / "ids.npy", rng.integers(0, VOCAB, (2, 8)).astype(np.int64))
    size = (out / "big.onnx.data").stat().st_size
    print(f"wrote {out / 'big.onnx'} and big.onnx.data ({size / 1e9:.2f} GB)")


if __name__ == "__main__":
    main()
