"""Write the index.json of a committed tuning directory: the zoo models and batch sizes whose
every kernel picks up one of its records when `cw compile` builds them (what the test suite then
checks, tests/integration/test_tuning.py). Run after `cw tune-compact DB -o cw/tuning/KEY`:

    python bench/tuning_index.py cuda-sm_90 [--models resnet18,resnet50,densenet121]
                                            [--batch-sizes 1,4,16]

Each model is compiled once per batch size (a minute or so each for CUDA); a batch size with
any kernel left untuned stays out of the index, and the table says how far it got.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

from cw.compile import tuning
from cw.compile.compiler import CompileConfig, compile_model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("key", help="the directory under cw/tuning, e.g. cuda-sm_90")
    ap.add_argument("--models", default="resnet18,resnet50,densenet121")
    ap.add_argument("--batch-sizes", default="1,4,16")
    args = ap.parse_args()
    import model_zoo

    where = tuning.COMMITTED_DIR / args.key
    if not (where / tuning.RECORD_FILE).is_file():
        raise SystemExit(f"{where} holds no records: run cw tune-compact into it first")
    kind, _, arch = args.key.partition("-")
    covered: dict[str, list[int]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            onnx_path = Path(tmp) / f"{name}.onnx"
            model_zoo.export(name, onnx_path)
            for b in (int(x) for x in args.batch_sizes.split(",")):
                m = compile_model(onnx_path, Path(tmp) / f"{name}-{b}",
                                  CompileConfig(target=kind, arch=arch, batch_sizes=(b,)))
                k = m.kernels[0]
                full = k.kernels_tuned == k.kernels_total > 0
                print(f"{name} batch {b}: {k.kernels_tuned}/{k.kernels_total} kernels tuned"
                      + ("" if full else " (left out)"), flush=True)
                if full:
                    covered.setdefault(name, []).append(b)
    if not covered:  # an empty index would make the test suite check nothing
        (where / "index.json").unlink(missing_ok=True)
        raise SystemExit("no model is fully covered at any batch size: no index.json")
    index = {"target": kind, "arch": arch, "models": covered}
    tmp_path = where / "index.json.tmp"
    tmp_path.write_text(json.dumps(index, indent=1) + "\n")
    os.replace(tmp_path, where / "index.json")
    print(f"wrote {where / 'index.json'}: {covered}")


if __name__ == "__main__":
    main()
