"""Compile every zoo model (and ../shared/models) for the CPU and verify against onnxruntime at
batch sizes 1 and 3. Too slow for the test suite (minutes per large model on 2 cores); run it by
hand and record the table in docs/benchmarks.md.

    python bench/zoo_verify.py [--models resnet50,densenet121] [--out /tmp/zoo-verify]
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

import numpy as np

import model_zoo
from cw.bundle import synthetic_input
from cw.compile.compiler import CompileConfig, compile_model
from cw.engine import LocalModel
from cw.verify import max_relative_error, onnx_reference

SHARED_MODELS = Path(__file__).resolve().parents[2] / "shared" / "models"
SHARED_SHAPES = {"super_resolution_opset11": (1, 224, 224),
                 "tiny_transformer_mha_random": (1, 16, 128)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=",".join(model_zoo.MODELS) + "," + ",".join(SHARED_SHAPES))
    ap.add_argument("--out", default="/tmp/cw-zoo-verify")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print("| model | compile s (b1, b4) | max rel. error b1 | max rel. error b3 | run s b4 |")
    print("|---|---|---|---|---|")
    for name in args.models.split(","):
        if name in SHARED_SHAPES:
            onnx_path = SHARED_MODELS / f"{name}.onnx"
        else:
            onnx_path = out / f"{name}.onnx"
            model_zoo.export(name, onnx_path)
        bundle = out / name
        shutil.rmtree(bundle, ignore_errors=True)
        # BERT-base's word embeddings (94 MB) take a page of their own
        pages = {"page_size": 128 << 20} if name == "bert_base" else {}
        manifest = compile_model(onnx_path, bundle, CompileConfig(batch_sizes=(1, 4), **pages))
        model = LocalModel(bundle)
        errors, run_s = [], 0.0
        for batch in (1, 3):
            # (token ids within the vocabulary for a BERT)
            x = synthetic_input(manifest.inputs[0], batch, np.random.default_rng(batch))
            t = time.perf_counter()
            ys = model.run([x])
            run_s = time.perf_counter() - t
            refs = onnx_reference(onnx_path, [x])
            errors.append(max(max_relative_error(y, r) for y, r in zip(ys, refs)))
        compile_s = ", ".join(f"{k.compile_seconds:.0f}" for k in manifest.kernels)
        print(f"| {name} | {compile_s} | {errors[0]:.1e} | {errors[1]:.1e} | {run_s:.1f} |",
              flush=True)
        shutil.rmtree(bundle, ignore_errors=True)


if __name__ == "__main__":
    main()
